#pragma once
// NCCL for the emulation build (STREAMBP_CUDA_EMULATION with MPI): the subset that
// src/dist/nccl_communicator.cpp calls, over MPI between the ranks of an `mpirun`, so that the
// NCCL communicator's own code runs on the CPU (docs/CUDA.md "Emulated on the CPU"). Signatures
// and semantics are NCCL's (nccl.h of NCCL 2.x): in-place or out-of-place buffers in device
// memory, counts in elements, one communicator per rank made collectively by ncclCommInitRank.
//
// How a collective runs: it is queued on its stream (ordered after what that stream waits for:
// the compute stream's event, in the communicator), and that stream's work, with what it waits
// for, is then run at once: a rank cannot wait for the host's next synchronisation, which another
// rank might reach only after a host collective of its own (the real NCCL progresses on the GPU,
// independently of the host). Within ncclGroupStart/End the group's streams run at its end.
// Counted in sbp::cudaemu::Counters::collective_runs, not as a host wait.
#include <cstddef>

#include "cuda_runtime.h"

struct ncclComm;
using ncclComm_t = ncclComm*;

constexpr int NCCL_UNIQUE_ID_BYTES = 128;
struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
  ncclInt = ncclInt32,
  ncclFloat = ncclFloat32,
  ncclDouble = ncclFloat64,
};

enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

const char* ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);

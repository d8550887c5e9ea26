// The emulated NCCL (nccl.h) over MPI: each collective is one MPI collective on a duplicate of
// MPI_COMM_WORLD, run from the emulated runtime's work queue on host copies of the device
// buffers (MPI forbids overlapping send and receive buffers; NCCL allows in-place calls).
#include "nccl.h"

#include <mpi.h>

#include <climits>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "emulator.h"
#include "runtime_internal.h"

struct ncclComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

namespace sbp::cudaemu {
namespace {

int& group_depth() {
  static int depth = 0;
  return depth;
}
// The streams of the collectives queued inside the open group (run at ncclGroupEnd).
std::vector<cudaStream_t>& group_streams() {
  static std::vector<cudaStream_t>* s = new std::vector<cudaStream_t>;
  return *s;
}

size_t element_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
  }
  return 0;
}

// The MPI type of an NCCL one, or MPI_DATATYPE_NULL for those MPI cannot reduce (16-bit floats:
// the communicator never sends them; the real NCCL takes them).
MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclFloat16:
    case ncclBfloat16: return MPI_DATATYPE_NULL;
  }
  return MPI_DATATYPE_NULL;
}

// ncclAvg has no MPI operation (and the communicator does not use it).
MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    case ncclAvg: return MPI_OP_NULL;
  }
  return MPI_OP_NULL;
}

// A buffer NCCL may use: device memory (the real library faults on pageable host memory).
bool device_buffer(const void* p, size_t bytes) { return bytes == 0 || device_range(p, bytes); }

// Queues `body` behind the kernels queued so far and, outside a group, runs the queue now
// (nccl.h says why not at the next host wait).
void run(cudaStream_t stream, const char* name, std::function<void()> body) {
  enqueue_op(stream, name, std::move(body));
  if (group_depth() == 0) {
    run_collectives({stream});
  } else {
    group_streams().push_back(stream);
  }
}

void mpi_ok(int err, const char* what) {
  if (err != MPI_SUCCESS)
    throw KernelFault(cudaErrorLaunchFailure, std::string("NCCL emulation: ") + what + " failed");
}

}  // namespace
}  // namespace sbp::cudaemu

using namespace sbp::cudaemu;

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::random_device rd;
  for (char& c : id->internal) c = static_cast<char>(rd());
  return ncclSuccess;
}

// Collective over every rank of MPI_COMM_WORLD (the emulation's one shape of communicator):
// `nranks` and `rank` must be the world's, and every rank must pass rank 0's id.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm) return ncclInvalidArgument;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return ncclInvalidUsage;
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (nranks != world_size || rank != world_rank) return ncclInvalidArgument;
  MPI_Comm dup = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS) return ncclSystemError;
  std::vector<char> ids(static_cast<size_t>(nranks) * sizeof id.internal);
  if (MPI_Allgather(id.internal, sizeof id.internal, MPI_CHAR, ids.data(), sizeof id.internal,
                    MPI_CHAR, dup) != MPI_SUCCESS) {
    MPI_Comm_free(&dup);
    return ncclSystemError;
  }
  for (int r = 0; r < nranks; ++r)
    if (std::memcmp(ids.data() + static_cast<size_t>(r) * sizeof id.internal, id.internal,
                    sizeof id.internal) != 0) {
      MPI_Comm_free(&dup);
      return ncclInvalidArgument;  // the real NCCL would hang or fail to connect
    }
  *comm = new ncclComm{dup, rank, nranks};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  drain();  // its queued collectives finish first
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->comm);
  delete comm;
  return ncclSuccess;
}

// Leaves the MPI communicator to the process's end (freeing it would wait for the other ranks).
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth();
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth() == 0) return ncclInvalidUsage;
  if (--group_depth() == 0) {
    const std::vector<cudaStream_t> streams = std::move(group_streams());
    group_streams().clear();
    run_collectives(streams);
  }
  return ncclSuccess;
}

namespace {

// The checks every collective shares; `send` and `recv` in elements.
ncclResult_t check_args(const void* sendbuff, size_t send, const void* recvbuff, size_t recv,
                        ncclDataType_t type, ncclComm_t comm) {
  if (!comm || element_bytes(type) == 0 || mpi_type(type) == MPI_DATATYPE_NULL)
    return ncclInvalidArgument;
  if (send > INT_MAX || recv > INT_MAX) return ncclInvalidArgument;  // MPI's int counts
  const size_t b = element_bytes(type);
  if (!device_buffer(sendbuff, send * b) || !device_buffer(recvbuff, recv * b))
    return ncclInvalidArgument;
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  if (const ncclResult_t e = check_args(sendbuff, count, recvbuff, count, datatype, comm))
    return e;
  if (mpi_op(op) == MPI_OP_NULL) return ncclInvalidArgument;
  run(stream, "ncclAllReduce", [=] {
    const size_t bytes = count * element_bytes(datatype);
    std::vector<char> in(bytes), out(bytes);
    if (bytes) std::memcpy(in.data(), sendbuff, bytes);
    mpi_ok(MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), mpi_type(datatype),
                         mpi_op(op), comm->comm),
           "MPI_Allreduce");
    if (bytes) std::memcpy(recvbuff, out.data(), bytes);
  });
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  if (!comm) return ncclInvalidArgument;
  const size_t sendcount = recvcount * static_cast<size_t>(comm->size);
  if (const ncclResult_t e = check_args(sendbuff, sendcount, recvbuff, recvcount, datatype, comm))
    return e;
  if (mpi_op(op) == MPI_OP_NULL) return ncclInvalidArgument;
  run(stream, "ncclReduceScatter", [=] {
    const size_t b = element_bytes(datatype);
    std::vector<char> in(sendcount * b), out(recvcount * b);
    if (!in.empty()) std::memcpy(in.data(), sendbuff, in.size());
    mpi_ok(MPI_Reduce_scatter_block(in.data(), out.data(), static_cast<int>(recvcount),
                                    mpi_type(datatype), mpi_op(op), comm->comm),
           "MPI_Reduce_scatter_block");
    if (!out.empty()) std::memcpy(recvbuff, out.data(), out.size());
  });
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  if (!comm) return ncclInvalidArgument;
  const size_t recvcount = sendcount * static_cast<size_t>(comm->size);
  if (const ncclResult_t e = check_args(sendbuff, sendcount, recvbuff, recvcount, datatype, comm))
    return e;
  run(stream, "ncclAllGather", [=] {
    const size_t b = element_bytes(datatype);
    std::vector<char> in(sendcount * b), out(recvcount * b);
    if (!in.empty()) std::memcpy(in.data(), sendbuff, in.size());
    mpi_ok(MPI_Allgather(in.data(), static_cast<int>(sendcount), mpi_type(datatype), out.data(),
                         static_cast<int>(sendcount), mpi_type(datatype), comm->comm),
           "MPI_Allgather");
    if (!out.empty()) std::memcpy(recvbuff, out.data(), out.size());
  });
  return ncclSuccess;
}

// sendbuff is read on the root only (NCCL: other ranks may pass anything).
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  if (!comm || root < 0 || root >= comm->size) return ncclInvalidArgument;
  const bool is_root = comm->rank == root;
  if (const ncclResult_t e =
          check_args(is_root ? sendbuff : nullptr, is_root ? count : 0, recvbuff, count, datatype,
                     comm))
    return e;
  run(stream, "ncclBroadcast", [=] {
    const size_t bytes = count * element_bytes(datatype);
    std::vector<char> buf(bytes);
    if (is_root && bytes) std::memcpy(buf.data(), sendbuff, bytes);
    mpi_ok(MPI_Bcast(buf.data(), static_cast<int>(count), mpi_type(datatype), root, comm->comm),
           "MPI_Bcast");
    if (bytes) std::memcpy(recvbuff, buf.data(), bytes);
  });
  return ncclSuccess;
}

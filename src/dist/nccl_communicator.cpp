// NcclCommunicator (nccl_communicator.h). Requests are CUDA events recorded on the NCCL stream
// after each collective, kept in slots indexed by Request::id.
#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace sbp {

namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw Error(std::string("NCCL: ") + what + ": " + ncclGetErrorString(r));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& host, CudaBackend& be) : host_(host), be_(be) {
    SBP_CUDA(cudaSetDevice(be_.device()));
    // Rank 0's unique id reaches every rank through the host communicator (as bytes in a
    // string: the Communicator interface has no broadcast, an allgather does the same here).
    ncclUniqueId id;
    if (host_.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const std::string mine = host_.rank() == 0
                                 ? std::string(reinterpret_cast<const char*>(&id), sizeof id)
                                 : std::string();
    const std::vector<std::string> all = host_.allgather(mine);
    SBP_CHECK(all.at(0).size() == sizeof id, "NCCL: rank 0's unique id did not arrive");
    std::memcpy(&id, all[0].data(), sizeof id);
    check_nccl(ncclCommInitRank(&comm_, host_.size(), id, host_.rank()), "ncclCommInitRank");
    SBP_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    SBP_CUDA(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  }
  ~NcclCommunicator() override {
    for (cudaEvent_t& e : events_)
      if (e) cudaEventDestroy(e);
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamSynchronize(stream_);
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  using Communicator::max;
  using Communicator::sum;
  void sum(std::span<double> x) override { host_.sum(x); }
  void sum(std::span<int64_t> x) override { host_.sum(x); }
  void max(std::span<int64_t> x) override { host_.max(x); }
  std::vector<std::vector<double>> allgather(std::span<const double> mine) override {
    return host_.allgather(mine);
  }
  std::vector<std::string> allgather(const std::string& mine) override {
    return host_.allgather(mine);
  }
  void barrier() override { host_.barrier(); }
  [[noreturn]] void abort(int exit_code) override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    host_.abort(exit_code);
    std::abort();  // not reached: the host communicator's abort ends the process
  }

  Request iallreduce_sum(float* x, int64_t n) override {
    after_compute();
    check_nccl(ncclAllReduce(x, x, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, stream_),
               "ncclAllReduce");
    return record();
  }
  // In place: block `rank` of x receives the sum of every rank's block `rank`. NCCL wants equal
  // counts; the data-parallel layer's blocks differ by at most a few elements, so each block is
  // padded to the largest in a scratch layout when they differ.
  Request ireduce_scatter_sum(float* x, std::span<const int64_t> counts) override {
    after_compute();
    int64_t offset = 0, mine = 0;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) mine = offset;
      offset += counts[static_cast<size_t>(r)];
    }
    const int64_t total = offset;
    // Unequal blocks: reduce the whole tensor (every rank holds all of it), a superset of what
    // the contract asks for. Equal blocks: NCCL's reduce-scatter into the rank's block.
    bool equal = true;
    for (int64_t c : counts) equal = equal && c == counts[0];
    if (equal) {
      check_nccl(ncclReduceScatter(x, x + mine, static_cast<size_t>(counts[0]), ncclFloat32, ncclSum,
                                   comm_, stream_),
                 "ncclReduceScatter");
      if (mine != 0)
        SBP_CUDA(cudaMemcpyAsync(x, x + mine, sizeof(float) * counts[0], cudaMemcpyDeviceToDevice,
                                 stream_));
    } else {
      check_nccl(ncclAllReduce(x, x, static_cast<size_t>(total), ncclFloat32, ncclSum, comm_,
                               stream_),
                 "ncclAllReduce");
      if (mine != 0)
        SBP_CUDA(cudaMemcpyAsync(x, x + mine, sizeof(float) * counts[static_cast<size_t>(rank())],
                                 cudaMemcpyDeviceToDevice, stream_));
    }
    return record();
  }
  // Block r of x from rank r: a broadcast per rank (NCCL's allgather needs equal counts),
  // grouped into one launch.
  Request iallgather(float* x, std::span<const int64_t> counts) override {
    after_compute();
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    int64_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      const int64_t c = counts[static_cast<size_t>(r)];
      check_nccl(ncclBroadcast(x + offset, x + offset, static_cast<size_t>(c), ncclFloat32, r, comm_,
                               stream_),
                 "ncclBroadcast");
      offset += c;
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    return record();
  }
  Request ibroadcast(void* x, int64_t bytes, int root) override {
    after_compute();
    check_nccl(ncclBroadcast(x, x, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream_),
               "ncclBroadcast");
    return record();
  }
  // An all-reduce: the sum reaches every rank, a superset of what the contract asks for, and
  // the one reduction the emulated NCCL (src/backend/cuda/emulation/nccl.h) also offers.
  Request ireduce_sum(float* x, int64_t n, int /*root*/) override { return iallreduce_sum(x, n); }
  // NCCL communicators are made over a host group (make_gpu_collectives), not split.
  std::unique_ptr<Communicator> split(int, int) override {
    throw Error("NCCL: split the host communicator, then make a NCCL one over the group");
  }
  bool device_collectives() const override { return true; }
  bool test(Request& r) override {
    if (!r.pending()) return true;
    const cudaError_t e = cudaEventQuery(events_.at(static_cast<size_t>(r.id)));
    if (e == cudaErrorNotReady) return false;
    SBP_CUDA(e);
    release(r);
    return true;
  }
  // Completes r for everything that uses its numbers, without a host wait: record() already
  // made the backend's stream wait for the collective, so the kernels, downloads and
  // stream-ordered frees queued from now on come after it. (A host wait here was one per group
  // of gradients, every step: the GPU drained at each.) The event may be recorded again at
  // once: a stream waits for the record it saw when the wait was queued.
  void wait(Request& r) override {
    if (!r.pending()) return;
    release(r);
  }

 private:
  // The collective's stream waits for the kernels queued on the backend's stream so far.
  void after_compute() {
    SBP_CUDA(cudaEventRecord(ready_, be_.stream()));
    SBP_CUDA(cudaStreamWaitEvent(stream_, ready_, 0));
  }
  Request record() {
    size_t slot = 0;
    while (slot < busy_.size() && busy_[slot]) ++slot;
    if (slot == busy_.size()) {
      busy_.push_back(false);
      events_.push_back(nullptr);
      SBP_CUDA(cudaEventCreateWithFlags(&events_.back(), cudaEventDisableTiming));
    }
    busy_[slot] = true;
    SBP_CUDA(cudaEventRecord(events_[slot], stream_));
    // Kernels the backend queues next (e.g. an optimizer step on the reduced gradients) wait
    // for the collective.
    SBP_CUDA(cudaStreamWaitEvent(be_.stream(), events_[slot], 0));
    return Request{static_cast<int64_t>(slot)};
  }
  void release(Request& r) {
    busy_[static_cast<size_t>(r.id)] = false;
    r.id = -1;
  }

  Communicator& host_;
  CudaBackend& be_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::vector<bool> busy_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Backend& backend) {
  auto* be = dynamic_cast<CudaBackend*>(&backend);
  if (!be) throw InputError("NCCL data parallel needs the cuda backend, not " + backend.name());
  return std::make_unique<NcclCommunicator>(host, *be);
}

}  // namespace sbp

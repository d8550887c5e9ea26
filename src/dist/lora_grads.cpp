#include "dist/lora_grads.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/memory.h"

namespace sbp {

int64_t allreduce_lora_grads(Communicator& comm, const LoraSet& grads) {
  if (comm.size() == 1) return 0;
  if (comm.device_collectives()) {
    // NCCL: the adapters' fp32 gradients in GPU memory, one collective each, all in flight.
    std::vector<Request> reqs;
    int64_t bytes = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      const Tensor& t = grads.tensor(i);
      SBP_CHECK(t.dtype == DType::F32, "allreduce_lora_grads: adapter gradients are F32");
      reqs.push_back(comm.iallreduce_sum(static_cast<float*>(t.data), t.numel()));
      bytes += static_cast<int64_t>(t.nbytes());
    }
    for (Request& r : reqs) comm.wait(r);
    return bytes;
  }
  // One host buffer, adapters in set order (the same order on every rank): (sum of numels).
  std::vector<float> packed;
  packed.reserve(static_cast<size_t>(grads.numel()));
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::vector<float> g = download_f32(grads.tensor(i));
    packed.insert(packed.end(), g.begin(), g.end());
  }
  SBP_CHECK(packed.size() <= static_cast<size_t>(INT32_MAX),
            "allreduce_lora_grads: more than 2^31 - 1 adapter elements in one collective");
  Request r = comm.iallreduce_sum(packed.data(), static_cast<int64_t>(packed.size()));
  comm.wait(r);
  size_t at = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& t = grads.tensor(i);
    const size_t n = static_cast<size_t>(t.numel());
    upload_f32(t, std::span<const float>(packed.data() + at, n));
    at += n;
  }
  return static_cast<int64_t>(packed.size() * sizeof(float));
}

}  // namespace sbp

#include "backend/cpu/checked_cpu_backend.h"

#include <algorithm>
#include <cstring>

namespace sbp {

CheckedCpuBackend::CheckedCpuBackend(size_t reserve_bytes)
    : arena_(reserve_bytes), host_(*this, reserve_bytes) {}

void CheckedCpuBackend::copy_async_impl(void* dst, const void* src, size_t bytes, bool,
                                        CopyTicket ticket) {
  pending_.push_back(Pending{dst, src, bytes, ticket});
}

void CheckedCpuBackend::wait_copy_impl(CopyTicket ticket) {
  const Access device(*this), host(host_);
  size_t done = 0;
  for (; done < pending_.size() && pending_[done].ticket <= ticket; ++done)
    std::memcpy(pending_[done].dst, pending_[done].src, pending_[done].bytes);
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
}

}  // namespace sbp

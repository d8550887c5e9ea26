#pragma once
#include <cstddef>
namespace sbp {
// The machine's copy bandwidth: GB/s of bytes read + written, the median of 5 memcpy of a
// `bytes` buffer (one thread). What bounds decoding at batch 1 (every weight read once per
// token) and the yardstick for the memory-bound kernel families of `bench --profile`.
double measure_copy_bandwidth_gbs(size_t bytes = size_t{512} << 20);
}  // namespace sbp

#pragma once
#include <cstddef>
namespace sbp {
// The machine's copy bandwidth: GB/s of bytes read + written, the median of 5 memcpy of a
// `bytes` buffer (one thread). What bounds decoding at batch 1 (every weight read once per
// token) and the yardstick for the memory-bound kernel families of `bench --profile`.
double measure_copy_bandwidth_gbs(size_t bytes = size_t{512} << 20);
// The machine's read bandwidth with every OpenMP thread: GB/s of a `bytes` fp32 buffer summed
// (each thread its slice), the median of 5. What bounds a decoding step: every weight is read
// once per step and written never, and one thread's memcpy (read + write) leaves much of the
// read bandwidth unused.
double measure_read_bandwidth_gbs(size_t bytes = size_t{512} << 20);
}  // namespace sbp

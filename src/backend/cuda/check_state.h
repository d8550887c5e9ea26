#pragma once
// The device-side index checks' records (checks.cu): plain data, in device memory, copied to
// pinned host memory at the next download or synchronisation.
#include <cstdint>

namespace sbp::cuda {

// Checked calls between two reads; one more waits for the device and reads them early.
constexpr int kCheckRecords = 256;

struct CheckRecord {
  unsigned long long first_bad;  // ULLONG_MAX: none
  long long value;               // the entry at first_bad
};

struct CheckState {
  unsigned failed;           // non-zero once any check failed: indexing kernels return at once
  unsigned unused;
  unsigned long long flops;  // FLOPs counted on the device (attention's visible pairs)
  CheckRecord rec[kCheckRecords];
};

}  // namespace sbp::cuda

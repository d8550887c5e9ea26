#pragma once
// The CUDA backend as the rest of the program sees it: plain C++, no CUDA headers, so that
// backend_factory.cpp (compiled by the host compiler) can build one. Defined in the
// streambp_cuda library, which exists only in builds configured with STREAMBP_CUDA=ON.
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace sbp {

// A backend on GPU `device`. Throws InputError (one line, with CUDA's own error string) when
// there is no such device or no usable driver.
std::unique_ptr<Backend> make_cuda_backend(int device);

// The number of CUDA devices; 0 with *why set to CUDA's error string when there is no driver or
// no device (the tests skip with that reason).
int cuda_device_count(std::string* why);

// Device memory of a CUDA backend: what its arena took from the device at most (segments) and
// what it handed out at most (tensors and the backend's own scratch). -1 for other backends.
int64_t cuda_device_peak_reserved(const Backend& be);
int64_t cuda_device_peak_in_use(const Backend& be);
// Calls a CUDA backend ran a second way because the device or cuBLASLt refused the first (another
// cuBLASLt algorithm, the fp32 attention kernels; each printed once as "gpu fallback: ..."). -1
// for other backends.
int64_t cuda_fallbacks(const Backend& be);
// Starts the two peaks above again from the current holdings (no-op for other backends).
void cuda_reset_device_peaks(Backend& be);
// Waits for every queued kernel of a CUDA backend (timing); no-op for other backends.
void cuda_synchronize(Backend& be);
// GFLOP/s of an (n, n) x (n, n) GEMM with BF16 operands and output, fp32 accumulation, through
// the backend's own gemm (cuBLASLt): the yardstick `bench` reports its steps against. Median
// of 5 timed products (CUDA events) after 2 warm-ups.
double cuda_bf16_gemm_gflops(Backend& be, int64_t n);

}  // namespace sbp

// attention.cpp compiled a second time, for AVX-512, into sbp::cpu::avx512: only in builds for a
// baseline without AVX-512 (STREAMBP_ARCH, e.g. the wheel's x86-64-v3), where
// attention_dispatch.cpp runs it on CPUs that have AVX-512 (the 8 x 32 micro-kernel: 16 FMA
// chains where AVX2 has 12).
//
// How: every header attention.cpp includes is included first, for the baseline; then a GCC target
// pragma turns AVX-512 on for what follows, which is attention.cpp's own code only (its helpers
// sit in an anonymous namespace), and SBP_ATTENTION_AVX512_PRAGMA selects its AVX-512
// micro-kernels (the pragma does not define __AVX512F__ for them: GCC's C++ front end reads the
// whole file first). An inline function of a shared header compiled with AVX-512
// here could otherwise be the copy the linker keeps for the whole program, and fault on a CPU
// without it.
#if defined(STREAMBP_ATTENTION_AVX512_VARIANT)
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_checks.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/storage.h"
#include "backend/cpu/vec_math.h"
#include "core/error.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#define SBP_ATTENTION_NAMESPACE sbp::cpu::avx512
#define SBP_ATTENTION_AVX512_PRAGMA 1
#include "backend/cpu/attention.cpp"  // NOLINT(bugprone-suspicious-include)
#pragma GCC pop_options
#endif

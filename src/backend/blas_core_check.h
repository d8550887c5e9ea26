#pragma once
// Is the BLAS running kernels as wide as this CPU's vectors? A distribution's OpenBLAS knows the
// CPUs of its release: on a newer model its detection falls back to a generic core (Debian 12's
// 0.3.21 runs "Prescott", SSE3 kernels, on some AVX-512 Xeons), and sgemm runs at a quarter of
// the machine's rate without a word. This names the provider, its core and the CPU's vector
// width, decides whether the core is generic for this CPU, and gives the fix.
//
// The choice is made in one place, before OpenBLAS's kernels are used: choose_blas_core() runs
// first thing in main() and, when OpenBLAS chose a generic core on a CPU with AVX2 or AVX-512
// and the user has not set OPENBLAS_CORETYPE, sets it to the matching core and re-executes the
// program (OpenBLAS reads the variable once, when the library is loaded). A user's own
// OPENBLAS_CORETYPE is kept, and warned about if it names a generic core.
#include <string>

namespace sbp::cpu {

struct BlasCoreCheck {
  std::string provider;     // "openblas", "blis", "mkl"
  std::string core;         // the provider's kernel set for this CPU ("" for MKL)
  std::string cpu_vectors;  // the widest the CPU has: "AVX-512", "AVX2" or "SSE"
  bool generic = false;     // the core's kernels are narrower than the CPU's AVX2 / AVX-512
  std::string better_core;  // OPENBLAS_CORETYPE that matches the CPU ("SKYLAKEX", "HASWELL")
  // Our own CPU attention kernels' instruction set, reported beside the BLAS's: "avx512" or
  // "base" (the build's -march; backend/cpu/attention.h says when a build has both).
  std::string attention;
  // How GEMMs with a BF16 operand multiply (backend/cpu/gemm_bf16_dot.h): "dot" (AVX-512 BF16
  // dot products, an F32 operand rounded), "dot2" / "dot3" (split in parts) or "widen" (bf16
  // widened to fp32 for the BLAS's sgemm: CPUs without AVX-512 BF16).
  std::string gemm_bf16;
};

// The check for this process, from the provider as loaded and the CPU's features.
BlasCoreCheck check_blas_core();
// The same decision for a given core name and vector width (tests, and the re-exec).
BlasCoreCheck classify_blas_core(const std::string& provider, const std::string& core,
                                 const std::string& cpu_vectors);

// One line for bench, train and gradcheck when `c.generic`: the provider, its core, the CPU's
// vectors and the fix; "" otherwise.
std::string blas_core_warning(const BlasCoreCheck& c);

// At the start of main(): if OpenBLAS chose a generic core for this CPU and OPENBLAS_CORETYPE is
// unset, sets it to the better core and re-executes /proc/self/exe with the same arguments
// (once: STREAMBP_BLAS_CORE_CHOSEN marks the second run). Returns only if it did not re-execute.
void choose_blas_core(char** argv);

}  // namespace sbp::cpu

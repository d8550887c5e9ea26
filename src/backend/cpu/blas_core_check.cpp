#include "backend/blas_core_check.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/attention.h"
#include "backend/cpu/blas_info.h"
#include "backend/cpu/gemm_bf16_dot.h"

namespace sbp::cpu {

namespace {

std::string cpu_vector_width() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "AVX-512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "AVX2";
  return "SSE";
#else
  return "";  // not x86: no judgement
#endif
}

bool same_name(const std::string& a, const char* b) { return strcasecmp(a.c_str(), b) == 0; }

}  // namespace

BlasCoreCheck classify_blas_core(const std::string& provider, const std::string& core,
                                 const std::string& cpu_vectors) {
  BlasCoreCheck c{provider, core, cpu_vectors, false, "", "", ""};  // attention, gemm_bf16: set by the caller
  const bool wide = cpu_vectors == "AVX-512" || cpu_vectors == "AVX2";
  if (!wide) return c;
  if (provider == "openblas") {
    // OpenBLAS's x86 cores with AVX2 + FMA kernels or wider; every other core on such a CPU
    // (Prescott, Core2, Nehalem, Sandybridge, Barcelona, Bulldozer, ...) is a fallback. Zen and
    // Haswell on an AVX-512 CPU are not: their AVX2 kernels measured level with BLIS's on an
    // AVX-512 AMD EPYC (docs/BENCHMARKS.md).
    bool good = false;
    for (const char* n : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
      good = good || same_name(core, n);
    c.generic = !good;
    c.better_core = cpu_vectors == "AVX-512" ? "SKYLAKEX" : "HASWELL";
  } else if (provider == "blis") {
    c.generic = same_name(core, "generic");
  }
  return c;
}

BlasCoreCheck check_blas_core() {
  BlasCoreCheck c = classify_blas_core(blas_provider(), blas_core(), cpu_vector_width());
  c.attention = attention_isa();
  c.gemm_bf16 = gemm_bf16_isa();
  return c;
}

std::string blas_core_warning(const BlasCoreCheck& c) {
  if (!c.generic) return "";
  std::string fix;
  if (c.provider == "openblas")
    fix = "OPENBLAS_CORETYPE=" + c.better_core +
          " in the environment (streambp sets it itself "
          "unless you set another), or a build with STREAMBP_BLAS=mkl (Intel) / blis (AMD)";
  else
    fix = "a build with another provider (STREAMBP_BLAS=openblas|mkl, README \"Build\")";
  return "warning: " + c.provider + " runs its generic '" + c.core + "' kernels on this " +
         c.cpu_vectors + " CPU: GEMMs at a fraction of the machine's rate; fix: " + fix;
}

void choose_blas_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("STREAMBP_BLAS_CORE_CHOSEN")) return;
  const BlasCoreCheck c = check_blas_core();
  if (!c.generic || c.provider != "openblas") return;
  std::fprintf(stderr,
               "streambp: OpenBLAS chose its generic '%s' kernels on this %s CPU; running with "
               "OPENBLAS_CORETYPE=%s\n",
               c.core.c_str(), c.cpu_vectors.c_str(), c.better_core.c_str());
  setenv("OPENBLAS_CORETYPE", c.better_core.c_str(), 1);
  setenv("STREAMBP_BLAS_CORE_CHOSEN", c.core.c_str(), 1);
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc): carry on with the generic kernels; bench/train/gradcheck warn.
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace sbp::cpu

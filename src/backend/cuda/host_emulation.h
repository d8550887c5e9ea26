#pragma once
// A host emulation of the CUDA features the attention kernels use, so that their indexing,
// masking, shared-memory layout and synchronisation run in the CPU tests
// (tests/backend/cuda_attention_tc_test.cpp compiles attention_tc.cu and attention_simt.cu with
// g++ against this header). Not part of any build of the library: a translation unit defines
// SBP_CUDA_EMULATION and includes this header before the kernels' source.
//
// What it models:
//  - a launch runs the grid's blocks one after another; a block's threads are real threads
//    (blockDim.x of them) with their own threadIdx, so __syncthreads, __syncwarp and
//    __shfl_xor_sync are real barriers and exchanges, and a missing barrier can show as a race
//    (and under AddressSanitizer, an index out of a tensor as an error);
//  - dynamic shared memory is a fresh allocation per block, filled with NaN: a value read before
//    it is written poisons the result instead of passing as zero;
//  - WMMA (m16n16k8, TF32 inputs, fp32 accumulator): every lane holds the whole tile (the real
//    per-lane layout is opaque, and the kernels only use elementwise fragment operations), the
//    products read only the TF32 bits of their inputs as the tensor cores do (an operand that
//    is not split loses its low 13 bits here too), and load/store check the pointer alignment
//    (32 bytes) and leading dimension (multiple of 4 floats) that WMMA requires.
// Exited threads leave their barriers (arrive_and_drop), as exited GPU threads stop counting.
#if defined(__CUDACC__)
#error "host_emulation.h is for host (g++) test builds of CUDA kernels only"
#endif

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using cudaStream_t = void*;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

namespace sbp::emu {

struct Warp {
  std::barrier<> barrier{32};
  double slot[32] = {};
};

// The calling thread's place in the launch.
struct ThreadState {
  dim3 thread, block, block_dim, grid_dim;
  void* smem = nullptr;
  std::barrier<>* block_barrier = nullptr;
  Warp* warp = nullptr;
};
inline thread_local ThreadState tls;

inline void* dynamic_shared() { return tls.smem; }

// What the last launch asked for (tests check it against the device limit they passed).
struct LaunchRecord {
  size_t max_smem_bytes = 0;
  int max_threads = 0;
  int64_t blocks = 0;
};
inline LaunchRecord& launches() {
  static LaunchRecord r;
  return r;
}

template <class Kernel, class Args>
void launch(Kernel kernel, dim3 grid, int threads, size_t smem_bytes, const Args& args) {
  if (threads <= 0 || threads % 32 != 0 || threads > 1024)
    throw std::invalid_argument("emulated launch: " + std::to_string(threads) + " threads");
  LaunchRecord& rec = launches();
  rec.max_smem_bytes = std::max(rec.max_smem_bytes, smem_bytes);
  rec.max_threads = std::max(rec.max_threads, threads);
  const size_t floats = (smem_bytes + sizeof(float) - 1) / sizeof(float);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        ++rec.blocks;
        std::vector<float> buffer(floats + 32, std::numeric_limits<float>::quiet_NaN());
        void* base = buffer.data();
        size_t space = buffer.size() * sizeof(float);
        float* smem = static_cast<float*>(std::align(128, floats * sizeof(float), base, space));
        std::barrier<> block_barrier(threads);
        std::vector<std::unique_ptr<Warp>> warps;
        for (int w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<Warp>());
        std::vector<std::thread> pool;
        pool.reserve(static_cast<size_t>(threads));
        for (int t = 0; t < threads; ++t)
          pool.emplace_back([&, t] {
            tls = ThreadState{dim3(static_cast<unsigned>(t)), dim3(bx, by, bz),
                              dim3(static_cast<unsigned>(threads)), grid, smem,
                              &block_barrier, warps[static_cast<size_t>(t / 32)].get()};
            kernel(args);
            tls.warp->barrier.arrive_and_drop();
            tls.block_barrier->arrive_and_drop();
          });
        for (std::thread& th : pool) th.join();
      }
}

}  // namespace sbp::emu

#define threadIdx (::sbp::emu::tls.thread)
#define blockIdx (::sbp::emu::tls.block)
#define blockDim (::sbp::emu::tls.block_dim)
#define gridDim (::sbp::emu::tls.grid_dim)

inline void __syncthreads() { sbp::emu::tls.block_barrier->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { sbp::emu::tls.warp->barrier.arrive_and_wait(); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  sbp::emu::Warp& w = *sbp::emu::tls.warp;
  const unsigned lane = threadIdx.x % 32;
  w.slot[lane] = static_cast<double>(v);  // exact for float, int and double
  w.barrier.arrive_and_wait();
  const T r = static_cast<T>(w.slot[lane ^ static_cast<unsigned>(lane_mask)]);
  w.barrier.arrive_and_wait();  // nobody overwrites a slot before every lane has read
  return r;
}
template <class T>
T min(T a, T b) {
  return b < a ? b : a;
}
template <class T>
T max(T a, T b) {
  return a < b ? b : a;
}

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}  // namespace precision
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int kRows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int kCols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr bool kColMajor = std::is_same_v<Layout, col_major>;
  static constexpr int num_elements = kRows * kCols;
  float x[num_elements];
};

inline void check_operand(const void* p, unsigned ldm) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    throw std::logic_error("wmma: pointer not 32-byte aligned");
  if (ldm % 4 != 0) throw std::logic_error("wmma: leading dimension not a multiple of 4");
}

// Element (r, c) of a fragment's tile from memory, row- or column-major.
template <class Frag>
void load_tile(Frag& f, const float* p, unsigned ldm, bool col) {
  check_operand(p, ldm);
  for (int r = 0; r < Frag::kRows; ++r)
    for (int c = 0; c < Frag::kCols; ++c)
      f.x[r * Frag::kCols + c] = col ? p[static_cast<size_t>(c) * ldm + r]
                                     : p[static_cast<size_t>(r) * ldm + c];
}
template <class Use, int M, int N, int K, class T, class Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const float* p, unsigned ldm) {
  load_tile(f, p, ldm, fragment<Use, M, N, K, T, Layout>::kColMajor);
}
template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm,
                      layout_t layout) {
  load_tile(f, p, ldm, layout == mem_col_major);
}
// Every lane holds the same tile; lane 0 writes it (the kernels synchronise before reading).
template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm,
                       layout_t layout) {
  check_operand(p, ldm);
  if (threadIdx.x % 32 != 0) return;
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_col_major ? p[static_cast<size_t>(c) * ldm + r]
                               : p[static_cast<size_t>(r) * ldm + c]) = f.x[r * N + c];
}
template <class Frag>
void fill_fragment(Frag& f, float v) {
  for (float& e : f.x) e = v;
}
// The tensor cores read the TF32 bits of their inputs (the low 13 mantissa bits are ignored).
inline float tf32_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u &= 0xffffe000u;
  std::memcpy(&v, &u, 4);
  return v;
}
template <int M, int N, int K, class LA, class LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d,
              const fragment<matrix_a, M, N, K, precision::tf32, LA>& a,
              const fragment<matrix_b, M, N, K, precision::tf32, LB>& b,
              const fragment<accumulator, M, N, K, float>& c) {
  float out[M * N];
  for (int r = 0; r < M; ++r)
    for (int n = 0; n < N; ++n) {
      float s = c.x[r * N + n];
      for (int k = 0; k < K; ++k) s += tf32_bits(a.x[r * K + k]) * tf32_bits(b.x[k * N + n]);
      out[r * N + n] = s;
    }
  std::memcpy(d.x, out, sizeof(out));
}

}  // namespace nvcuda::wmma

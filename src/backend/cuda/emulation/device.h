#pragma once
// The device side of the emulated CUDA runtime (STREAMBP_CUDA_EMULATION builds, README
// "CUDA emulation"): what a kernel body sees when a .cu file is compiled by g++ instead of nvcc.
//  - __global__/__device__ are plain functions; a launch (SBP_LAUNCH, backend/cuda/launch.h) is
//    queued on its stream and run at the next synchronisation point by scheduler.cpp;
//  - every thread of a block is a fibre with its own threadIdx; __syncthreads, __syncwarp and
//    the warp shuffles/votes are real barriers between the fibres, which run in a new random
//    order after every barrier, so that a missing barrier shows as a wrong or NaN result;
//  - static __shared__ arrays live in one linker section that is filled with NaN bytes before
//    every block (function templates' statics are not: GCC keeps them in their COMDAT section);
//    dynamic shared memory is a NaN-filled buffer per block;
//  - atomics are plain read-modify-writes: the fibres of a launch run on one host thread. Two
//    blocks of a launch run as if at the same time (block_pairs.cpp): the second one's atomics
//    are applied again onto the merged memory, so that both blocks' atomics count.
#if defined(__CUDACC__)
#error "emulation/device.h is for the g++ emulation build only"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __align__(n) alignas(n)
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ __attribute__((section("sbp_cudaemu_shared"))) static

namespace sbp::cudaemu {

// The running fibre's place in its launch: what the hardware keeps in special registers.
struct ThreadContext {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
  unsigned linear = 0;  // thread index within the block (x fastest)
  void* dynamic_smem = nullptr;
};
// The fibre running now (scheduler.cpp). Global state of the emulated hardware: fibres run on
// the one host thread that drains the stream queue, and threadIdx must cost a load, not a
// thread_local lookup.
extern ThreadContext* current_thread;

inline void* dynamic_shared() { return current_thread->dynamic_smem; }

// Set while the second block of a concurrent pair runs (block_pairs.cpp): its atomics are
// recorded to be applied again after the merge. Global state of the emulated hardware, as
// current_thread.
extern bool pair_recording_atomics;
void pair_atomic(void* p, size_t bytes, std::function<void()> replay);

// Barriers (scheduler.cpp): every live thread of the block / the live lanes of `mask` in the
// calling thread's warp.
void sync_block();
void sync_warp(unsigned mask);
// Warp exchange: every lane in `mask` publishes `bits`; returns what lane `src` published.
uint64_t warp_exchange(unsigned mask, uint64_t bits, unsigned src);
// Every lane in `mask` publishes `pred`; returns the ballot of the live lanes.
unsigned warp_ballot(unsigned mask, bool pred);

inline unsigned lane_id() { return current_thread->linear % 32; }

template <class T>
T shuffle_from(unsigned mask, T v, unsigned src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a wide type");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(mask, bits, src);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}

// Queues a kernel on `stream` after checking the launch as the runtime does (runtime.cpp).
// `fn` identifies the kernel for cudaFuncSetAttribute; `body` runs one thread of it.
void enqueue_launch(const char* name, const void* fn, dim3 grid, dim3 block, size_t smem,
                    void* stream, std::function<void()> body);

// The launch of SBP_LAUNCH: arguments are converted to the kernel's parameter types and copied
// now, as a real launch copies them into the kernel's parameter buffer.
template <class... P, class... A>
void launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
            void* stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
  enqueue_launch(name, reinterpret_cast<const void*>(kernel), grid, block, smem, stream,
                 [kernel, params] { std::apply(kernel, *params); });
}

}  // namespace sbp::cudaemu

#define threadIdx (::sbp::cudaemu::current_thread->thread_idx)
#define blockIdx (::sbp::cudaemu::current_thread->block_idx)
#define blockDim (::sbp::cudaemu::current_thread->block_dim)
#define gridDim (::sbp::cudaemu::current_thread->grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads() { sbp::cudaemu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { sbp::cudaemu::sync_warp(mask); }
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const unsigned lane = sbp::cudaemu::lane_id();
  const unsigned base = lane & ~static_cast<unsigned>(width - 1);
  unsigned src = lane ^ static_cast<unsigned>(lane_mask);
  if (src < base || src >= base + static_cast<unsigned>(width)) src = lane;
  return sbp::cudaemu::shuffle_from(mask, v, src);
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const unsigned lane = sbp::cudaemu::lane_id();
  const unsigned base = lane & ~static_cast<unsigned>(width - 1);
  return sbp::cudaemu::shuffle_from(mask, v, base + static_cast<unsigned>(src_lane % width));
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned lane = sbp::cudaemu::lane_id();
  const unsigned base = lane & ~static_cast<unsigned>(width - 1);
  const unsigned src = lane + delta < base + static_cast<unsigned>(width) ? lane + delta : lane;
  return sbp::cudaemu::shuffle_from(mask, v, src);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned lane = sbp::cudaemu::lane_id();
  const unsigned base = lane & ~static_cast<unsigned>(width - 1);
  const unsigned src = lane >= base + delta ? lane - delta : lane;
  return sbp::cudaemu::shuffle_from(mask, v, src);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return sbp::cudaemu::warp_ballot(mask, pred != 0);
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  return __ballot_sync(mask, pred) == __ballot_sync(mask, 1);
}

template <class T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  if (sbp::cudaemu::pair_recording_atomics)
    sbp::cudaemu::pair_atomic(p, sizeof(T), [p, v] { *p = *p + v; });
  return old;
}
template <class T>
T atomicMin(T* p, T v) {
  const T old = *p;
  if (v < old) *p = v;
  if (sbp::cudaemu::pair_recording_atomics)
    sbp::cudaemu::pair_atomic(p, sizeof(T), [p, v] { if (v < *p) *p = v; });
  return old;
}
template <class T>
T atomicMax(T* p, T v) {
  const T old = *p;
  if (old < v) *p = v;
  if (sbp::cudaemu::pair_recording_atomics)
    sbp::cudaemu::pair_atomic(p, sizeof(T), [p, v] { if (*p < v) *p = v; });
  return old;
}
template <class T>
T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  if (sbp::cudaemu::pair_recording_atomics) sbp::cudaemu::pair_atomic(p, sizeof(T), [p, v] { *p = v; });
  return old;
}
template <class T>
T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  if (sbp::cudaemu::pair_recording_atomics)
    sbp::cudaemu::pair_atomic(p, sizeof(T), [p, compare, v] { if (*p == compare) *p = v; });
  return old;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// CUDA's overloaded min/max for device code.
template <class T>
T min(T a, T b) {
  return b < a ? b : a;
}
template <class T>
T max(T a, T b) {
  return a < b ? b : a;
}

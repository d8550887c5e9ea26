// The emulated device's execution of one launch on the calling host thread: the threads of a
// block as fibres (a small x86-64 context switch below: ucontext's swapcontext makes a system
// call per switch, too slow for the whole suite); the blocks in a random order, seeded per
// launch, two of them (a random block and the next) as if at the same time (block_pairs.cpp:
// the second sees device memory as it was before the first ran, and bytes both changed are
// compared), then the others one after another. A kernel whose blocks race on an output (a
// non-atomic read-modify-write of one element by two blocks, or overlapping writes) loses an
// update or is reported; one whose blocks depend on the order they run in sees another order.
// STREAMBP_CUDA_EMULATION_BLOCK_PAIRS: how many launches of each kernel (by name) run a pair:
// `all` (the default), a number (the first that many launches with two or more blocks), 0.
//
// A fibre runs until it reaches a barrier (__syncthreads, __syncwarp, a shuffle or ballot) or
// exits. When no fibre can run, the barriers whose participants have all arrived release them
// (exited threads no longer count, as on the GPU), and the released fibres run again in a new
// random order. A barrier that can never complete (a __syncthreads some threads skip while
// others wait) is a fault, not a hang. The orders are random per block but seeded by the launch
// count, so a failure reproduces.
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <cstring>
#include <exception>
#include <limits>
#include <random>
#include <vector>

#include "emulator.h"
#include "runtime_internal.h"

#if !defined(__x86_64__)
#error "the CUDA emulation's fibres are written for x86-64"
#endif

// Saves the callee-saved registers on the current stack, stores its pointer in *save, switches
// to `load` (a stack saved the same way, or a new fibre's prepared one) and returns there.
extern "C" void sbp_cudaemu_switch(void** save, void* load);
asm(R"(
  .text
  .globl sbp_cudaemu_switch
  .type sbp_cudaemu_switch, @function
sbp_cudaemu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size sbp_cudaemu_switch, .-sbp_cudaemu_switch
)");

// Static __shared__ arrays (device.h): weak, so that a program without kernels links.
extern "C" __attribute__((weak)) char __start_sbp_cudaemu_shared[];
extern "C" __attribute__((weak)) char __stop_sbp_cudaemu_shared[];

namespace sbp::cudaemu {

ThreadContext* current_thread = nullptr;

namespace {

constexpr size_t kStackBytes = 256 * 1024;  // WMMA fragments hold whole tiles per lane

enum class State { ready, at_block, at_warp, done };

struct Block {
  int n = 0;                       // threads
  std::vector<ThreadContext> ctx;  // per thread
  std::vector<State> state;
  std::vector<unsigned> warp_mask;  // the mask each waiting lane passed
  std::vector<void*> sp;            // saved stack pointers
  void* scheduler_sp = nullptr;
  int running = -1;
  int live = 0;
  const std::function<void()>* body = nullptr;
  std::exception_ptr fault;
  uint64_t slot[1024];  // warp exchange slots, by thread
};

Block* g_block = nullptr;  // the block being run (one host thread drains the queue)
std::vector<void*> g_stacks;  // reused between launches
uint64_t g_launch = 0;

void* stack(int i) {
  while (static_cast<int>(g_stacks.size()) <= i) {
    const size_t guard = 4096;
    void* m = mmap(nullptr, kStackBytes + guard, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw KernelFault(cudaErrorLaunchOutOfResources, "no memory for fibres");
    mprotect(m, guard, PROT_NONE);  // a stack overflow faults instead of corrupting
    g_stacks.push_back(m);
  }
  return static_cast<char*>(g_stacks[static_cast<size_t>(i)]) + 4096 + kStackBytes;
}

void yield() {
  Block& b = *g_block;
  sbp_cudaemu_switch(&b.sp[static_cast<size_t>(b.running)], b.scheduler_sp);
}

[[noreturn]] void fibre_entry() {
  Block& b = *g_block;
  const int id = b.running;
  try {
    (*b.body)();
  } catch (...) {
    if (!b.fault) b.fault = std::current_exception();
  }
  b.state[static_cast<size_t>(id)] = State::done;
  --b.live;
  void* dead = nullptr;
  sbp_cudaemu_switch(&dead, b.scheduler_sp);
  __builtin_unreachable();
}

// A new fibre's stack: six zero registers, then fibre_entry as the return address (entered
// with the stack 8 bytes below 16-byte alignment, as after a call).
void* prepare(void* top) {
  auto* sp = reinterpret_cast<uintptr_t*>(reinterpret_cast<uintptr_t>(top) & ~uintptr_t{15});
  *--sp = 0;
  *--sp = reinterpret_cast<uintptr_t>(&fibre_entry);
  for (int r = 0; r < 6; ++r) *--sp = 0;
  return sp;
}

// Whether the warp barrier of lanes [t0, t1) is complete: every live lane in the mask of the
// first waiting lane has arrived.
bool warp_complete(const Block& b, int t0, int t1) {
  unsigned mask = 0;
  for (int t = t0; t < t1; ++t)
    if (b.state[static_cast<size_t>(t)] == State::at_warp) {
      mask = b.warp_mask[static_cast<size_t>(t)];
      break;
    }
  if (mask == 0) return false;
  for (int t = t0; t < t1; ++t) {
    if (!(mask >> (t - t0) & 1u)) continue;
    const State s = b.state[static_cast<size_t>(t)];
    if (s != State::done && s != State::at_warp) return false;
  }
  return true;
}

// One block: warps in a random order, each run as far as it can go (through its warp
// barriers, up to the next __syncthreads or its end) before the next warp starts, its lanes in a
// random order between warp barriers. A warp therefore runs ahead of the others as far as the
// program allows, which is what exposes a missing __syncthreads; the lane order exposes a
// missing __syncwarp. After every __syncthreads the warp order is drawn again.
void run_block(Block& b, std::mt19937_64& rng) {
  const int warps = (b.n + 31) / 32;
  std::vector<int> warp_order(static_cast<size_t>(warps));
  for (int w = 0; w < warps; ++w) warp_order[static_cast<size_t>(w)] = w;
  std::vector<int> lanes;
  lanes.reserve(32);
  for (;;) {
    std::shuffle(warp_order.begin(), warp_order.end(), rng);
    for (int w : warp_order) {
      const int t0 = 32 * w, t1 = std::min(b.n, t0 + 32);
      for (;;) {
        lanes.clear();
        for (int t = t0; t < t1; ++t)
          if (b.state[static_cast<size_t>(t)] == State::ready) lanes.push_back(t);
        if (lanes.empty()) break;
        std::shuffle(lanes.begin(), lanes.end(), rng);
        for (int t : lanes) {
          b.running = t;
          current_thread = &b.ctx[static_cast<size_t>(t)];
          sbp_cudaemu_switch(&b.scheduler_sp, b.sp[static_cast<size_t>(t)]);
          if (b.fault) return;
        }
        // Lanes whose warp barrier is complete go on.
        if (warp_complete(b, t0, t1))
          for (int t = t0; t < t1; ++t) {
            State& st = b.state[static_cast<size_t>(t)];
            if (st == State::at_warp) st = State::ready;
          }
      }
    }
    if (b.live == 0) return;
    bool all_at_block = true;
    for (int t = 0; t < b.n; ++t) {
      const State s = b.state[static_cast<size_t>(t)];
      if (s != State::done && s != State::at_block) all_at_block = false;
    }
    if (!all_at_block)
      throw KernelFault(cudaErrorLaunchTimeout,
                        "a barrier can never complete (a __syncthreads or __syncwarp that some "
                        "threads of the block or warp skip): the kernel would hang");
    for (State& s : b.state)
      if (s == State::at_block) s = State::ready;
  }
}

// Whether this launch of `name` runs a concurrent pair (STREAMBP_CUDA_EMULATION_BLOCK_PAIRS).
bool run_pair(const char* name) {
  static const int64_t per_kernel = [] {
    const char* v = std::getenv("STREAMBP_CUDA_EMULATION_BLOCK_PAIRS");
    if (!v || !*v || std::string(v) == "all") return int64_t{-1};
    return static_cast<int64_t>(std::strtoll(v, nullptr, 10));
  }();
  if (per_kernel < 0) return true;
  static std::map<std::string, int64_t>* runs = new std::map<std::string, int64_t>;
  return (*runs)[name]++ < per_kernel;
}

}  // namespace

[[noreturn]] void kernel_fault(int cuda_error, const char* what) {
  throw KernelFault(cuda_error, what);
}

void sync_block() {
  Block& b = *g_block;
  b.state[static_cast<size_t>(b.running)] = State::at_block;
  yield();
}

void sync_warp(unsigned mask) {
  Block& b = *g_block;
  b.warp_mask[static_cast<size_t>(b.running)] = mask;
  b.state[static_cast<size_t>(b.running)] = State::at_warp;
  yield();
}

uint64_t warp_exchange(unsigned mask, uint64_t bits, unsigned src) {
  Block& b = *g_block;
  const int me = b.running;
  const int w0 = me / 32 * 32;
  b.slot[me] = bits;
  sync_warp(mask);
  const int from = w0 + static_cast<int>(src % 32);
  // A lane that is not in the mask or has exited published nothing: its slot reads as NaN bits.
  const uint64_t r = from < b.n && (mask >> (from - w0) & 1u) &&
                             b.state[static_cast<size_t>(from)] != State::done
                         ? b.slot[from]
                         : ~uint64_t{0};
  sync_warp(mask);  // nobody overwrites a slot before every lane has read
  return r;
}

unsigned warp_ballot(unsigned mask, bool pred) {
  Block& b = *g_block;
  const int me = b.running;
  const int w0 = me / 32 * 32, w1 = std::min(b.n, w0 + 32);
  b.slot[me] = pred ? 1 : 0;
  sync_warp(mask);
  unsigned r = 0;
  for (int u = w0; u < w1; ++u)
    if ((mask >> (u - w0) & 1u) && b.state[static_cast<size_t>(u)] != State::done && b.slot[u])
      r |= 1u << (u - w0);
  sync_warp(mask);
  return r;
}

void run_kernel(const char* name, dim3 grid, dim3 block, size_t smem,
                const std::function<void()>& body) {
  const int n = static_cast<int>(block.x * block.y * block.z);
  Block b;
  b.n = n;
  b.ctx.resize(static_cast<size_t>(n));
  b.body = &body;
  for (int t = 0; t < n; ++t) stack(t);
  // Dynamic shared memory: 128-byte aligned, NaN in every float.
  std::vector<float> dyn((smem + 128) / sizeof(float) + 32);
  void* base = dyn.data();
  size_t space = dyn.size() * sizeof(float);
  void* smem_p = std::align(128, smem, base, space);
  std::mt19937_64 rng(0x5b9d3c1full + ++g_launch);
  Block* outer = g_block;
  g_block = &b;
  struct Restore {
    Block* outer;
    ~Restore() { g_block = outer; }
  } restore{outer};
  // The blocks' order: a random block and the next as a concurrent pair first, then the others
  // in a random order.
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  std::vector<uint64_t> order;
  order.reserve(blocks);
  const bool pair = blocks >= 2 && run_pair(name);
  if (pair) {
    // Neighbours (in x, then y, z): where an off-by-one boundary makes two blocks overlap.
    const uint64_t first = rng() % (blocks - 1), second = first + 1;
    order = {first, second};
    for (uint64_t i = 0; i < blocks; ++i)
      if (i != first && i != second) order.push_back(i);
    std::shuffle(order.begin() + 2, order.end(), rng);
  } else {
    for (uint64_t i = 0; i < blocks; ++i) order.push_back(i);
    std::shuffle(order.begin(), order.end(), rng);
  }
  auto coord = [&](uint64_t i) {
    return uint3{static_cast<unsigned>(i % grid.x), static_cast<unsigned>(i / grid.x % grid.y),
                 static_cast<unsigned>(i / (uint64_t{grid.x} * grid.y))};
  };
  try {
    for (uint64_t at = 0; at < blocks; ++at) {
      const uint3 bi = coord(order[at]);
      if (pair && at == 0) pair_begin();
      std::fill(dyn.begin(), dyn.end(), std::numeric_limits<float>::quiet_NaN());
      if (__start_sbp_cudaemu_shared && __stop_sbp_cudaemu_shared)
        std::memset(__start_sbp_cudaemu_shared, 0xff,
                    static_cast<size_t>(__stop_sbp_cudaemu_shared - __start_sbp_cudaemu_shared));
      b.state.assign(static_cast<size_t>(n), State::ready);
      b.warp_mask.assign(static_cast<size_t>(n), 0xffffffffu);
      b.sp.resize(static_cast<size_t>(n));
      b.live = n;
      for (int t = 0; t < n; ++t) {
        ThreadContext& c = b.ctx[static_cast<size_t>(t)];
        c.thread_idx = uint3{static_cast<unsigned>(t) % block.x,
                             static_cast<unsigned>(t) / block.x % block.y,
                             static_cast<unsigned>(t) / (block.x * block.y)};
        c.block_idx = bi;
        c.block_dim = block;
        c.grid_dim = grid;
        c.linear = static_cast<unsigned>(t);
        c.dynamic_smem = smem_p;
        b.sp[static_cast<size_t>(t)] = prepare(stack(t));
      }
      run_block(b, rng);
      current_thread = nullptr;
      if (b.fault) {
        try {
          std::rethrow_exception(b.fault);
        } catch (const KernelFault&) {
          throw;
        } catch (const std::exception& e) {
          throw KernelFault(cudaErrorLaunchFailure, std::string(name) + ": " + e.what());
        }
      }
      if (pair && at == 0) pair_switch();
      if (pair && at == 1) {
        const std::string race = pair_end();
        if (!race.empty()) {
          const uint3 a = coord(order[0]);
          char who[160];
          std::snprintf(who, sizeof who, "%s: blocks (%u, %u, %u) and (%u, %u, %u) ", name, a.x,
                        a.y, a.z, bi.x, bi.y, bi.z);
          throw KernelFault(cudaErrorLaunchFailure,
                            who + race +
                                ": blocks of one launch race on that output (a non-atomic "
                                "update, or writes that overlap)");
        }
      }
    }
  } catch (...) {
    current_thread = nullptr;
    pair_abort();
    throw;
  }
}

}  // namespace sbp::cudaemu

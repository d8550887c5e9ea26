// The emulated CUDA runtime (cuda_runtime.h): devices, memory, errors, copies, launches.
// Streams and events are streams.cpp's.
//
// Global state: the CUDA runtime is process-global (devices, allocations, the sticky error, the
// per-function attributes), so this emulation of it is too: one Runtime object, below. Nothing
// else in the program holds global mutable state.
//
// Memory: cudaMalloc maps pages PROT_NONE, the allocation placed at the END of its pages (at a
// 256-byte boundary, as cudaMalloc aligns) with one guard page after them; queued work lifts the
// protection while it runs and sets it back after, so any host access to device memory outside
// kernels and copies faults at once (the SIGSEGV handler names the allocation), and a kernel
// that reads or writes past an allocation's 256-byte-rounded end faults too (with the backend's
// STREAMBP_CUDA_ARENA=per_tensor every tensor is an allocation of its own). cudaMallocHost
// memory is ordinary host memory.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "emulator.h"
#include "runtime_internal.h"

namespace sbp::cudaemu {

namespace {

constexpr size_t kDefaultOptin = 232448;  // H100/H200: 227 KiB per block with the opt-in
constexpr size_t kDefaultSmem = 48 * 1024;

// A cudaMalloc allocation: the pointer handed out (its key), its bytes, and its mapping.
struct Allocation {
  size_t bytes;
  uintptr_t map;      // the mapping's start
  size_t map_bytes;   // its pages up to the allocation's end (the guard page follows)
};

struct Runtime;
Runtime& rt();

struct Runtime {
  std::recursive_mutex mu;
  int devices = 1;
  int current = 0;
  cudaError_t last = cudaSuccess;
  cudaError_t sticky = cudaSuccess;
  std::map<uintptr_t, Allocation> device;  // by the pointer handed out
  std::map<uintptr_t, size_t> pinned;       // cudaMallocHost: base -> bytes
  std::map<const void*, int> max_dynamic_smem;  // cudaFuncSetAttribute opt-ins
  bool draining = false;  // queued work is running (device memory open)
  // Refusals a real device may make that the attributes do not predict (emulator.h):
  size_t smem_accepted = kDefaultOptin;  // STREAMBP_CUDA_EMULATION_MAX_SMEM
  std::string refuse_launch;             // STREAMBP_CUDA_EMULATION_REFUSE_LAUNCH
  bool launch_blocking = false;
  bool trace_syncs = false;  // STREAMBP_CUDA_EMULATION_TRACE_SYNCS=1: a backtrace per wait
  size_t memory_limit = size_t{16} << 30;
  size_t memory_used = 0;
  int malloc_fail_after = -1;
  cudaError_t malloc_fail_error = cudaSuccess;
  Counters counters;
  long page = 4096;

  Runtime() {
    page = sysconf(_SC_PAGESIZE);
    if (const char* d = std::getenv("STREAMBP_CUDA_EMULATION_DEVICES")) devices = std::atoi(d);
    if (const char* m = std::getenv("STREAMBP_CUDA_EMULATION_MEMORY"))
      memory_limit = std::strtoull(m, nullptr, 10);
    if (const char* m = std::getenv("STREAMBP_CUDA_EMULATION_MAX_SMEM"))
      smem_accepted = std::min<size_t>(std::strtoull(m, nullptr, 10), kDefaultOptin);
    if (const char* k = std::getenv("STREAMBP_CUDA_EMULATION_REFUSE_LAUNCH")) refuse_launch = k;
    const char* b = std::getenv("CUDA_LAUNCH_BLOCKING");
    launch_blocking = b && std::string(b) == "1";
    const char* t = std::getenv("STREAMBP_CUDA_EMULATION_TRACE_SYNCS");
    trace_syncs = t && std::string(t) == "1";
    // STREAMBP_CUDA_EMULATION_REPORT=1: the counters on stderr at exit (for measurements).
    const char* rep = std::getenv("STREAMBP_CUDA_EMULATION_REPORT");
    if (rep && std::string(rep) == "1")
      std::atexit([] {
        const Counters& c = rt().counters;
        std::fprintf(stderr,
                     "cuda emulation: %lld host waits with work queued (%lld wait calls), %lld "
                     "launches, %lld blocks, %lld NCCL collective runs\n",
                     static_cast<long long>(c.syncs), static_cast<long long>(c.sync_calls),
                     static_cast<long long>(c.launches), static_cast<long long>(c.blocks_run),
                     static_cast<long long>(c.collective_runs));
      });
  }
};

Runtime& rt() {
  static Runtime* r = new Runtime;  // never destroyed: backends may outlive static destructors
  return *r;
}

size_t round_pages(size_t n, long page) {
  return (n + static_cast<size_t>(page) - 1) / static_cast<size_t>(page) * static_cast<size_t>(page);
}

void protect_all(int prot) {
  for (const auto& [base, a] : rt().device) mprotect(reinterpret_cast<void*>(a.map), a.map_bytes, prot);
}

}  // namespace

// Returns the error a call must report: the sticky one, else `e` (recorded as the last error).
cudaError_t report(cudaError_t e) {
  Runtime& r = rt();
  if (r.sticky != cudaSuccess) return r.sticky;
  if (e != cudaSuccess) r.last = e;
  return e;
}

namespace {

bool is_device(const void* p, size_t bytes) {
  Runtime& r = rt();
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = r.device.upper_bound(a);
  if (it == r.device.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second.bytes;
}

// Whether [p, p + bytes) lies in one cudaMallocHost block (a copy from inside one is as
// asynchronous as from its start).
bool is_pinned(const void* p, size_t bytes) {
  Runtime& r = rt();
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = r.pinned.upper_bound(a);
  if (it == r.pinned.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

void segv_handler(int sig, siginfo_t* info, void*) {
  if (pair_on_fault(info->si_addr)) return;  // a write block_pairs.cpp records: retried
  Runtime& r = rt();
  const auto a = reinterpret_cast<uintptr_t>(info->si_addr);
  // The allocation whose pages or guard page hold the address.
  const Allocation* hit = nullptr;
  uintptr_t base = 0;
  auto it = r.device.upper_bound(a);
  if (it != r.device.end() && a >= it->second.map) {  // in the head of its first page
    hit = &it->second;
    base = it->first;
  } else if (it != r.device.begin()) {
    --it;
    if (a < it->second.map + it->second.map_bytes + static_cast<size_t>(r.page)) {
      hit = &it->second;
      base = it->first;
    }
  }
  char msg[256];
  int n;
  if (hit) {
    const char* where = !r.draining ? nullptr : a >= base ? "past the end of" : "before the start of";
    if (where)
      n = std::snprintf(msg, sizeof msg,
                        "cuda emulation: a kernel accessed %p, %s the device allocation at %p "
                        "(%zu bytes)\n",
                        info->si_addr, where, reinterpret_cast<void*>(base), hit->bytes);
    else
      n = std::snprintf(msg, sizeof msg,
                        "cuda emulation: host code touched device memory at %p (allocation at %p, "
                        "%zu bytes) outside a kernel or copy\n",
                        info->si_addr, reinterpret_cast<void*>(base), hit->bytes);
  } else {
    n = std::snprintf(msg, sizeof msg, "cuda emulation: segmentation fault at %p\n", info->si_addr);
  }
  if (n > 0) (void)!write(2, msg, static_cast<size_t>(n));
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_segv_handler() {
  static bool done = false;
  if (done) return;
  done = true;
  struct sigaction sa {};
  sa.sa_sigaction = segv_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
}

}  // namespace

// ---- what streams.cpp and block_pairs.cpp need (runtime_internal.h) ----

bool faulted() { return rt().sticky != cudaSuccess; }

void set_sticky(int error, const char* op, const char* what) {
  rt().sticky = static_cast<cudaError_t>(error);
  std::fprintf(stderr, "cuda emulation: %s: %s\n", op, what);
}

Counters& counters_ref() { return rt().counters; }

bool trace_syncs() { return rt().trace_syncs; }

void open_device_memory() {
  rt().draining = true;
  protect_all(PROT_READ | PROT_WRITE);
}

void close_device_memory() {
  protect_all(PROT_NONE);
  rt().draining = false;
}

void protect_device(int prot) { protect_all(prot); }

bool device_range(const void* p, size_t bytes) { return is_device(p, bytes); }

void enqueue_launch(const char* name, const void* fn, dim3 grid, dim3 block, size_t smem,
                    void* stream, std::function<void()> body) {
  Runtime& r = rt();
  std::lock_guard lock(r.mu);
  if (r.sticky != cudaSuccess) return;
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 ||
      block.z > 64 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
    r.last = cudaErrorInvalidConfiguration;
    return;
  }
  size_t allowed = kDefaultSmem;
  if (const auto it = r.max_dynamic_smem.find(fn); it != r.max_dynamic_smem.end())
    allowed = static_cast<size_t>(it->second);
  // Past the default 48 KiB, what the device grants (STREAMBP_CUDA_EMULATION_MAX_SMEM).
  const bool too_much = smem > allowed || (smem > kDefaultSmem && smem > r.smem_accepted);
  if (too_much || !is_stream(static_cast<cudaStream_t>(stream))) {
    r.last = too_much ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle;
    return;
  }
  // A kernel the device cannot run in this configuration (registers, say): what a real launch
  // reports as out of resources, told by the test (emulator.h).
  if (!r.refuse_launch.empty() && std::strstr(name, r.refuse_launch.c_str())) {
    r.last = cudaErrorLaunchOutOfResources;
    return;
  }
  ++r.counters.launches;
  r.counters.max_dynamic_smem = std::max(r.counters.max_dynamic_smem, smem);
  const Dep launched = enqueue_on(
      static_cast<cudaStream_t>(stream), name,
      [name = std::string(name), grid, block, smem, body = std::move(body)] {
        Runtime& rr = rt();
        ++rr.counters.kernels_run;
        rr.counters.blocks_run += int64_t{grid.x} * grid.y * grid.z;
        run_kernel(name.c_str(), grid, block, smem, body);
      });
  if (r.launch_blocking) host_wait({launched});
}

// ---- tests (emulator.h) ----

Counters counters() { return rt().counters; }

void inject_malloc_error(cudaError_t error, int after) {
  rt().malloc_fail_after = after;
  rt().malloc_fail_error = error;
}

void inject_sticky_error(cudaError_t error, const std::string& what) {
  rt().sticky = error;
  std::fprintf(stderr, "cuda emulation: injected fault: %s\n", what.c_str());
}

void reset_errors() {
  Runtime& r = rt();
  r.sticky = cudaSuccess;
  r.last = cudaSuccess;
  r.malloc_fail_after = -1;
  r.counters.max_dynamic_smem = 0;
  r.max_dynamic_smem.clear();
}

void set_device_memory(size_t bytes) { rt().memory_limit = bytes; }

void set_max_shared_memory(size_t bytes) { rt().smem_accepted = std::min(bytes, kDefaultOptin); }

void refuse_launches(const std::string& name_part) { rt().refuse_launch = name_part; }

}  // namespace sbp::cudaemu

using namespace sbp::cudaemu;

// ---- errors ----

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchTimeout: return "cudaErrorLaunchTimeout";
    case cudaErrorIllegalInstruction: return "cudaErrorIllegalInstruction";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchTimeout: return "the launch timed out and was terminated";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return cudaGetErrorName(e);
  }
}

cudaError_t cudaGetLastError() {
  Runtime& r = rt();
  if (r.sticky != cudaSuccess) return r.sticky;
  const cudaError_t e = r.last;
  r.last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  Runtime& r = rt();
  return r.sticky != cudaSuccess ? r.sticky : r.last;
}

// ---- devices ----

cudaError_t cudaGetDeviceCount(int* count) {
  *count = rt().devices;
  return report(rt().devices > 0 ? cudaSuccess : cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= rt().devices) return report(cudaErrorInvalidDevice);
  rt().current = device;
  install_segv_handler();
  return report(cudaSuccess);
}

cudaError_t cudaGetDevice(int* device) {
  *device = rt().current;
  return report(cudaSuccess);
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= rt().devices) return report(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(kDefaultSmem); break;
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(kDefaultOptin); break;
    default: return report(cudaErrorInvalidValue);
  }
  return report(cudaSuccess);
}

cudaError_t cudaDeviceSynchronize() {
  host_wait_all();
  return report(cudaSuccess);
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *total = rt().memory_limit;
  *free = rt().memory_limit - rt().memory_used;
  return report(cudaSuccess);
}

// ---- memory ----

cudaError_t cudaMalloc(void** p, size_t bytes) {
  Runtime& r = rt();
  *p = nullptr;
  install_segv_handler();  // device memory's faults are named (and block_pairs.cpp's recorded)
  if (r.sticky != cudaSuccess) return r.sticky;
  if (r.malloc_fail_after >= 0 && r.malloc_fail_after-- == 0) {
    const cudaError_t e = r.malloc_fail_error;
    if (e != cudaErrorMemoryAllocation && e != cudaSuccess) r.sticky = e;  // a fault, sticky
    return report(e);
  }
  if (bytes == 0) return report(cudaSuccess);
  if (r.memory_used + bytes > r.memory_limit) return report(cudaErrorMemoryAllocation);
  // The allocation ends where its pages end (rounded up to 256 bytes, cudaMalloc's alignment),
  // and the guard page follows: a kernel that runs past it faults.
  const size_t pages = round_pages(bytes, r.page);
  const size_t mapped = pages + static_cast<size_t>(r.page);  // + guard
  void* m = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return report(cudaErrorMemoryAllocation);
  const uintptr_t map = reinterpret_cast<uintptr_t>(m);
  const uintptr_t base = map + pages - (bytes + 255) / 256 * 256;
  r.device[base] = Allocation{bytes, map, pages};
  r.memory_used += bytes;
  *p = reinterpret_cast<void*>(base);
  return report(cudaSuccess);
}

cudaError_t cudaFree(void* p) {
  Runtime& r = rt();
  if (!p) return report(cudaSuccess);
  host_wait_all();  // cudaFree synchronises the device
  const auto it = r.device.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.device.end()) return report(cudaErrorInvalidDevicePointer);
  munmap(reinterpret_cast<void*>(it->second.map), it->second.map_bytes + static_cast<size_t>(r.page));
  r.memory_used -= it->second.bytes;
  r.device.erase(it);
  return report(cudaSuccess);
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::aligned_alloc(4096, round_pages(bytes == 0 ? 1 : bytes, 4096));
  if (!*p) return report(cudaErrorMemoryAllocation);
  rt().pinned[reinterpret_cast<uintptr_t>(*p)] = bytes == 0 ? 1 : bytes;
  return report(cudaSuccess);
}

cudaError_t cudaFreeHost(void* p) {
  if (!p) return report(cudaSuccess);
  if (!rt().pinned.erase(reinterpret_cast<uintptr_t>(p))) return report(cudaErrorInvalidValue);
  std::free(p);
  return report(cudaSuccess);
}

namespace {

// The direction cudaMemcpyDefault infers, or the stated one checked against the pointers.
cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind& kind) {
  const bool d_dev = is_device(dst, bytes), s_dev = is_device(src, bytes);
  if (kind == cudaMemcpyDefault)
    kind = d_dev ? (s_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                 : (s_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  const bool want_d = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_s = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (want_d != d_dev || want_s != s_dev) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

// Pageable host memory (CUDA runtime API, "API synchronization behavior"): a copy from it is
// staged before the call returns, so the caller may reuse its buffer at once, and it "might be
// synchronous with respect to host": the driver may first wait for the stream. The emulation
// always does, and counts it as a host wait when the stream has work queued (inside a training
// step that is a stall the real device may make: the backend stages its uploads through pinned
// memory instead). A copy into pageable memory returns only once it is done: a host wait.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  Runtime& r = rt();
  if (r.sticky != cudaSuccess) return r.sticky;
  if (bytes == 0) return report(cudaSuccess);
  if (!is_stream(stream)) return report(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_copy(dst, src, bytes, kind); e != cudaSuccess) return report(e);
  const bool from_host = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost;
  if (from_host && !is_pinned(src, bytes)) {
    host_wait({last_on(stream)});
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    enqueue_on(stream, "cudaMemcpyAsync", [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  } else {
    const Dep copy = enqueue_on(stream, "cudaMemcpyAsync", [dst, src, bytes] { std::memcpy(dst, src, bytes); });
    if (kind == cudaMemcpyDeviceToHost && !is_pinned(dst, bytes)) host_wait({copy});
  }
  return report(cudaSuccess);
}

// On the legacy default stream, and returns once the copy is done.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e != cudaSuccess) return e;
  host_wait({last_on(nullptr)});
  return report(cudaSuccess);
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  Runtime& r = rt();
  if (r.sticky != cudaSuccess) return r.sticky;
  if (bytes == 0) return report(cudaSuccess);
  if (!is_stream(stream)) return report(cudaErrorInvalidResourceHandle);
  if (!is_device(p, bytes)) return report(cudaErrorInvalidValue);
  enqueue_on(stream, "cudaMemsetAsync", [p, value, bytes] { std::memset(p, value, bytes); });
  return report(cudaSuccess);
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr);
  if (e == cudaSuccess) host_wait({last_on(nullptr)});
  return report(e);
}

// Above STREAMBP_CUDA_EMULATION_MAX_SMEM the opt-in is refused although the device attribute
// reports more: as for a kernel whose static shared memory takes part of the block's share.
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<size_t>(value) > rt().smem_accepted)
      return report(cudaErrorInvalidValue);
    rt().max_dynamic_smem[func] = value;
  }
  return report(cudaSuccess);
}

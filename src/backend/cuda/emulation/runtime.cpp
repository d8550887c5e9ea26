// The emulated CUDA runtime (cuda_runtime.h): devices, memory, streams, events, errors.
//
// Global state: the CUDA runtime is process-global (devices, allocations, the sticky error, the
// per-function attributes), so this emulation of it is too: one Runtime object, below. Nothing
// else in the program holds global mutable state.
//
// Streams: every operation (kernel, copy, memset, event record, cuBLASLt call) is appended to
// one queue in issue order, which is a valid order for any set of streams; the queue runs only
// when the host waits for the device. Until then the device memory holds the old bytes, so a
// host read that forgot its sync reads stale data, and the sync counter says how often the
// host waited.
//
// Memory: cudaMalloc maps pages PROT_NONE (plus one guard page); the queue lifts the protection
// while it runs and sets it back after, so any host access to device memory outside kernels and
// copies faults at once (the SIGSEGV handler names the allocation). cudaMallocHost memory is
// ordinary host memory.
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "emulator.h"
#include "runtime_internal.h"

struct CUstream_st {
  unsigned flags = 0;
};
struct CUevent_st {
  bool recorded = false, done = false;
  std::chrono::steady_clock::time_point when;
};

namespace sbp::cudaemu {

namespace {

constexpr size_t kDefaultOptin = 232448;  // H100/H200: 227 KiB per block with the opt-in
constexpr size_t kDefaultSmem = 48 * 1024;

struct Op {
  std::string name;
  std::function<void()> run;
};

struct Runtime;
Runtime& rt();

struct Runtime {
  std::recursive_mutex mu;
  int devices = 1;
  int current = 0;
  cudaError_t last = cudaSuccess;
  cudaError_t sticky = cudaSuccess;
  std::map<uintptr_t, size_t> device;  // base -> usable bytes (one guard page follows)
  std::set<uintptr_t> pinned;
  std::set<CUstream_st*> streams;
  std::set<CUevent_st*> events;
  std::map<const void*, int> max_dynamic_smem;  // cudaFuncSetAttribute opt-ins
  std::deque<Op> queue;
  bool draining = false;
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
  Runtime& r = rt();
  for (const auto& [base, bytes] : r.device)
    mprotect(reinterpret_cast<void*>(base), round_pages(bytes, r.page), prot);
}

// Returns the error a call must report: the sticky one, else `e` (recorded as the last error).
cudaError_t report(cudaError_t e) {
  Runtime& r = rt();
  if (r.sticky != cudaSuccess) return r.sticky;
  if (e != cudaSuccess) r.last = e;
  return e;
}

bool is_device(const void* p, size_t bytes) {
  Runtime& r = rt();
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = r.device.upper_bound(a);
  if (it == r.device.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

bool is_stream(cudaStream_t s) { return s == nullptr || rt().streams.count(s) > 0; }

void enqueue(std::string name, std::function<void()> run) {
  rt().queue.push_back(Op{std::move(name), std::move(run)});
}

void segv_handler(int sig, siginfo_t* info, void*) {
  Runtime& r = rt();
  const auto a = reinterpret_cast<uintptr_t>(info->si_addr);
  auto it = r.device.upper_bound(a);
  char msg[256];
  int n;
  if (it != r.device.begin() && a < std::prev(it)->first + round_pages(std::prev(it)->second, r.page) +
                                        static_cast<size_t>(r.page)) {
    --it;
    if (r.draining)
      n = std::snprintf(msg, sizeof msg,
                        "cuda emulation: a kernel accessed %p, past the end of the device "
                        "allocation at %p (%zu bytes)\n",
                        info->si_addr, reinterpret_cast<void*>(it->first), it->second);
    else
      n = std::snprintf(msg, sizeof msg,
                        "cuda emulation: host code touched device memory at %p (allocation at %p, "
                        "%zu bytes) outside a kernel or copy\n",
                        info->si_addr, reinterpret_cast<void*>(it->first), it->second);
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

// ---- the queue ----

void drain() {
  Runtime& r = rt();
  if (r.draining || r.queue.empty()) return;
  r.draining = true;
  protect_all(PROT_READ | PROT_WRITE);
  while (!r.queue.empty()) {
    Op op = std::move(r.queue.front());
    r.queue.pop_front();
    if (r.sticky != cudaSuccess) continue;  // a faulted context runs nothing more
    try {
      op.run();
    } catch (const KernelFault& f) {
      r.sticky = static_cast<cudaError_t>(f.error);
      std::fprintf(stderr, "cuda emulation: %s: %s\n", op.name.c_str(), f.what());
    }
  }
  protect_all(PROT_NONE);
  r.draining = false;
}

// A host wait. Counted when the device has queued work to finish (a wait on an idle device costs
// no GPU time): that is what a step must not do.
void host_wait() {
  Runtime& r = rt();
  ++r.counters.sync_calls;
  if (!r.queue.empty()) {
    ++r.counters.syncs;
    if (r.trace_syncs) {
      std::fprintf(stderr, "cuda emulation: host wait #%lld with %zu queued operations, from:\n",
                   static_cast<long long>(r.counters.syncs), r.queue.size());
      void* frames[32];
      backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    }
  }
  drain();
}

void run_collectives() {
  ++rt().counters.collective_runs;
  drain();
}

void enqueue_op(const char* name, std::function<void()> run) { enqueue(name, std::move(run)); }

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
  if (smem > allowed || !is_stream(static_cast<cudaStream_t>(stream))) {
    r.last = smem > allowed ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle;
    return;
  }
  ++r.counters.launches;
  r.counters.max_dynamic_smem = std::max(r.counters.max_dynamic_smem, smem);
  enqueue(name, [name = std::string(name), grid, block, smem, body = std::move(body)] {
    Runtime& rr = rt();
    ++rr.counters.kernels_run;
    rr.counters.blocks_run += int64_t{grid.x} * grid.y * grid.z;
    run_kernel(name.c_str(), grid, block, smem, body);
  });
  if (r.launch_blocking) host_wait();
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
}

void set_device_memory(size_t bytes) { rt().memory_limit = bytes; }

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
  host_wait();
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
  if (r.sticky != cudaSuccess) return r.sticky;
  if (r.malloc_fail_after >= 0 && r.malloc_fail_after-- == 0) {
    const cudaError_t e = r.malloc_fail_error;
    if (e != cudaErrorMemoryAllocation && e != cudaSuccess) r.sticky = e;  // a fault, sticky
    return report(e);
  }
  if (bytes == 0) return report(cudaSuccess);
  if (r.memory_used + bytes > r.memory_limit) return report(cudaErrorMemoryAllocation);
  const size_t mapped = round_pages(bytes, r.page) + static_cast<size_t>(r.page);  // + guard
  void* m = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return report(cudaErrorMemoryAllocation);
  r.device[reinterpret_cast<uintptr_t>(m)] = bytes;
  r.memory_used += bytes;
  *p = m;
  return report(cudaSuccess);
}

cudaError_t cudaFree(void* p) {
  Runtime& r = rt();
  if (!p) return report(cudaSuccess);
  host_wait();  // cudaFree synchronises the device
  const auto it = r.device.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.device.end()) return report(cudaErrorInvalidDevicePointer);
  munmap(p, round_pages(it->second, r.page) + static_cast<size_t>(r.page));
  r.memory_used -= it->second;
  r.device.erase(it);
  return report(cudaSuccess);
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::aligned_alloc(4096, round_pages(bytes == 0 ? 1 : bytes, 4096));
  if (!*p) return report(cudaErrorMemoryAllocation);
  rt().pinned.insert(reinterpret_cast<uintptr_t>(*p));
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

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  Runtime& r = rt();
  if (r.sticky != cudaSuccess) return r.sticky;
  if (bytes == 0) return report(cudaSuccess);
  if (!is_stream(stream)) return report(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_copy(dst, src, bytes, kind); e != cudaSuccess) return report(e);
  const bool src_pinned = r.pinned.count(reinterpret_cast<uintptr_t>(src)) > 0;
  const bool dst_pinned = r.pinned.count(reinterpret_cast<uintptr_t>(dst)) > 0;
  if ((kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) && !src_pinned) {
    // From pageable memory the runtime stages the bytes before it returns: the caller may
    // reuse its buffer at once (documented API synchronisation behaviour).
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
    enqueue("cudaMemcpyAsync", [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  } else {
    enqueue("cudaMemcpyAsync", [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  // To pageable host memory the call returns only once the copy is done: a host wait.
  if (kind == cudaMemcpyDeviceToHost && !dst_pinned) host_wait();
  return report(cudaSuccess);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e != cudaSuccess) return e;
  if (kind != cudaMemcpyDeviceToHost || rt().pinned.count(reinterpret_cast<uintptr_t>(dst)))
    host_wait();
  return report(cudaSuccess);
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  Runtime& r = rt();
  if (r.sticky != cudaSuccess) return r.sticky;
  if (bytes == 0) return report(cudaSuccess);
  if (!is_stream(stream)) return report(cudaErrorInvalidResourceHandle);
  if (!is_device(p, bytes)) return report(cudaErrorInvalidValue);
  enqueue("cudaMemsetAsync", [p, value, bytes] { std::memset(p, value, bytes); });
  return report(cudaSuccess);
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr);
  if (e == cudaSuccess) host_wait();
  return report(e);
}

// ---- streams and events ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new CUstream_st{flags};
  rt().streams.insert(*s);
  return report(cudaSuccess);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s || !rt().streams.erase(s)) return report(cudaErrorInvalidResourceHandle);
  delete s;  // queued work on it still runs (the runtime lets it finish)
  return report(cudaSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (!is_stream(s)) return report(cudaErrorInvalidResourceHandle);
  host_wait();
  return report(cudaSuccess);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  // One queue in issue order: work queued after this call already runs after the event.
  if (!is_stream(s) || !rt().events.count(e)) return report(cudaErrorInvalidResourceHandle);
  return report(cudaSuccess);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st;
  rt().events.insert(*e);
  return report(cudaSuccess);
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!rt().events.erase(e)) return report(cudaErrorInvalidResourceHandle);
  // A record still queued would write to it: let it run first (cheap, and rare).
  drain();
  delete e;
  return report(cudaSuccess);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!rt().events.count(e) || !is_stream(s)) return report(cudaErrorInvalidResourceHandle);
  e->recorded = true;
  e->done = false;
  enqueue("cudaEventRecord", [e] {
    e->done = true;
    e->when = std::chrono::steady_clock::now();
  });
  return report(cudaSuccess);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!rt().events.count(e)) return report(cudaErrorInvalidResourceHandle);
  host_wait();
  return report(cudaSuccess);
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!rt().events.count(e)) return report(cudaErrorInvalidResourceHandle);
  // Nothing runs until the host waits: a pending event stays pending until then, as a real
  // device's may for as long as its work takes. A caller that polls in a loop without ever
  // waiting would spin for ever here (and could on a GPU): ours test once per group
  // (DataParallel::progress) and never loop. Not an error: not made the last error either.
  if (e->recorded && !e->done) return rt().sticky != cudaSuccess ? rt().sticky : cudaErrorNotReady;
  return report(cudaSuccess);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->done || !end->done) return report(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return report(cudaSuccess);
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<size_t>(value) > kDefaultOptin)
      return report(cudaErrorInvalidValue);
    rt().max_dynamic_smem[func] = value;
  }
  return report(cudaSuccess);
}

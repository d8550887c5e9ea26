#pragma once
// Between the emulated runtime's parts (runtime.cpp, streams.cpp, scheduler.cpp,
// block_pairs.cpp, cublaslt.cpp, nccl.cpp); not for the backend.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "device.h"
#include "emulator.h"

namespace sbp::cudaemu {

// A fault inside a kernel or library call: becomes the context's sticky error.
struct KernelFault : std::runtime_error {
  int error;
  KernelFault(int e, const std::string& what) : std::runtime_error(what), error(e) {}
};

// ---- streams (streams.cpp) ----
// Every stream is a queue of its own. An operation runs after the operations before it on its
// stream and after its dependencies (events, the legacy default stream's implicit ordering),
// and nothing else orders it.
struct Queue;
using QueueRef = std::shared_ptr<Queue>;
// "Operation `id` of queue `q` has run": what an event records and a wait waits for. id 0: none.
struct Dep {
  QueueRef q;
  uint64_t id = 0;
};
bool done(const Dep& d);
// Appends `run` to stream s (nullptr: the legacy default stream) after `after`.
Dep enqueue_on(cudaStream_t s, std::string name, std::function<void()> run,
               std::vector<Dep> after = {});
// The last operation queued on s (done when the stream is idle).
Dep last_on(cudaStream_t s);
// Whether s is nullptr or a live stream.
bool is_stream(cudaStream_t s);
// A host wait for `targets`: runs what they need and nothing else. Counted (Counters::syncs)
// when some of it had not run.
void host_wait(const std::vector<Dep>& targets);
void host_wait_all();  // cudaDeviceSynchronize, cudaFree
// Runs what `targets` need without counting a host wait (emulated NCCL collectives).
void run_for(const std::vector<Dep>& targets);

// ---- the runtime's state that the streams need (runtime.cpp) ----
bool faulted();  // a sticky error is set
// The error a call returns: the sticky one, else `e` (recorded as the last error when not
// success).
cudaError_t report(cudaError_t e);
void set_sticky(int error, const char* op, const char* what);  // and prints the fault
Counters& counters_ref();
bool trace_syncs();
// Device memory readable and writable while queued work runs, PROT_NONE otherwise.
void open_device_memory();
void close_device_memory();
// Every allocation's protection (block_pairs.cpp: read-only while it tracks a block's writes).
void protect_device(int prot);

// Runs one launch (scheduler.cpp).
void run_kernel(const char* name, dim3 grid, dim3 block, size_t smem,
                const std::function<void()>& body);
// Appends work to `stream`'s queue; it runs when a host wait needs it.
void enqueue_op(cudaStream_t stream, const char* name, std::function<void()> run);
// Whether [p, p + bytes) lies in one cudaMalloc allocation.
bool device_range(const void* p, size_t bytes);
// Runs every queue, uncounted (NCCL's communicator destruction).
void drain();
// Runs the work of `streams` for emulated NCCL collectives (nccl.h): counted as collective runs
// (Counters::collective_runs), not as host waits.
void run_collectives(const std::vector<cudaStream_t>& streams);

// ---- two blocks of a launch as if at the same time (block_pairs.cpp) ----
// Block A runs with device memory read-only, its writes recorded page by page (write faults);
// then its pages are set back to what they held before, so that block B sees memory as it was
// before the launch; at the end both blocks' writes are merged byte by byte. Bytes both blocks
// wrote with different values are a race between blocks: pair_end names them.
void pair_begin();
void pair_switch();            // between block A and block B
std::string pair_end();        // "" or the race
void pair_abort();             // a fault inside either block: memory readable and writable again
bool pair_on_fault(void* addr);  // from the SIGSEGV handler: a write it recorded
// (pair_atomic, for block B's atomics, is declared in device.h.)

}  // namespace sbp::cudaemu

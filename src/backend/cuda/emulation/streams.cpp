// Streams and events of the emulated CUDA runtime (cuda_runtime.h).
//
// Each stream is a queue of its own. An operation is ordered only after the operations before it
// on its stream and after what it was made to wait for: an event recorded elsewhere
// (cudaStreamWaitEvent), and the legacy default stream's implicit ordering with the blocking
// streams (streams created without cudaStreamNonBlocking). Nothing runs until the host waits
// (a stream, event or device synchronisation, a synchronous copy, a copy between device and
// pageable memory, cudaFree), and a wait runs only what it needs: the work of the stream or event
// it waits for and, transitively, what that work waits for. Work of other streams stays queued,
// as it may on a GPU that has not got to it yet.
//
// Among the operations that may run next, the one issued LAST runs first
// (STREAMBP_CUDA_EMULATION_STREAM_ORDER=latest, the default): every order a GPU may choose for
// independent streams is allowed, and this one inverts the issue order wherever the program
// left two streams unordered. So a copy stream that forgot to wait for the kernel producing its
// source copies the old bytes (the copy was issued after the kernel, and runs before it), and a
// kernel that forgot to wait for the copy filling its input reads the old bytes (issued after the
// copy, it runs first). `issue` runs them in issue order (what the emulation did before each
// stream had its own queue: use it to see whether a failure is an ordering bug), `random` in a
// seeded random order (STREAMBP_CUDA_EMULATION_SEED).
#include <execinfo.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime_internal.h"

namespace sbp::cudaemu {

struct Op {
  uint64_t id = 0;  // issue order, over every stream
  std::string name;
  std::function<void()> run;
  std::vector<Dep> after;  // beyond stream order
};

struct Queue {
  bool blocking = false;  // synchronises with the legacy default stream
  bool legacy = false;    // the legacy default stream itself (stream 0)
  bool destroyed = false;
  std::deque<Op> ops;
  uint64_t issued = 0;  // id of the last operation queued
  uint64_t ran = 0;     // id of the last operation run (a queue runs in order)
};

}  // namespace sbp::cudaemu

// The handles of cuda_runtime.h.
struct CUstream_st {
  unsigned flags = 0;
  sbp::cudaemu::QueueRef q;
};
struct EventState {
  bool recorded = false;
  sbp::cudaemu::Dep at;  // the latest cudaEventRecord
  uint64_t timed = 0;    // the record whose time `when` is
  std::chrono::steady_clock::time_point when;
};
struct CUevent_st {
  std::shared_ptr<EventState> s = std::make_shared<EventState>();
};

namespace sbp::cudaemu {

namespace {

enum class Order { latest, issue, random };

struct Streams {
  uint64_t next_id = 0;
  QueueRef legacy;
  std::vector<QueueRef> queues;  // every queue with a live stream or queued work
  std::vector<CUstream_st*> handles;
  std::vector<CUevent_st*> events;
  Order order = Order::latest;
  std::mt19937_64 rng;
  bool running = false;

  Streams() {
    legacy = std::make_shared<Queue>();
    legacy->blocking = legacy->legacy = true;
    queues.push_back(legacy);
    uint64_t seed = 0x5eed;
    if (const char* s = std::getenv("STREAMBP_CUDA_EMULATION_SEED")) seed = std::strtoull(s, nullptr, 10);
    rng.seed(seed);
    if (const char* o = std::getenv("STREAMBP_CUDA_EMULATION_STREAM_ORDER")) {
      const std::string v(o);
      if (v == "issue") order = Order::issue;
      else if (v == "random") order = Order::random;
      else if (v != "latest" && !v.empty())
        std::fprintf(stderr, "cuda emulation: STREAMBP_CUDA_EMULATION_STREAM_ORDER=%s is not "
                             "latest, issue or random; using latest\n", o);
    }
  }
};

// Global state of the emulated device, as runtime.cpp's (never destroyed: backends may outlive
// static destructors).
Streams& st() {
  static Streams* s = new Streams;
  return *s;
}

QueueRef queue_for(cudaStream_t s) { return s ? s->q : st().legacy; }

// Drops queues whose stream is gone and whose work has run.
void prune() {
  auto& qs = st().queues;
  qs.erase(std::remove_if(qs.begin(), qs.end(),
                          [](const QueueRef& q) { return q->destroyed && q->ops.empty(); }),
           qs.end());
}

// Runs what `targets` need, in the order of st().order among what may run. Returns whether
// anything had to run.
bool run_needed(const std::vector<Dep>& targets) {
  Streams& S = st();
  // Per queue, the last operation that must run: the targets and, transitively, their waits.
  std::unordered_map<Queue*, std::pair<QueueRef, uint64_t>> need;
  std::vector<Dep> work;
  for (const Dep& d : targets)
    if (!done(d)) work.push_back(d);
  if (work.empty()) return false;
  while (!work.empty()) {
    const Dep d = work.back();
    work.pop_back();
    if (done(d)) continue;
    auto& [ref, upto] = need[d.q.get()];
    if (upto >= d.id) continue;
    const uint64_t from = upto;
    ref = d.q;
    upto = d.id;
    for (const Op& op : d.q->ops)
      if (op.id > from && op.id <= d.id)
        for (const Dep& a : op.after)
          if (!done(a)) work.push_back(a);
  }
  if (S.running) return true;  // an operation waiting inside the queue run: it is running it
  S.running = true;
  open_device_memory();
  for (;;) {
    Queue* best = nullptr;
    uint64_t seen = 0;
    for (auto& [q, entry] : need) {
      if (q->ops.empty() || q->ops.front().id > entry.second) continue;
      const Op& f = q->ops.front();
      if (!std::all_of(f.after.begin(), f.after.end(), done)) continue;
      ++seen;
      const bool take = !best || (S.order == Order::latest && f.id > best->ops.front().id) ||
                        (S.order == Order::issue && f.id < best->ops.front().id) ||
                        (S.order == Order::random && S.rng() % seen == 0);
      if (take) best = q;
    }
    if (!best) break;  // everything needed has run (waits refer to earlier operations only)
    Op op = std::move(best->ops.front());
    best->ops.pop_front();
    best->ran = op.id;
    if (faulted()) continue;  // a faulted context runs nothing more
    try {
      op.run();
    } catch (const KernelFault& f) {
      set_sticky(f.error, op.name.c_str(), f.what());
    }
  }
  close_device_memory();
  S.running = false;
  prune();
  return true;
}

}  // namespace

bool done(const Dep& d) { return !d.q || d.q->ran >= d.id; }

Dep enqueue_on(cudaStream_t s, std::string name, std::function<void()> run,
               std::vector<Dep> after) {
  Streams& S = st();
  const QueueRef q = queue_for(s);
  Op op{++S.next_id, std::move(name), std::move(run), std::move(after)};
  // The legacy default stream waits for every blocking stream's work, and they for its.
  if (q->legacy) {
    for (const QueueRef& b : S.queues)
      if (b != q && b->blocking && b->issued > b->ran) op.after.push_back(Dep{b, b->issued});
  } else if (q->blocking && S.legacy->issued > S.legacy->ran) {
    op.after.push_back(Dep{S.legacy, S.legacy->issued});
  }
  q->issued = op.id;
  q->ops.push_back(std::move(op));
  return Dep{q, q->issued};
}

Dep last_on(cudaStream_t s) {
  const QueueRef q = queue_for(s);
  return Dep{q, q->issued};
}

bool is_stream(cudaStream_t s) {
  const auto& h = st().handles;
  return s == nullptr || std::find(h.begin(), h.end(), s) != h.end();
}

void host_wait(const std::vector<Dep>& targets) {
  Counters& c = counters_ref();
  ++c.sync_calls;
  const bool pending = std::any_of(targets.begin(), targets.end(), [](const Dep& d) { return !done(d); });
  if (pending) {
    ++c.syncs;
    if (trace_syncs()) {
      std::fprintf(stderr, "cuda emulation: host wait #%lld with work queued, from:\n",
                   static_cast<long long>(c.syncs));
      void* frames[32];
      backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
    }
  }
  run_needed(targets);
}

namespace {
std::vector<Dep> every_queue() {
  std::vector<Dep> all;
  for (const QueueRef& q : st().queues) all.push_back(Dep{q, q->issued});
  return all;
}
}  // namespace

void host_wait_all() { host_wait(every_queue()); }

void run_for(const std::vector<Dep>& targets) { run_needed(targets); }

void drain() { run_needed(every_queue()); }

void enqueue_op(cudaStream_t stream, const char* name, std::function<void()> run) {
  enqueue_on(stream, name, std::move(run));
}

void run_collectives(const std::vector<cudaStream_t>& streams) {
  ++counters_ref().collective_runs;
  std::vector<Dep> targets;
  for (cudaStream_t s : streams) targets.push_back(last_on(s));
  run_needed(targets);
}

}  // namespace sbp::cudaemu

using namespace sbp::cudaemu;

namespace {
cudaError_t ok_or(cudaError_t e) { return report(e); }
bool is_event(cudaEvent_t e) {
  const auto& ev = st().events;
  return e && std::find(ev.begin(), ev.end(), e) != ev.end();
}
cudaError_t bad_handle() { return report(cudaErrorInvalidResourceHandle); }
}  // namespace

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new CUstream_st{flags, std::make_shared<Queue>()};
  (*s)->q->blocking = (flags & cudaStreamNonBlocking) == 0;
  st().handles.push_back(*s);
  st().queues.push_back((*s)->q);
  return ok_or(cudaSuccess);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  auto& h = st().handles;
  const auto it = s ? std::find(h.begin(), h.end(), s) : h.end();
  if (it == h.end()) return bad_handle();
  h.erase(it);
  s->q->destroyed = true;  // queued work on it still runs (the runtime lets it finish)
  delete s;
  prune();
  return ok_or(cudaSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (!is_stream(s)) return bad_handle();
  host_wait({last_on(s)});
  return ok_or(cudaSuccess);
}

// The stream waits for the event's latest record at the time of the call; a later record does
// not change what it waits for (CUDA runtime API, cudaStreamWaitEvent). An event never recorded:
// nothing to wait for.
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (!is_stream(s) || !is_event(e)) return bad_handle();
  if (e->s->recorded) enqueue_on(s, "cudaStreamWaitEvent", [] {}, {e->s->at});
  return ok_or(cudaSuccess);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st;
  st().events.push_back(*e);
  return ok_or(cudaSuccess);
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }

// Its pending record may still run: the record writes to the shared state, not to the handle.
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  auto& ev = st().events;
  const auto it = e ? std::find(ev.begin(), ev.end(), e) : ev.end();
  if (it == ev.end()) return bad_handle();
  ev.erase(it);
  delete e;
  return ok_or(cudaSuccess);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!is_event(e) || !is_stream(s)) return bad_handle();
  const std::shared_ptr<EventState> state = e->s;
  auto id = std::make_shared<uint64_t>(0);
  const Dep at = enqueue_on(s, "cudaEventRecord", [state, id] {
    state->timed = *id;
    state->when = std::chrono::steady_clock::now();
  });
  *id = at.id;
  state->recorded = true;
  state->at = at;
  return ok_or(cudaSuccess);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!is_event(e)) return bad_handle();
  if (e->s->recorded) host_wait({e->s->at});
  return ok_or(cudaSuccess);
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!is_event(e)) return bad_handle();
  // Nothing runs until the host waits: a pending event stays pending until then, as a real
  // device's may for as long as its work takes. A caller that polls in a loop without ever
  // waiting would spin for ever here (and could on a GPU): ours test once per group
  // (DataParallel::progress) and never loop. Not an error: not made the last error either.
  if (e->s->recorded && !done(e->s->at)) return faulted() ? cudaPeekAtLastError() : cudaErrorNotReady;
  return ok_or(cudaSuccess);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!is_event(start) || !is_event(end)) return bad_handle();
  const EventState &a = *start->s, &b = *end->s;
  if (!a.recorded || !b.recorded || !done(a.at) || !done(b.at) || a.timed != a.at.id ||
      b.timed != b.at.id)
    return ok_or(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(b.when - a.when).count();
  return ok_or(cudaSuccess);
}

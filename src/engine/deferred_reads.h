#pragma once
// Host reads a step leaves for its end (docs/CUDA.md "no host wait in the head").
//
// An asynchronous backend (CUDA) runs a step's work in the order it was queued, and the host
// waits for it only to read a value back. A read that an objective makes in the middle of the
// step (SFT's loss needs the log-probs of its head pass) would drain the device there, once per
// micro-batch. When the value is needed only for the step's loss and statistics, the engine
// instead queues its copy with Backend::download_at_next_wait (no wait; the device buffer is
// released at once) and adds here what the objective does with it. The step runner runs these
// reads after the step's one wait (the gradient norm, which fills every queued copy), or waits
// for them itself when nothing else waited (StepRunner::finish).
//
// Each read holds the host values it reads and runs once, in the order the reads were added:
// the order every rank of a group adds them in, so collectives inside them match.
#include <functional>
#include <utility>
#include <vector>

namespace sbp {

class DeferredReads {
 public:
  DeferredReads() = default;
  DeferredReads(const DeferredReads&) = delete;
  DeferredReads& operator=(const DeferredReads&) = delete;
  DeferredReads(DeferredReads&&) = default;
  DeferredReads& operator=(DeferredReads&&) = default;

  void add(std::function<void()> read) { reads_.push_back(std::move(read)); }
  // Runs every read in order, then forgets them (and what they held).
  void run() {
    std::vector<std::function<void()>> reads;
    reads.swap(reads_);
    for (auto& read : reads) read();
  }
  // Forgets the reads without running them (a step that ended in an exception).
  void clear() { reads_.clear(); }
  bool empty() const { return reads_.empty(); }

 private:
  std::vector<std::function<void()>> reads_;
};

}  // namespace sbp

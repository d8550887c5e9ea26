#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "core/error.h"

namespace sbp {

namespace {

int64_t min_tokens(const PlanSetup& s) {
  return min_planning_tokens(s.objective.kind, s.group_size);
}

StepMemoryOptions memory_options(const PlanSetup& s, int64_t budget) {
  return StepMemoryOptions{.param_dtype = s.param_dtype,
                           .grad_dtype = s.grad_dtype,
                           .adamw = s.adamw,
                           .master_weights = s.master_weights,
                           .budget = budget,
                           .host_budget = budget > 0 ? s.host_budget : 0,
                           .ranks = s.ranks,
                           .zero = s.zero,
                           .context_parallel = s.context_parallel,
                           .generate_prompt_tokens = s.generate_prompt_tokens,
                           .generate_new_tokens = s.generate_new_tokens,
                           .generate_sequences = s.generate_sequences,
                           .lora = s.lora.enabled() ? &s.lora : nullptr};
}

bool within(const PlanSetup& s, int64_t peak) { return s.budget <= 0 || peak <= s.budget; }

// Both peaks of a step as one number for the searches, which see a single non-decreasing
// function of T or of a chunk size against the device budget B: the device peak, or the host
// peak scaled by B / host budget H where that is larger. Rounded up, so that it is <= B exactly
// when the host peak is <= H; both peaks are non-decreasing, so their maximum is too.
int64_t effective_peak(const PlanSetup& s, const PlannedStep& p) {
  if (s.budget <= 0 || s.host_budget <= 0 || p.host_peak_bytes == 0) return p.peak_bytes;
  using Wide = __int128;
  const Wide num = static_cast<Wide>(p.host_peak_bytes) * s.budget;
  const Wide scaled = (num + s.host_budget - 1) / s.host_budget;
  const Wide cap = std::numeric_limits<int64_t>::max();
  return std::max(p.peak_bytes, static_cast<int64_t>(std::min(scaled, cap)));
}

// Largest x in [lo, hi] with f(x) <= limit, for a non-decreasing f with f(lo) = f_lo <= limit
// < f(hi) = f_hi. The peak is piecewise affine and convex in practice (one line per phase of
// the step, the larger one wins), so two estimates bracket the answer: the chord between lo
// and hi (Illinois-weighted) lands at or below it, and the line through the last two runs
// above the limit, extrapolated down, lands at or above it and is exact once both runs sit on
// the same affine piece (then one more run at the answer + 1 proves it). Where f is flat to
// the left the chord would creep by one, so it bisects instead; a bisection after four moves
// of the same end keeps the worst case logarithmic for any monotone f.
template <class F>
int64_t largest_fitting(int64_t lo, int64_t f_lo, int64_t hi, int64_t f_hi, int64_t limit, F f) {
  double g_lo = static_cast<double>(f_lo - limit);  // <= 0, halved by Illinois steps
  double g_hi = static_cast<double>(f_hi - limit);  // > 0
  int64_t hi2 = -1, f_hi2 = 0;                      // the run above the limit before hi
  bool flat_left = false;                           // the last two fitting runs had one peak
  int streak = 0, last_side = 0;
  while (hi - lo > 1) {
    int64_t x;
    if (streak >= 4) {
      x = lo + (hi - lo) / 2;
      streak = 0;
    } else if (hi2 > hi && f_hi2 > f_hi) {
      const double slope = static_cast<double>(f_hi2 - f_hi) / static_cast<double>(hi2 - hi);
      x = hi - static_cast<int64_t>(std::ceil(static_cast<double>(f_hi - limit) / slope));
    } else {
      const double t = -g_lo / (g_hi - g_lo);
      x = lo + static_cast<int64_t>(std::floor(t * static_cast<double>(hi - lo)));
      // f flat to the left (another phase of the step holds the peak) makes the chord creep
      // by one: bisect instead, to find a second run above the limit for the secant.
      if (flat_left) x = lo + (hi - lo) / 2;
    }
    x = std::clamp(x, lo + 1, hi - 1);
    const int64_t fx = f(x);
    const int side = fx <= limit ? -1 : 1;
    if (side < 0) {
      flat_left = fx == f_lo;
      lo = x;
      f_lo = fx;
      g_lo = static_cast<double>(fx - limit);
      if (last_side < 0) g_hi *= 0.5;
    } else {
      hi2 = hi;
      f_hi2 = f_hi;
      hi = x;
      f_hi = fx;
      g_hi = static_cast<double>(fx - limit);
      if (last_side > 0) g_lo *= 0.5;
    }
    streak = side == last_side ? streak + 1 : 1;
    last_side = side;
  }
  return lo;
}

// Shape-only steps of one search, remembered by (T, effective chunk sizes): the searches
// revisit sizes (the chunk search starts where the T search ended, and the final plan is one
// of the runs), and each run at long T with small chunks costs ~0.1 s.
class Prober {
 public:
  Prober(const PlanSetup& setup, const ExecConfig& mode) : setup_(setup), mode_(mode) {}

  const PlannedStep& at(int64_t T, int64_t layer_chunk, int64_t head_chunk) {
    ExecConfig m = mode_;
    m.layer_chunk = layer_chunk;
    m.head_chunk = head_chunk;
    const Key key{T, m.layer_chunk_for(T), m.head_chunk_for(T)};
    auto it = memo_.find(key);
    if (it == memo_.end()) {
      ++runs_;
      it = memo_.emplace(key, plan_at(setup_, m, T)).first;
    }
    return it->second;
  }
  // The step's effective peak (device and host: effective_peak).
  int64_t peak(int64_t T, int64_t layer_chunk, int64_t head_chunk) {
    return effective_peak(setup_, at(T, layer_chunk, head_chunk));
  }
  const ExecConfig& mode() const { return mode_; }
  int runs() const { return runs_; }

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t>;
  const PlanSetup& setup_;
  ExecConfig mode_;
  std::map<Key, PlannedStep> memo_;
  int runs_ = 0;
};

// Candidate chunk sizes for the auto search, in increasing order: the minimum, then every
// multiple of `align` above it and below T, then T.
struct ChunkLadder {
  int64_t first = 0, T = 0, align = 1, first_multiple = 0, n_multiples = 0;
  ChunkLadder(int64_t min_chunk, int64_t seq_len, int64_t a)
      : first(std::min(min_chunk, seq_len)), T(seq_len), align(a) {
    first_multiple = (first / align + 1) * align;
    n_multiples = first_multiple <= T - 1 ? (T - 1 - first_multiple) / align + 1 : 0;
  }
  int64_t last_index() const { return first < T ? n_multiples + 1 : 0; }
  int64_t size(int64_t i) const {
    if (i == 0) return first;
    if (i <= n_multiples) return first_multiple + (i - 1) * align;
    return T;
  }
};

// Largest ladder size whose step fits (the first must fit); peak_of(size) runs the step.
template <class PeakOf>
int64_t largest_fitting_chunk(const ChunkLadder& ladder, int64_t budget, PeakOf peak_of) {
  const int64_t last = ladder.last_index();
  if (last == 0) return ladder.size(0);
  const int64_t peak_last = peak_of(ladder.size(last));
  if (peak_last <= budget) return ladder.size(last);
  auto at_index = [&](int64_t i) { return peak_of(ladder.size(i)); };
  return ladder.size(
      largest_fitting(0, peak_of(ladder.size(0)), last, peak_last, budget, at_index));
}

ChunkedPlan choose_chunks_with(Prober& probe, const PlanSetup& setup, int64_t T,
                               const ChunkRequest& req, const AutoChunkLimits& limits) {
  SBP_CHECK(req.layer >= 0 && req.head >= 0,
            "choose_chunks: chunk sizes must be positive or 0 (auto)");
  SBP_CHECK(limits.min_layer >= 1 && limits.min_head >= 1 && limits.align >= 1,
            "choose_chunks: bad limits");
  const ExecConfig& mode = probe.mode();
  const bool budgeted = setup.budget > 0;
  const bool search_layer = budgeted && req.layer == 0 && mode.layers == LayerMode::stream;
  const bool search_head = budgeted && req.head == 0 && mode.head == HeadMode::chunked;
  const ExecConfig defaults;
  // Start from the smallest sizes the search may pick (or the fixed ones).
  int64_t layer = req.layer > 0 ? req.layer : budgeted ? limits.min_layer : defaults.layer_chunk;
  int64_t head = req.head > 0 ? req.head : budgeted ? limits.min_head : defaults.head_chunk;
  if (within(setup, probe.peak(T, layer, head))) {
    // The two knobs are searched one after the other: the layer phase and the LM-head phase
    // of a step never hold chunk memory at the same time, so they barely interact.
    if (search_layer) {
      layer = largest_fitting_chunk(ChunkLadder(limits.min_layer, T, limits.align), setup.budget,
                                    [&](int64_t c) { return probe.peak(T, c, head); });
    }
    if (search_head) {
      head = largest_fitting_chunk(ChunkLadder(limits.min_head, T, limits.align), setup.budget,
                                   [&](int64_t c) { return probe.peak(T, layer, c); });
    }
  }
  ChunkedPlan p;
  p.seq_len = T;
  p.step = probe.at(T, layer, head);
  ExecConfig m = mode;
  m.layer_chunk = layer;
  m.head_chunk = head;
  p.layer_chunk = m.layer_chunk_for(T);
  p.head_chunk = m.head_chunk_for(T);
  p.fits = within(setup, effective_peak(setup, p.step));
  return p;
}

}  // namespace

PlannedStep plan_at(const PlanSetup& setup, ExecConfig mode, int64_t seq_len, OpProfile* ops) {
  mode.act_dtype = setup.act_dtype;
  StepMemoryOptions mem = memory_options(setup, 0);
  mem.ops = ops;
  return plan_step(setup.cfg, setup.objective, mode,
                   planning_step(setup.objective.kind, setup.group_size, seq_len), mem);
}

ChunkedPlan choose_chunks(const PlanSetup& setup, ExecConfig mode, int64_t T,
                          const ChunkRequest& req, const AutoChunkLimits& limits) {
  Prober probe(setup, mode);
  return choose_chunks_with(probe, setup, T, req, limits);
}

MaxLenResult find_max_seq_len(const PlanSetup& setup, const ExecConfig& mode,
                              const ChunkRequest& req, const AutoChunkLimits& limits,
                              int64_t max_seq_len) {
  SBP_CHECK(setup.budget > 0, "find_max_seq_len: the longest-T search needs a budget");
  SBP_CHECK(max_seq_len >= min_tokens(setup),
            "find_max_seq_len: max_seq_len below the smallest step");
  MaxLenResult r;
  Prober probe(setup, mode);
  // With auto chunks, a T fits if it fits with the smallest auto chunks (the peak grows with
  // every chunk size); choose_chunks then picks the largest chunks that fit at the found T.
  const int64_t layer = req.layer > 0 ? req.layer : limits.min_layer;
  const int64_t head = req.head > 0 ? req.head : limits.min_head;
  auto peak_of = [&](int64_t T) { return probe.peak(T, layer, head); };
  const int64_t B = setup.budget;
  int64_t lo = min_tokens(setup), f_lo = peak_of(lo);
  if (f_lo > B) {
    r.engine_runs = probe.runs();
    return r;
  }
  r.fits_at_all = true;

  // Bracket: extrapolate the line through the last two fitting runs to the budget and aim 1%
  // past it, so that one run usually lands just beyond the limit.
  int64_t hi = 0, f_hi = 0;
  int64_t x = std::min(max_seq_len, 4 * std::max({layer, head, limits.align}));
  for (int iter = 0; lo < max_seq_len; ++iter) {
    x = std::clamp(x, lo + 1, max_seq_len);
    const int64_t fx = peak_of(x);
    if (fx > B) {
      hi = x;
      f_hi = fx;
      break;
    }
    const double slope = static_cast<double>(fx - f_lo) / static_cast<double>(x - lo);
    lo = x;
    f_lo = fx;
    int64_t next = 2 * lo;  // fallback: flat peak, or a guess that keeps undershooting
    if (slope > 0.0 && iter < 8) {
      const double guess = static_cast<double>(lo) + static_cast<double>(B - f_lo) / slope;
      next = static_cast<int64_t>(std::min(guess * 1.01 + 1.0, 4.0e18));
    }
    x = next;
  }
  int64_t best = lo;
  if (hi == 0) {
    r.hit_limit = true;  // lo == max_seq_len fits
  } else {
    best = largest_fitting(lo, f_lo, hi, f_hi, B, peak_of);
  }
  r.plan = choose_chunks_with(probe, setup, best, req, limits);
  r.engine_runs = probe.runs();
  SBP_CHECK(r.plan.fits, "find_max_seq_len: the chosen chunks do not fit");
  return r;
}

std::string explain_too_small(const PlanSetup& setup, const ExecConfig& mode) {
  ExecConfig m = mode;
  m.act_dtype = setup.act_dtype;
  const int64_t T = min_tokens(setup);
  const PlannedStep need = plan_at(setup, m, T);
  auto parts = [](const MemoryBreakdown& b) {
    std::string s;
    for (int c = 0; c < kNumCategories; ++c) {
      const int64_t bytes = b.bytes[static_cast<size_t>(c)];
      if (bytes == 0) continue;
      s += (s.empty() ? "" : ", ") + std::string(category_name(static_cast<Category>(c))) + " " +
           format_bytes(bytes);
    }
    return s.empty() ? std::string("nothing") : s;
  };
  std::string msg = "the usable budget of " + format_bytes(setup.budget) + " cannot hold even a " +
                    std::to_string(T) + "-token step in mode " + mode_name(mode) +
                    ", which needs " + format_bytes(need.peak_bytes) + ": " + parts(need.breakdown);
  try {
    plan_step(setup.cfg, setup.objective, m,
              planning_step(setup.objective.kind, setup.group_size, T),
              memory_options(setup, setup.budget));
  } catch (const OutOfMemoryError& e) {
    msg += "; the first allocation past the budget is " + format_bytes(e.requested) + " of '" +
           category_name(e.category) + "', with " + parts(e.live) + " already allocated";
  }
  return msg;
}

}  // namespace sbp

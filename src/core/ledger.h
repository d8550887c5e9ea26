#pragma once
// Memory ledger (DESIGN §4): every byte the engine allocates is recorded under a category,
// with the live total, the peak, and the breakdown at the moment of the peak. An optional
// budget turns an allocation past it into an OutOfMemoryError that names the category.
#include <array>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace sbp {

enum class Category : uint8_t {
  weights,
  grads,
  optimizer,
  checkpoints,      // saved forward state: layer inputs (all modes) and, in `store`, activations
  layer_workspace,  // K/V, dK/dV, one chunk's (or one layer's) intermediates
  logits,           // LM-head logits / dlogits blocks
  grad_buffers,     // the running activation gradient (T, d)
  other,            // token ids, positions, per-token objective data, rope tables
  kv_cache,         // generation: every layer's keys/values of the sequences being sampled
};
constexpr int kNumCategories = 9;
const char* category_name(Category c);

struct MemoryBreakdown {
  std::array<int64_t, kNumCategories> bytes{};
  int64_t total() const;
  int64_t operator[](Category c) const { return bytes[static_cast<size_t>(c)]; }
  std::string str() const;  // "weights 1.2 GiB, grads ..., total ..."
};

std::string format_bytes(int64_t bytes);  // "1.50 GiB", "12.0 MiB", "512 B"

// Why a request failed: past the ledger's budget, or refused by the memory space itself (its
// allocator returned null or threw std::bad_alloc: the machine, not the budget, ran out).
enum class OomCause : uint8_t { budget, allocator };

class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(Category category, int64_t requested, int64_t budget, MemoryBreakdown live,
                   OomCause cause = OomCause::budget, const std::string& space = "");
  Category category;
  int64_t requested;
  int64_t budget;
  MemoryBreakdown live;  // what was allocated when the request failed
  OomCause cause;
};

class Ledger {
 public:
  // budget <= 0: unlimited.
  explicit Ledger(int64_t budget = 0) : budget_(budget) {}
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  void set_budget(int64_t bytes) { budget_ = bytes; }
  // The memory space this ledger counts, for messages ("out of host memory: ..."); empty: the
  // device's (or the only one).
  void set_space(std::string name) { space_ = std::move(name); }
  const std::string& space() const { return space_; }
  int64_t budget() const { return budget_; }

  // Records an allocation; throws OutOfMemoryError (recording nothing) past the budget, and
  // InputError (recording nothing) if a total would overflow int64 (absurd shapes).
  void allocate(Category c, int64_t bytes);
  void release(Category c, int64_t bytes);

  int64_t live() const { return live_total_; }
  int64_t peak() const { return peak_total_; }
  const MemoryBreakdown& live_breakdown() const { return live_; }
  const MemoryBreakdown& peak_breakdown() const { return peak_; }  // breakdown at the peak
  int64_t category_peak(Category c) const { return category_peak_[static_cast<size_t>(c)]; }
  // Restarts peak tracking from the current live state (e.g. after loading weights).
  void reset_peak();

 private:
  int64_t budget_ = 0;
  std::string space_;
  int64_t peak_total_ = 0;
  int64_t live_total_ =
      0;  // == live_.total(), kept so allocate() is O(1) (the planner calls it a lot)
  MemoryBreakdown live_;
  MemoryBreakdown peak_;
  std::array<int64_t, kNumCategories> category_peak_{};
};

}  // namespace sbp

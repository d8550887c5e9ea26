#include "core/ledger.h"

#include <cstdio>

#include "core/checked_math.h"

namespace sbp {

namespace {
constexpr const char* kCategoryNames[kNumCategories] = {
    "weights",         "grads",  "optimizer",    "checkpoints",
    "layer_workspace", "logits", "grad_buffers", "other",
    "kv_cache"};
}

const char* category_name(Category c) { return kCategoryNames[static_cast<size_t>(c)]; }

int64_t MemoryBreakdown::total() const {
  int64_t t = 0;
  for (int64_t b : bytes) t += b;
  return t;
}

std::string MemoryBreakdown::str() const {
  std::string s;
  for (int i = 0; i < kNumCategories; ++i) {
    if (bytes[static_cast<size_t>(i)] == 0) continue;
    if (!s.empty()) s += ", ";
    s += std::string(kCategoryNames[i]) + " " + format_bytes(bytes[static_cast<size_t>(i)]);
  }
  if (s.empty()) s = "nothing";
  return s + " (total " + format_bytes(total()) + ")";
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
  } else if (bytes >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  } else if (bytes >= (int64_t{1} << 10)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

namespace {

std::string oom_message(Category cat, int64_t req, int64_t bud, const MemoryBreakdown& lv,
                        OomCause cause, const std::string& space) {
  const std::string what =
      format_bytes(req) + " (" + std::to_string(req) + " bytes) for '" + category_name(cat) + "'";
  const std::string out = space.empty() ? "out of memory" : "out of " + space + " memory";
  if (cause == OomCause::allocator)
    return out + ": the allocator could not provide " + what + "; allocated now: " + lv.str();
  return out + ": allocating " + what + " would exceed the " + (space.empty() ? "" : space + " ") +
         "budget of " + format_bytes(bud) + "; allocated now: " + lv.str();
}

}  // namespace

OutOfMemoryError::OutOfMemoryError(Category cat, int64_t req, int64_t bud, MemoryBreakdown lv,
                                   OomCause why, const std::string& space)
    : Error(oom_message(cat, req, bud, lv, why, space)),
      category(cat),
      requested(req),
      budget(bud),
      live(lv),
      cause(why) {}

void Ledger::allocate(Category c, int64_t bytes) {
  SBP_CHECK(bytes >= 0, "negative allocation");
  // Compared as a difference: live + bytes may not fit int64 when bytes comes from absurd shapes.
  if (budget_ > 0 && bytes > budget_ - live_total_) {
    throw OutOfMemoryError(c, bytes, budget_, live_, OomCause::budget, space_);
  }
  const size_t i = static_cast<size_t>(c);
  // Both sums are checked before either is stored, so a failed request records nothing.
  const int64_t total = checked_add(live_total_, bytes, "the memory ledger's live total");
  const int64_t in_category =
      checked_add(live_.bytes[i], bytes, "the memory ledger's live bytes of one category");
  live_.bytes[i] = in_category;
  live_total_ = total;
  if (live_.bytes[i] > category_peak_[i]) category_peak_[i] = live_.bytes[i];
  if (live_total_ > peak_total_) {
    peak_total_ = live_total_;
    peak_ = live_;
  }
}

void Ledger::release(Category c, int64_t bytes) {
  const size_t i = static_cast<size_t>(c);
  SBP_CHECK(live_.bytes[i] >= bytes, std::string("ledger underflow in ") + category_name(c));
  live_.bytes[i] -= bytes;
  live_total_ -= bytes;
}

void Ledger::reset_peak() {
  peak_ = live_;
  peak_total_ = live_total_;
  category_peak_ = live_.bytes;
}

}  // namespace sbp

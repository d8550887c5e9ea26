#include "objective/sft.h"

#include <algorithm>

#include "core/error.h"
#include "objective/objective_setup.h"

namespace sbp {

SftObjective::SftObjective(const Batch& batch, double normalizer)
    : batch_(batch), inv_(normalizer > 0.0 ? 1.0 / normalizer : 0.0) {
  int64_t end = 0;
  for (int64_t len : batch.seq_lens) seg_end_.push_back(end += len);
}

template <typename Fn>
void SftObjective::for_each_weight(int64_t row_begin, int64_t n, Fn fn) const {
  SBP_CHECK(row_begin >= 0 && row_begin + n <= batch_.size(), "sft: rows outside the batch");
  // The segment of row_begin, then walked along: row r's weight is Batch::target_weights()[r]
  // (the mask of its target r + 1, 0 at a segment's last row), scaled by 1 / N.
  size_t seg = static_cast<size_t>(std::upper_bound(seg_end_.begin(), seg_end_.end(), row_begin) -
                                   seg_end_.begin());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = row_begin + i;
    while (r >= seg_end_[seg]) ++seg;
    const float m = r + 1 == seg_end_[seg]     ? 0.0f
                    : batch_.loss_mask.empty() ? 1.0f
                                               : batch_.loss_mask[static_cast<size_t>(r + 1)];
    fn(static_cast<size_t>(i), static_cast<float>(m * inv_));
  }
}

HeadRoute SftObjective::route() {
  return ConstantGrads{
      .grads = [this](int64_t row_begin,
                      std::span<float> dlogp) { constant_grads(row_begin, dlogp); },
      .add_logp = [this](int64_t row_begin,
                         std::span<const float> logp) { add_logp(row_begin, logp); }};
}

void SftObjective::token_grads(int64_t row_begin, std::span<const float> logp,
                               std::span<float> dlogp) {
  for_each_weight(row_begin, static_cast<int64_t>(logp.size()), [&](size_t i, float w) {
    dlogp[i] = -w;
    loss_ -= static_cast<double>(w) * logp[i];
  });
}

void SftObjective::constant_grads(int64_t row_begin, std::span<float> dlogp) {
  for_each_weight(row_begin, static_cast<int64_t>(dlogp.size()),
                  [&](size_t i, float w) { dlogp[i] = -w; });
}

void SftObjective::add_logp(int64_t row_begin, std::span<const float> logp) {
  for_each_weight(row_begin, static_cast<int64_t>(logp.size()),
                  [&](size_t i, float w) { loss_ -= static_cast<double>(w) * logp[i]; });
}

// SFT trains on plain sequences (or prompt + completion with the prompt masked), alone, with
// the policy only.
namespace {
constexpr const char* kSftFormats[] = {"messages", "prompt_completion", "text"};
bool sft_reference(const ObjectiveSetup&) { return false; }
std::string sft_describe(const ObjectiveSetup&) { return "sft"; }
}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_traits.cpp registers it.
extern const ObjectiveTraits kSftTraits = {
    .kind = ObjectiveKind::sft,
    .name = "sft",
    .formats = kSftFormats,
    .formats_text = "messages, prompt_completion or text",
    .completions = false,
    .group = SequenceGroup::one,
    .plan_sequences = 1,
    .host_bytes_per_token = 4,
    .rollouts = false,
    .needs_reference = sft_reference,
    .value_model = false,
    .analytic_memory = true,
    .describe = sft_describe,
    .settings_error = nullptr,
};

}  // namespace sbp

#include "objective/sft.h"

#include "core/error.h"
#include "objective/objective_setup.h"

namespace sbp {

SftObjective::SftObjective(const Batch& batch, double normalizer) {
  weights_ = batch.target_weights();
  const double inv = normalizer > 0.0 ? 1.0 / normalizer : 0.0;
  for (float& w : weights_) w = static_cast<float>(w * inv);
}

void SftObjective::token_grads(int64_t row_begin, std::span<const float> logp,
                               std::span<float> dlogp) {
  SBP_CHECK(row_begin >= 0 && row_begin + static_cast<int64_t>(logp.size()) <=
                                  static_cast<int64_t>(weights_.size()),
            "sft: rows outside the batch");
  for (size_t i = 0; i < logp.size(); ++i) {
    const float w = weights_[static_cast<size_t>(row_begin) + i];
    dlogp[i] = -w;
    loss_ -= static_cast<double>(w) * logp[i];
  }
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
    .rollouts = false,
    .needs_reference = sft_reference,
    .value_model = false,
    .analytic_memory = true,
    .describe = sft_describe,
    .settings_error = nullptr,
};

}  // namespace sbp

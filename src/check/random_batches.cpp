#include "check/random_batches.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "objective/sequence_rows.h"

namespace sbp::cli {

void check_segments(int64_t T, int64_t segments) {
  if (segments > T / 2)
    throw InputError("--segments: " + std::to_string(segments) + " sequences in " +
                     std::to_string(T) + " tokens (--seq-len) is more than T/2 = " +
                     std::to_string(T / 2) + "; each sequence needs 2 tokens to have a target");
}

Batch random_batch(int64_t vocab, int64_t T, int64_t segments, uint64_t seed, bool random_mask) {
  Rng rng(seed, "batch");
  segments = std::clamp<int64_t>(segments, 1, T);
  Batch b;
  // Unequal lengths: random cut points, kept distinct so every segment has >= 1 token.
  std::vector<int64_t> cuts = {0, T};
  while (static_cast<int64_t>(cuts.size()) < segments + 1) {
    const int64_t c = 1 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(T - 1)));
    if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
  }
  std::sort(cuts.begin(), cuts.end());
  for (size_t i = 0; i + 1 < cuts.size(); ++i) b.seq_lens.push_back(cuts[i + 1] - cuts[i]);
  for (int64_t t = 0; t < T; ++t)
    b.tokens.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab))));
  if (random_mask) {
    for (int64_t t = 0; t < T; ++t) b.loss_mask.push_back(rng.below(3) == 0 ? 0.0f : 1.0f);
  }
  return b;
}

int64_t objective_group(ObjectiveKind kind, int64_t group_size, int64_t sequences) {
  return group_size_of(objective_traits(kind), group_size, sequences);
}

Batch random_objective_batch(ObjectiveKind kind, int64_t group_size, int64_t vocab, int64_t T,
                             int64_t segments, uint64_t seed) {
  const ObjectiveTraits& traits = objective_traits(kind);
  if (!traits.completions) return random_batch(vocab, T, segments, seed, true);
  if (T < 4)
    throw InputError("a random " + std::string(objective_name(kind)) +
                     " batch needs at least 4 tokens");
  check_segments(T, segments);
  Rng rng(seed, "objective-batch");
  int64_t S = std::clamp<int64_t>(segments, 1, T / 2);
  // GRPO needs whole groups: at least one, even when --segments asks for fewer sequences (a
  // single sequence would be a group of one, whose advantage is 0/0).
  if (traits.group == SequenceGroup::configured) S = std::max(S, std::min(group_size, T / 2));
  const int64_t G = objective_group(kind, group_size, S);
  S = std::max(G, S - S % G);
  // Every segment >= 2 tokens; the rest spread at random, so lengths differ.
  std::vector<int64_t> len(static_cast<size_t>(S), 2);
  for (int64_t r = 0; r < T - 2 * S; ++r)
    ++len[static_cast<size_t>(rng.below(static_cast<uint64_t>(S)))];
  std::vector<PromptCompletion> seqs;
  for (int64_t g = 0; g < S; g += G) {
    // The group shares a prompt of about a third of its shortest sequence (>= 1 token, leaving
    // >= 1 completion token, whose row after the prompt is scored).
    int64_t p = T;
    for (int64_t i = g; i < g + G; ++i)
      p = std::min(p, std::max<int64_t>(1, len[static_cast<size_t>(i)] / 3));
    std::vector<int32_t> prompt;
    for (int64_t j = 0; j < p; ++j)
      prompt.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab))));
    for (int64_t i = g; i < g + G; ++i) {
      PromptCompletion pc;
      pc.prompt = prompt;
      for (int64_t j = p; j < len[static_cast<size_t>(i)]; ++j)
        pc.completion.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab))));
      seqs.push_back(std::move(pc));
    }
  }
  return prompt_completion_batch(seqs);
}

MicroBatch random_micro_batch(ObjectiveKind kind, int64_t group_size, Batch batch, uint64_t seed) {
  MicroBatch mb;
  const int64_t S = static_cast<int64_t>(batch.seq_lens.size());
  const ObjectiveTraits& traits = objective_traits(kind);
  if (traits.rollouts) {
    Rng rng(seed, "rewards");
    for (int64_t s = 0; s < S; ++s) mb.rewards.push_back(rng.normal());
  }
  if (traits.sequence_labels) {  // both classes: random labels, the first two 1 and 0
    Rng rng(seed, "labels");
    for (int64_t s = 0; s < S; ++s)
      mb.rewards.push_back(s < 2 ? static_cast<float>(1 - s) : static_cast<float>(rng.below(2)));
  }
  if (traits.group == SequenceGroup::configured)
    mb.group_size = objective_group(kind, group_size, S);
  mb.batch = std::move(batch);
  return mb;
}

ParameterSet make_reference_weights(const ModelConfig& cfg, const ParameterSet& model, Pool& pool,
                                    float noise, uint64_t seed) {
  ParameterSet ref(cfg, pool, Category::weights, DType::F32, false, model.head());
  for (size_t i = 0; i < ref.size(); ++i) {
    const Tensor& dst = ref.tensor(i);
    const Tensor& src = model.get(ref.name(i));
    if (!dst.data || !src.data) continue;
    Rng rng(seed, "reference:" + ref.name(i));
    // On the host, in bounded row blocks: download, add the noise, upload.
    for_row_blocks(dst, int64_t{1} << 20, [&](int64_t r0, int64_t r1) {
      std::vector<float> w = download_f32(src.slice_rows(r0, r1));
      if (noise != 0.0f)
        for (float& x : w) x += noise * rng.normal();
      upload_f32(dst.slice_rows(r0, r1), w);
    });
  }
  return ref;
}

}  // namespace sbp::cli

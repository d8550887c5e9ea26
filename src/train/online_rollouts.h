#pragma once
// Online GRPO/PPO (docs/TRAINING.md "Online GRPO and PPO"): the trainer's batch source when
// data.train holds prompt records. Every `num_iterations` optimizer steps it
//   1. takes the next `prompts_per_step` prompts of the epoch (a seeded order, as the offline
//      data order: the cursor is a checkpoint's data cursor),
//   2. samples `num_generations` completions of each with the CURRENT policy weights
//      (Engine::generate: the training step's own layer code with a KV cache; completion g of
//      prompt p at step s draws from its own stream Rng(seed, "rollout/s/p/g"), so the
//      rollouts depend on the weights, the step and the seed only),
//   3. scores them with the reward functions (reward/reward.h),
//   4. packs each prompt's group (prompt + completion, trained on the completion tokens) into
//      micro-batches of at most max_tokens, whole groups only, with the rewards per segment and
//      the sampling log-probs per row (MicroBatch::old_logp).
// The step runner then trains on them as on offline rollouts; steps 2..num_iterations of a
// batch reuse it, with the clipped ratio against the sampling log-probs. A checkpoint taken in
// the middle of a batch stores the batch (rollouts_json), so resuming continues exactly.
//
// On several ranks (docs/DISTRIBUTED.md "LoRA and online objectives on several ranks") every rank
// takes the same prompts (the cursor is global); prompt j of the batch (j = 0, 1, ... in the
// epoch's order) is sampled and scored by rank j % ranks only, a group never split. Since each
// completion's stream is seeded by (seed, step, prompt, completion) and every rank holds the same
// weights, a rank draws exactly what one process draws for that prompt. The ranks then all-gather
// the scored samples, so every rank holds the whole batch in the one-process order and packs it
// as one process does; rank r trains on micro-batches r, r + ranks, ... of it, as offline
// (step_runner.h). Rewards, statistics and a checkpoint's stored batch are then the whole
// batch's on every rank; PPO's old values of sampling time are computed by the rank that trains
// each micro-batch and all-gathered.
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "data/prompt_encoder.h"
#include "data/prompt_records.h"
#include "dist/communicator.h"
#include "engine/engine.h"
#include "objective/objective_setup.h"
#include "reward/reward.h"
#include "step/micro_batch.h"
#include "train/train_batches.h"
#include "train/train_config.h"

namespace sbp {

// One sampled completion and its scores (for the metrics and the completions log).
struct RolloutSample {
  int64_t prompt = 0;                // index of the prompt record
  std::vector<int32_t> ids;          // (C) completion tokens, the stop token included
  std::vector<float> logprobs;       // (C) sampling log-probs
  bool truncated = false;            // cut at max_completion_length
  double reward = 0.0;               // weighted sum
  std::vector<double> per_reward;    // (R) each function's reward
};

// What a generation phase measured (the step metrics' rollout/* fields).
struct RolloutStats {
  std::vector<std::string> reward_names;
  std::vector<double> reward_mean, reward_std;  // (R) per function, unweighted
  double reward_total_mean = 0.0, reward_total_std = 0.0;
  double completion_length_mean = 0.0;
  int64_t completion_length_max = 0;
  double truncated_fraction = 0.0;
  double zero_std_groups = 0.0;  // share of groups whose rewards are all equal (no signal)
  int64_t generated_tokens = 0;
  double generation_s = 0.0;
};

class OnlineRollouts {
 public:
  OnlineRollouts(const TrainConfig& c, std::vector<PromptRecord> prompts,
                 const PromptEncoder& encoder, int64_t vocab,
                 Communicator& comm = single_process());

  // Optimizer steps of `epochs` epochs: ceil(prompts / prompts_per_step) batches per epoch,
  // num_iterations steps each.
  int64_t steps_in_epochs(int64_t epochs) const;

  void start();
  // From a checkpoint's cursor (micro_batches_done counts prompts here) and, when it was taken
  // in the middle of a batch, the batch it stored. InputError naming `where` when they do not
  // fit this data.
  void resume(const DataCursor& cursor, const nlohmann::json& rollouts, const std::string& where);

  // The micro-batches of optimizer step `step` (0-based): a new batch sampled with `policy`
  // when the previous one has had its num_iterations steps, else the current one again.
  // PPO with num_iterations > 1: `value` (the value model) scores a new batch's old values
  // once, so that every iteration's GAE and value clipping use the values of sampling time, as
  // its ratio uses the sampling log-probs (with 1 iteration the step runner scores them).
  // RewardError when a reward function fails (nothing is advanced then); with several ranks
  // every rank throws when any rank's reward fails. This rank's share of the micro-batches.
  StepBatches next(Engine& policy, Engine* value, int64_t step);

  // The run's last step is done: the reward functions' finish() (a reward program's extra
  // output found at its exit), agreed across ranks like score()'s failures.
  void finish_rewards();

  bool sampled_last() const { return sampled_last_; }  // next() generated a new batch
  const RolloutStats& stats() const { return stats_; }
  const std::vector<RolloutSample>& samples() const { return samples_; }
  const PromptRecord& prompt(int64_t i) const { return prompts_[static_cast<size_t>(i)]; }
  const std::string& completion_text(const RolloutSample& s) const;

  int64_t longest_prompt() const;  // tokens

  const DataCursor& cursor() const { return cursor_; }
  double epoch_progress() const;
  // The current batch when steps of it remain (a checkpoint stores it), else null.
  nlohmann::json rollouts_json() const;

  static constexpr const char* kCursorUnit = "prompts";

 private:
  void plan_epoch();
  std::vector<int64_t> take_prompts();
  void sample(Engine& policy, int64_t step, const std::vector<int64_t>& prompts);
  void score();
  // Runs `rewards_work` (score(), or the reward programs' finish()) and agrees with every rank on
  // how it ended: every rank throws when any failed. Then gather_samples: every rank's samples,
  // whole batch in prompt order on every rank.
  void agree_on_rewards(const std::function<void()>& rewards_work);
  void gather_samples(size_t prompts);
  void compute_stats();
  void pack();
  void score_old_values(Engine& value);
  StepBatches rank_share() const;
  // PPO over several iterations: the micro-batches carry the old values of sampling time.
  bool keeps_old_values() const {
    return objective_traits(kind_).value_model && s_.num_iterations > 1;
  }

  const TrainConfig& c_;
  Communicator& comm_;
  RolloutSettings s_;
  ObjectiveKind kind_;
  std::vector<PromptRecord> prompts_;
  const PromptEncoder& enc_;
  int64_t vocab_;
  std::unique_ptr<RewardSet> rewards_;  // started on the first batch (command rewards spawn)
  Rng rng_;
  DataCursor cursor_;
  std::vector<int64_t> order_;  // the current epoch's prompt order
  // The current batch.
  std::vector<RolloutSample> samples_;  // prompt-major: prompt p's group is consecutive
  std::vector<std::string> texts_;      // decoded completions
  std::vector<MicroBatch> micro_;
  int64_t batch_step_ = -1;  // the step that sampled it
  int64_t uses_ = 0;         // optimizer steps taken on it
  bool sampled_last_ = false;
  RolloutStats stats_;
};

// True when the config trains online: grpo or ppo on a data.train of prompt records.
bool trains_online(const TrainConfig& c);

}  // namespace sbp

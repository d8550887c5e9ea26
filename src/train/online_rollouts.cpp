#include "train/online_rollouts.h"

#include <cstdio>
#include <limits>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "data/packing.h"

namespace sbp {

namespace {

using json = nlohmann::json;

double mean_of(const std::vector<double>& x) {
  double s = 0.0;
  for (double v : x) s += v;
  return x.empty() ? 0.0 : s / static_cast<double>(x.size());
}

// Population standard deviation (the spread the step's rewards have).
double std_of(const std::vector<double>& x) {
  const double m = mean_of(x);
  double s = 0.0;
  for (double v : x) s += (v - m) * (v - m);
  return x.empty() ? 0.0 : std::sqrt(s / static_cast<double>(x.size()));
}

}  // namespace

bool trains_online(const TrainConfig& c) {
  return objective_traits(c.objective).rollouts && !c.data_train.empty() &&
         looks_like_prompt_records(c.train_source());
}

OnlineRollouts::OnlineRollouts(const TrainConfig& c, std::vector<PromptRecord> prompts,
                               const PromptEncoder& encoder, int64_t vocab, Communicator& comm)
    : c_(c),
      comm_(comm),
      s_(c.rollout()),
      kind_(c.objective),
      prompts_(std::move(prompts)),
      enc_(encoder),
      vocab_(vocab),
      rng_(c.seed, "prompt-order") {
  const std::string obj = objective_name(c.objective);
  if (c.rewards.empty())
    throw InputError(c.where("data.train") + ": " + c.data_train +
                     " holds prompt records (online " + obj +
                     "): list the reward functions that score the completions under rewards:");
  // A group (prompt + its completions) is packed whole into one micro-batch.
  size_t longest = 0;
  const PromptRecord* at = nullptr;
  for (const PromptRecord& p : prompts_)
    if (p.ids.size() > longest) longest = p.ids.size(), at = &p;
  const int64_t group =
      s_.num_generations * (static_cast<int64_t>(longest) + s_.max_completion_length);
  if (group > c.max_tokens)
    throw InputError(c.where("max_tokens") + ": max_tokens " + std::to_string(c.max_tokens) +
                     " cannot hold a group of " + obj + ".num_generations (" +
                     std::to_string(s_.num_generations) + ") x (the longest prompt, " +
                     std::to_string(longest) + " tokens at " + at->where + ", + " + obj +
                     ".max_completion_length " + std::to_string(s_.max_completion_length) +
                     ") = " + std::to_string(group) + " tokens");
  rewards_ = std::make_unique<RewardSet>(c.rewards, c.where("rewards") + ": rewards");
}

int64_t OnlineRollouts::steps_in_epochs(int64_t epochs) const {
  const int64_t n = static_cast<int64_t>(prompts_.size());
  const int64_t batches = (n + s_.prompts_per_step - 1) / s_.prompts_per_step;
  return epochs * batches * s_.num_iterations;
}

void OnlineRollouts::plan_epoch() {
  const uint64_t* s = rng_.state();
  cursor_.epoch_rng = {s[0], s[1], s[2], s[3]};
  order_ = epoch_order(static_cast<int64_t>(prompts_.size()), c_.shuffle, rng_);
}

void OnlineRollouts::start() {
  cursor_ = DataCursor{};
  plan_epoch();
}

void OnlineRollouts::resume(const DataCursor& cursor, const json& rollouts,
                            const std::string& where) {
  rng_.set_state(cursor.epoch_rng.data());
  plan_epoch();
  cursor_ = cursor;
  const int64_t n = static_cast<int64_t>(prompts_.size());
  if (cursor_.micro_batches_done < 0 || cursor_.micro_batches_done > n)
    throw InputError(where + ": \"micro_batches_done\" (prompts done) is " +
                     std::to_string(cursor_.micro_batches_done) + ", outside the " +
                     std::to_string(n) + " prompts of " + c_.data_train);
  if (rollouts.is_null()) return;
  // The batch a checkpoint in the middle of num_iterations stored: checked, then packed again.
  const std::string at = where + ": rollouts";
  try {
    batch_step_ = rollouts.at("step").get<int64_t>();
    uses_ = rollouts.at("uses").get<int64_t>();
    if (uses_ < 1 || uses_ >= s_.num_iterations)
      throw InputError(at + ".uses is " + std::to_string(uses_) + ", not in [1, num_iterations)");
    samples_.clear();
    texts_.clear();
    const size_t R = rewards_->size();
    for (const json& j : rollouts.at("samples")) {
      RolloutSample s;
      s.prompt = j.at("prompt").get<int64_t>();
      s.ids = j.at("ids").get<std::vector<int32_t>>();
      s.logprobs = j.at("logprobs").get<std::vector<float>>();
      s.truncated = j.at("truncated").get<bool>();
      s.reward = j.at("reward").get<double>();
      s.per_reward = j.at("per_reward").get<std::vector<double>>();
      if (s.prompt < 0 || s.prompt >= n || s.ids.empty() || s.ids.size() != s.logprobs.size() ||
          s.per_reward.size() != R ||
          static_cast<int64_t>(s.ids.size()) > s_.max_completion_length)
        throw InputError(at + ": a sample does not fit this run's prompts, rewards or "
                              "max_completion_length");
      for (int32_t id : s.ids)
        if (id < 0 || id >= vocab_) throw InputError(at + ": token id " + std::to_string(id) +
                                                     " outside the vocabulary");
      texts_.push_back(enc_.decode(s.ids));
      samples_.push_back(std::move(s));
    }
    if (samples_.empty() || samples_.size() % static_cast<size_t>(s_.num_generations) != 0)
      throw InputError(at + ": " + std::to_string(samples_.size()) +
                       " samples, not whole groups of num_generations");
    pack();
    if (keeps_old_values()) {
      const json& values = rollouts.at("old_values");
      if (!values.is_array() || values.size() != micro_.size())
        throw InputError(at + ".old_values: not one array per micro-batch of the stored batch");
      for (size_t i = 0; i < micro_.size(); ++i) {
        micro_[i].old_values = values[i].get<std::vector<float>>();
        if (static_cast<int64_t>(micro_[i].old_values.size()) != micro_[i].batch.size())
          throw InputError(at + ".old_values[" + std::to_string(i) + "]: " +
                           std::to_string(micro_[i].old_values.size()) + " values for " +
                           std::to_string(micro_[i].batch.size()) + " rows");
        for (float v : micro_[i].old_values)
          if (!std::isfinite(v))
            throw InputError(at + ".old_values[" + std::to_string(i) + "]: not finite");
      }
    }
  } catch (const json::exception& e) {
    throw InputError(at + ": " + e.what());
  }
}

std::vector<int64_t> OnlineRollouts::take_prompts() {
  const int64_t n = static_cast<int64_t>(prompts_.size());
  if (cursor_.micro_batches_done >= n) {
    ++cursor_.epoch;
    plan_epoch();
    cursor_.micro_batches_done = 0;
  }
  const int64_t k = std::min(s_.prompts_per_step, n - cursor_.micro_batches_done);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < k; ++i)
    out.push_back(order_[static_cast<size_t>(cursor_.micro_batches_done + i)]);
  cursor_.micro_batches_done += k;
  return out;
}

void OnlineRollouts::sample(Engine& policy, int64_t step, const std::vector<int64_t>& prompts) {
  GenerationConfig g;
  g.max_new_tokens = s_.max_completion_length;
  g.sampling = {false, s_.temperature, s_.top_k, s_.top_p, s_.min_p};
  g.stop_ids = enc_.stop_ids();
  g.stop_after = enc_.stop_strings(s_.stop);
  const auto t0 = std::chrono::steady_clock::now();
  samples_.clear();
  texts_.clear();
  stats_.generated_tokens = 0;
  const size_t ranks = static_cast<size_t>(comm_.size()), rank = static_cast<size_t>(comm_.rank());
  for (size_t j = rank; j < prompts.size(); j += ranks) {  // this rank's share, whole groups
    const int64_t p = prompts[j];
    // A prompt's group decodes as one batch (the cache the planner counts: num_generations x
    // (prompt + max_completion_length)); completion r draws from its own stream.
    const std::vector<std::vector<int32_t>> group(static_cast<size_t>(s_.num_generations),
                                                  prompts_[static_cast<size_t>(p)].ids);
    std::vector<Rng> rngs;
    for (int64_t r = 0; r < s_.num_generations; ++r)
      rngs.emplace_back(c_.seed, "rollout/" + std::to_string(step) + "/" + std::to_string(p) +
                                     "/" + std::to_string(r));
    for (Generated& out : policy.generate_batch(group, g, rngs)) {
      RolloutSample s;
      s.prompt = p;
      s.truncated = out.finish == FinishReason::length;
      s.ids = std::move(out.ids);
      s.logprobs = std::move(out.logprobs);
      stats_.generated_tokens += static_cast<int64_t>(s.ids.size());
      texts_.push_back(enc_.decode(s.ids));
      samples_.push_back(std::move(s));
    }
  }
  stats_.generation_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void OnlineRollouts::score() {
  if (samples_.empty()) return;  // a rank with no prompt of this batch
  std::vector<RewardRequest> req(samples_.size());
  for (size_t i = 0; i < samples_.size(); ++i) {
    const PromptRecord& p = prompts_[static_cast<size_t>(samples_[i].prompt)];
    req[i].prompt = p.text;
    req[i].completion = texts_[i];
    req[i].completion_tokens = static_cast<int64_t>(samples_[i].ids.size());
    req[i].truncated = samples_[i].truncated;
    req[i].fields = &p.fields;
  }
  const RewardSet::Scores scores = rewards_->score(req);
  const size_t R = rewards_->size(), n = samples_.size();
  for (size_t i = 0; i < n; ++i) {
    // Each reward is finite (RewardSet), but their weighted sum trains in fp32: past its range
    // it would be inf there and every advantage of the group NaN, a step blamed on the lr.
    if (!(std::fabs(scores.total[i]) <= std::numeric_limits<float>::max())) {
      auto g = [](double x) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", x);
        return std::string(buf);
      };
      std::string parts;
      for (size_t k = 0; k < R; ++k)
        parts += (k ? ", '" : "'") + rewards_->name(k) + "' " + g(scores.per_reward[k][i]);
      throw RewardError("rewards: the total reward of completion " + std::to_string(i) +
                        " of the prompt at " +
                        prompts_[static_cast<size_t>(samples_[i].prompt)].where + " is " +
                        g(scores.total[i]) + ", outside fp32 range (|x| <= 3.4e38): " + parts +
                        ", each times its weight");
    }
    samples_[i].reward = scores.total[i];
    samples_[i].per_reward.resize(R);
    for (size_t k = 0; k < R; ++k) samples_[i].per_reward[k] = scores.per_reward[k][i];
  }
}

// Agrees on the outcome of every rank's score(): code 0 scored, 1 a reward failed, 2 a reward
// was interrupted by a signal. Every rank throws when any failed (the worst kind), so that they
// all take the trainer's same stop path (and its collective save) together.
void OnlineRollouts::agree_on_rewards(const std::function<void()>& rewards_work) {
  std::exception_ptr failed;
  int code = 0;
  try {
    rewards_work();
  } catch (const RewardInterrupted&) {
    failed = std::current_exception();
    code = 2;
  } catch (const RewardError&) {
    failed = std::current_exception();
    code = 1;
  }
  const int64_t worst = comm_.size() > 1 ? comm_.max(int64_t{code}) : code;
  if (failed && worst == code) std::rethrow_exception(failed);
  if (worst == 2) throw RewardInterrupted("rewards: interrupted by a signal on another rank");
  if (worst == 1) throw RewardError("rewards: a reward function failed on another rank");
}

void OnlineRollouts::finish_rewards() {
  agree_on_rewards([this] {
    if (rewards_) rewards_->finish();  // null: no batch was sampled by this invocation
  });
}

// Every rank's scored samples to every rank, in the batch's prompt order: prompt j's group
// from rank j % ranks (the order sample() took them in). The numbers travel as JSON, which
// writes doubles (and floats widened to them) so that they read back exactly.
void OnlineRollouts::gather_samples(size_t prompts) {
  const size_t ranks = static_cast<size_t>(comm_.size());
  if (ranks == 1) return;
  json mine = {{"seconds", stats_.generation_s}, {"samples", json::array()}};
  for (const RolloutSample& s : samples_)
    mine["samples"].push_back({{"prompt", s.prompt},
                               {"ids", s.ids},
                               {"logprobs", s.logprobs},
                               {"truncated", s.truncated},
                               {"reward", s.reward},
                               {"per_reward", s.per_reward}});
  std::vector<json> all;
  for (const std::string& from : comm_.allgather(mine.dump())) all.push_back(json::parse(from));
  samples_.clear();
  texts_.clear();
  std::vector<size_t> next(ranks, 0);
  const size_t G = static_cast<size_t>(s_.num_generations);
  for (size_t j = 0; j < prompts; ++j) {
    const json& from = all[j % ranks].at("samples");
    for (size_t g = 0; g < G; ++g) {
      const json& x = from.at(next[j % ranks]++);
      RolloutSample s;
      s.prompt = x.at("prompt").get<int64_t>();
      s.ids = x.at("ids").get<std::vector<int32_t>>();
      s.logprobs = x.at("logprobs").get<std::vector<float>>();
      s.truncated = x.at("truncated").get<bool>();
      s.reward = x.at("reward").get<double>();
      s.per_reward = x.at("per_reward").get<std::vector<double>>();
      texts_.push_back(enc_.decode(s.ids));
      samples_.push_back(std::move(s));
    }
  }
  // The batch took as long as its slowest rank.
  for (const json& from : all)
    stats_.generation_s = std::max(stats_.generation_s, from.at("seconds").get<double>());
}

// The batch's statistics, from the whole batch (every rank holds it after gather_samples).
void OnlineRollouts::compute_stats() {
  const size_t R = rewards_->size(), n = samples_.size();
  stats_.reward_names.clear();
  stats_.reward_mean.assign(R, 0.0);
  stats_.reward_std.assign(R, 0.0);
  std::vector<double> total(n);
  for (size_t i = 0; i < n; ++i) total[i] = samples_[i].reward;
  for (size_t k = 0; k < R; ++k) {
    std::vector<double> each(n);
    for (size_t i = 0; i < n; ++i) each[i] = samples_[i].per_reward[k];
    stats_.reward_names.push_back(rewards_->name(k));
    stats_.reward_mean[k] = mean_of(each);
    stats_.reward_std[k] = std_of(each);
  }
  stats_.reward_total_mean = mean_of(total);
  stats_.reward_total_std = std_of(total);
  stats_.generated_tokens = 0;
  for (const RolloutSample& s : samples_)
    stats_.generated_tokens += static_cast<int64_t>(s.ids.size());
  std::vector<double> lengths;
  int64_t truncated = 0, zero_std = 0;
  stats_.completion_length_max = 0;
  for (const RolloutSample& s : samples_) {
    lengths.push_back(static_cast<double>(s.ids.size()));
    stats_.completion_length_max =
        std::max(stats_.completion_length_max, static_cast<int64_t>(s.ids.size()));
    truncated += s.truncated ? 1 : 0;
  }
  const size_t G = static_cast<size_t>(s_.num_generations);
  for (size_t g = 0; g < n; g += G) {
    bool same = true;
    for (size_t i = g + 1; i < g + G; ++i) same = same && samples_[i].reward == samples_[g].reward;
    zero_std += same ? 1 : 0;
  }
  stats_.completion_length_mean = mean_of(lengths);
  stats_.truncated_fraction = static_cast<double>(truncated) / static_cast<double>(n);
  stats_.zero_std_groups = static_cast<double>(zero_std) / static_cast<double>(n / G);
}

// Each prompt's group becomes one Example (its completions as segments, trained on the
// completion tokens), packed greedily in prompt order, whole groups per micro-batch.
void OnlineRollouts::pack() {
  const size_t G = static_cast<size_t>(s_.num_generations);
  std::vector<Example> groups;
  std::vector<std::vector<float>> old_logp;  // (group tokens) per group, rows in packing order
  for (size_t g = 0; g < samples_.size(); g += G) {
    Example e;
    std::vector<float> rows;
    for (size_t i = g; i < g + G; ++i) {
      const RolloutSample& s = samples_[i];
      const std::vector<int32_t>& prompt = prompts_[static_cast<size_t>(s.prompt)].ids;
      const size_t P = prompt.size(), C = s.ids.size();
      TokenizedSequence seq;
      seq.ids = prompt;
      seq.ids.insert(seq.ids.end(), s.ids.begin(), s.ids.end());
      seq.mask.assign(P + C, 0.0f);
      if (!(s.truncated && s_.mask_truncated_completions))  // else DAPO's overlong filtering
        std::fill(seq.mask.begin() + static_cast<std::ptrdiff_t>(P), seq.mask.end(), 1.0f);
      // Row P-1+j predicts completion token j: its sampling log-prob.
      std::vector<float> lp(P + C, 0.0f);
      std::copy(s.logprobs.begin(), s.logprobs.end(), lp.begin() + static_cast<std::ptrdiff_t>(P - 1));
      rows.insert(rows.end(), lp.begin(), lp.end());
      e.sequences.push_back(std::move(seq));
      e.rewards.push_back(s.reward);
      e.lines.push_back(0);
    }
    groups.push_back(std::move(e));
    old_logp.push_back(std::move(rows));
  }
  micro_.clear();
  const std::vector<int64_t> order = identity_order(static_cast<int64_t>(groups.size()));
  for (const MicroBatchPlan& plan : pack_examples(groups, order, c_.max_tokens)) {
    MicroBatch mb = to_micro_batch(assemble_batch(groups, plan), kind_);
    // TRL's GRPO with one iteration takes the current policy's log-probs, detached, as the old
    // ones (ratio 1); with several, those of the sampling policy: the generator's.
    if (s_.num_iterations > 1)
      for (int64_t gi : plan.examples)
        mb.old_logp.insert(mb.old_logp.end(), old_logp[static_cast<size_t>(gi)].begin(),
                           old_logp[static_cast<size_t>(gi)].end());
    micro_.push_back(std::move(mb));
  }
}

StepBatches OnlineRollouts::next(Engine& policy, Engine* value, int64_t step) {
  sampled_last_ = batch_step_ < 0 || uses_ >= s_.num_iterations;
  if (sampled_last_) {
    const DataCursor cursor_before = cursor_;
    const Rng rng_before = rng_;
    const std::vector<int64_t> order_before = order_;
    try {
      const std::vector<int64_t> prompts = take_prompts();
      sample(policy, step, prompts);
      agree_on_rewards([this] { score(); });
      gather_samples(prompts.size());
      compute_stats();
    } catch (...) {
      // Nothing advanced: a checkpoint saved now resumes before this batch.
      cursor_ = cursor_before;
      rng_ = rng_before;
      order_ = order_before;
      batch_step_ = -1;
      samples_.clear();
      texts_.clear();
      throw;
    }
    pack();
    if (keeps_old_values()) {
      SBP_CHECK(value != nullptr, "online ppo: no value model to score the old values");
      score_old_values(*value);
    }
    batch_step_ = step;
    uses_ = 0;
  }
  ++uses_;
  return rank_share();
}

// PPO over several iterations: each micro-batch's old values, computed by the rank that trains
// it and all-gathered, so that every rank holds them all (a checkpoint stores them).
void OnlineRollouts::score_old_values(Engine& value) {
  const size_t ranks = static_cast<size_t>(comm_.size()), rank = static_cast<size_t>(comm_.rank());
  std::vector<double> mine;  // this rank's micro-batches' values, concatenated
  for (size_t i = rank; i < micro_.size(); i += ranks) {
    micro_[i].old_values = value.values(micro_[i].batch);
    mine.insert(mine.end(), micro_[i].old_values.begin(), micro_[i].old_values.end());
  }
  if (ranks == 1) return;
  const std::vector<std::vector<double>> all = comm_.allgather(mine);
  for (size_t r = 0; r < ranks; ++r) {
    size_t at = 0;
    for (size_t i = r; i < micro_.size(); i += ranks) {
      const size_t T = static_cast<size_t>(micro_[i].batch.size());
      SBP_CHECK(at + T <= all[r].size(), "online ppo: old values of another rank do not fit");
      micro_[i].old_values.assign(all[r].begin() + static_cast<std::ptrdiff_t>(at),
                                  all[r].begin() + static_cast<std::ptrdiff_t>(at + T));
      at += T;
    }
  }
}

// Micro-batches rank, rank + ranks, ... of the batch (all of them on one process), in the same
// number of slots on every rank, as offline data is split (train_batches.h).
StepBatches OnlineRollouts::rank_share() const {
  const int64_t ranks = comm_.size(), M = static_cast<int64_t>(micro_.size());
  if (ranks == 1) return StepBatches::whole(micro_);
  StepBatches step;
  step.step_micro_batches = M;
  step.slots = (M + ranks - 1) / ranks;
  for (int64_t i = comm_.rank(); i < M; i += ranks) {
    step.micro.push_back(micro_[static_cast<size_t>(i)]);
    step.index.push_back(i);
  }
  return step;
}

const std::string& OnlineRollouts::completion_text(const RolloutSample& s) const {
  return texts_.at(static_cast<size_t>(&s - samples_.data()));
}

int64_t OnlineRollouts::longest_prompt() const {
  size_t n = 0;
  for (const PromptRecord& p : prompts_) n = std::max(n, p.ids.size());
  return static_cast<int64_t>(n);
}

double OnlineRollouts::epoch_progress() const {
  return static_cast<double>(cursor_.epoch) +
         static_cast<double>(cursor_.micro_batches_done) /
             static_cast<double>(std::max<size_t>(prompts_.size(), 1));
}

json OnlineRollouts::rollouts_json() const {
  if (batch_step_ < 0 || uses_ >= s_.num_iterations) return nullptr;
  json samples = json::array();
  for (const RolloutSample& s : samples_)
    samples.push_back({{"prompt", s.prompt},
                       {"ids", s.ids},
                       {"logprobs", s.logprobs},
                       {"truncated", s.truncated},
                       {"reward", s.reward},
                       {"per_reward", s.per_reward}});
  json out = {{"step", batch_step_}, {"uses", uses_}, {"samples", samples}};
  if (keeps_old_values()) {
    json values = json::array();  // (T) per micro-batch, in packing order
    for (const MicroBatch& mb : micro_) values.push_back(mb.old_values);
    out["old_values"] = std::move(values);
  }
  return out;
}

}  // namespace sbp

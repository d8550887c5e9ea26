#include "train/run_data.h"

#include "core/error.h"
#include "train/resume_check.h"

namespace sbp {

RunData::RunData(const TrainConfig& c, const ModelConfig& policy, Communicator& comm,
                 const std::string& ckpt, const TrainerState& resumed, const RunLog& log)
    : c_(c), comm_(comm), log_(log) {
  if (trains_online(c_))
    load_prompts(policy);
  else
    load_offline(policy);
  if (!ckpt.empty()) {
    const std::string note =
        check_resume_compatible(c_, resumed, data_.fingerprints, ckpt, comm_.size());
    if (!note.empty()) log_.out("note: %s\n", note.c_str());
  }
  if (!online_) pack_eval();
}

void RunData::load_offline(const ModelConfig& policy) {
  // An online objective whose data.train did not look like prompt records: a first line that
  // does not parse makes it so too, and is what is wrong, so the loader's error (file and line)
  // comes before the one about the objective.
  if (!c_.rewards.empty() && objective_traits(c_.objective).rollouts)
    prepare_training_data(c_, policy.vocab_size);
  if (!c_.rewards.empty())
    throw InputError(c_.where("rewards") +
                     ": rewards score sampled completions: they need objective grpo or ppo with "
                     "prompt records ({\"prompt\": ...} without completions) in data.train");
  data_ = prepare_training_data(c_, policy.vocab_size);
  log_.out("data: %s\n", data_.train_summary.c_str());
  if (data_.chat)
    log_.out("chat template: %s (from %s)\n", data_.chat->name().c_str(),
             data_.chat_source.c_str());
}

void RunData::pack_eval() {
  eval_ = pack_in_order(data_.eval, c_.max_tokens, c_.objective);
  if (objective_traits(c_.objective).rollouts && !eval_.empty()) {
    log_.out("note: %s has no held-out loss (offline rollouts): %s is not evaluated\n",
             objective_name(c_.objective), data_.eval_source.c_str());
    eval_.clear();
  }
  if (!eval_.empty())
    log_.out("eval: %s, %zu micro-batch%s\n", data_.eval_source.c_str(), eval_.size(),
             eval_.size() == 1 ? "" : "es");
}

// Online GRPO/PPO: data.train's prompt records, encoded as `streambp generate` encodes them,
// and the reward functions (command rewards start here).
void RunData::load_prompts(const ModelConfig& policy) {
  if (!c_.data_eval.empty() || c_.eval_fraction > 0.0)
    log_.out("note: online %s has no held-out loss: data.eval / eval_fraction are not used\n",
             objective_name(c_.objective));
  std::optional<ChatTemplate> chat;
  if (c_.chat_template) {
    chat = chat_template_for(*c_.chat_template);
    chat->date_string = c_.date_string;
  }
  prompt_encoder_.emplace(PromptEncoder::from_dir(c_.tokenizer, chat, c_.add_bos));
  std::vector<PromptRecord> prompts =
      read_prompt_records(c_.train_source(), &*prompt_encoder_, policy.vocab_size);
  const size_t n = prompts.size();
  // Every prompt and its completion must fit the model's positions; checked here, with the
  // config, so the error names the key before anything is written (generation would find it
  // at the first prompt too long, after the output directory exists, naming max_new_tokens).
  const RolloutSettings& rs = c_.rollout();
  const std::string key = std::string(objective_name(c_.objective)) + ".max_completion_length";
  for (const PromptRecord& p : prompts) {
    const int64_t P = static_cast<int64_t>(p.ids.size());
    if (P + rs.max_completion_length > policy.max_position_embeddings)
      throw InputError(c_.where(key) + ": " + key + " " + std::to_string(rs.max_completion_length) +
                       " + the " + std::to_string(P) + " tokens of the prompt at " + p.where +
                       " exceed the model's max_position_embeddings (" +
                       std::to_string(policy.max_position_embeddings) + ")");
  }
  online_ =
      std::make_unique<OnlineRollouts>(c_, std::move(prompts), *prompt_encoder_, policy.vocab_size,
                                       comm_);
  data_.fingerprints = {{"train", data_fingerprint(c_.train_source())}};
  log_.out(
      "data: %zu prompts from %s (online %s: %lld prompts x %lld completions per batch, "
      "up to %lld new tokens each, %lld step%s per batch)\n",
      n, c_.data_train.c_str(), objective_name(c_.objective),
      static_cast<long long>(rs.prompts_per_step), static_cast<long long>(rs.num_generations),
      static_cast<long long>(rs.max_completion_length), static_cast<long long>(rs.num_iterations),
      rs.num_iterations == 1 ? "" : "s");
}

int64_t RunData::total_steps(int64_t per_step) {
  if (online_) return c_.max_steps > 0 ? c_.max_steps : online_->steps_in_epochs(c_.epochs);
  batches_ = std::make_unique<TrainBatches>(data_.train.examples, c_.max_tokens, c_.shuffle,
                                            c_.seed, c_.objective);
  return c_.max_steps > 0 ? c_.max_steps
                          : batches_->steps_in_epochs(c_.epochs, per_step, c_.where("epochs"));
}

void RunData::start() {
  if (online_)
    online_->start();
  else
    batches_->start();
}

void RunData::resume(const TrainerState& resumed, const std::string& where) {
  const DataCursor cursor{resumed.epoch, resumed.micro_batches_done, resumed.epoch_rng};
  if (online_)
    online_->resume(cursor, resumed.rollouts, where);
  else
    batches_->resume(cursor, where);
}

StepBatches RunData::next(int64_t per_step, StepRunner& runner, bool value_model, int64_t step) {
  if (!online_) return batches_->next(per_step, comm_);
  // The rollouts are sampled from the weights the step starts from, with the adapters on.
  Engine policy = runner.policy_engine();
  if (!value_model) return online_->next(policy, nullptr, step);
  Engine value = runner.value_engine();
  return online_->next(policy, &value, step);
}

const DataCursor& RunData::cursor() const {
  return online_ ? online_->cursor() : batches_->cursor();
}

double RunData::epoch_progress() const {
  return online_ ? online_->epoch_progress() : batches_->epoch_progress();
}

}  // namespace sbp

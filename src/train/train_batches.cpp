#include "train/train_batches.h"

#include <algorithm>

#include "core/error.h"

namespace sbp {

MicroBatch to_micro_batch(PackedBatch p, ObjectiveKind kind) {
  MicroBatch mb;
  mb.batch = std::move(p.batch);
  if (kind == ObjectiveKind::grpo || kind == ObjectiveKind::ppo) {
    for (double r : p.segment_reward) mb.rewards.push_back(static_cast<float>(r));
  }
  if (kind == ObjectiveKind::grpo && !p.segment_example.empty()) {
    mb.group_size =
        std::count(p.segment_example.begin(), p.segment_example.end(), p.segment_example.front());
  }
  return mb;
}

std::vector<MicroBatch> pack_in_order(const std::vector<Example>& examples, int64_t max_tokens,
                                      ObjectiveKind kind) {
  std::vector<int64_t> order(examples.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::vector<MicroBatch> out;
  for (const MicroBatchPlan& p : pack_examples(examples, order, max_tokens))
    out.push_back(to_micro_batch(assemble_batch(examples, p), kind));
  return out;
}

TrainBatches::TrainBatches(const std::vector<Example>& examples, int64_t max_tokens, bool shuffle,
                           uint64_t seed, ObjectiveKind kind)
    : examples_(examples),
      max_tokens_(max_tokens),
      shuffle_(shuffle),
      seed_(seed),
      kind_(kind),
      rng_(seed, "data-order") {}

int64_t TrainBatches::steps_in_epochs(int64_t epochs, int64_t per_step) const {
  Rng sim(seed_, "data-order");
  int64_t steps = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    const std::vector<int64_t> order =
        epoch_order(static_cast<int64_t>(examples_.size()), shuffle_, sim);
    const int64_t n = static_cast<int64_t>(pack_examples(examples_, order, max_tokens_).size());
    steps += (n + per_step - 1) / per_step;
  }
  return steps;
}

void TrainBatches::plan_epoch() {
  const uint64_t* s = rng_.state();
  cursor_.epoch_rng = {s[0], s[1], s[2], s[3]};
  const std::vector<int64_t> order =
      epoch_order(static_cast<int64_t>(examples_.size()), shuffle_, rng_);
  plans_ = pack_examples(examples_, order, max_tokens_);
}

void TrainBatches::start() {
  cursor_ = DataCursor{};
  plan_epoch();
}

void TrainBatches::resume(const DataCursor& cursor, const std::string& where) {
  rng_.set_state(cursor.epoch_rng.data());
  plan_epoch();
  cursor_ = cursor;
  if (cursor_.micro_batches_done < 0 ||
      cursor_.micro_batches_done > static_cast<int64_t>(plans_.size()))
    throw InputError(where + ": data cursor " + std::to_string(cursor_.micro_batches_done) +
                     " is outside the epoch's " + std::to_string(plans_.size()) + " micro-batches");
}

StepBatches TrainBatches::next(int64_t per_step, const Communicator& comm) {
  if (cursor_.micro_batches_done >= static_cast<int64_t>(plans_.size())) {
    ++cursor_.epoch;
    plan_epoch();
    cursor_.micro_batches_done = 0;
  }
  const int64_t ranks = comm.size();
  const int64_t k =
      std::min<int64_t>(per_step, static_cast<int64_t>(plans_.size()) - cursor_.micro_batches_done);
  StepBatches step;
  step.step_micro_batches = k;
  step.slots = (k + ranks - 1) / ranks;
  for (int64_t i = comm.rank(); i < k; i += ranks) {
    const MicroBatchPlan& plan = plans_[static_cast<size_t>(cursor_.micro_batches_done + i)];
    step.micro.push_back(to_micro_batch(assemble_batch(examples_, plan), kind_));
    step.index.push_back(i);
  }
  cursor_.micro_batches_done += k;
  return step;
}

double TrainBatches::epoch_progress() const {
  return static_cast<double>(cursor_.epoch) +
         static_cast<double>(cursor_.micro_batches_done) /
             static_cast<double>(std::max<size_t>(plans_.size(), 1));
}

}  // namespace sbp

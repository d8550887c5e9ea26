#include "train/train_batches.h"

#include <algorithm>
#include <climits>

#include "core/error.h"

namespace sbp {

MicroBatch to_micro_batch(PackedBatch p, ObjectiveKind kind) {
  MicroBatch mb;
  mb.batch = std::move(p.batch);
  const ObjectiveTraits& t = objective_traits(kind);
  if (t.rollouts || t.sequence_labels) {
    for (double r : p.segment_reward) mb.rewards.push_back(static_cast<float>(r));
  }
  if (t.group == SequenceGroup::configured && !p.segment_example.empty()) {
    mb.group_size =
        std::count(p.segment_example.begin(), p.segment_example.end(), p.segment_example.front());
  }
  return mb;
}

std::vector<MicroBatch> pack_in_order(const std::vector<Example>& examples, int64_t max_tokens,
                                      ObjectiveKind kind) {
  std::vector<MicroBatch> out;
  const std::vector<int64_t> order = identity_order(static_cast<int64_t>(examples.size()));
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

bool TrainBatches::packing_is_order_independent() const {
  if (!shuffle_ || examples_.size() < 2) return true;
  int64_t total = 0, least = INT64_MAX, second = INT64_MAX;
  for (const Example& e : examples_) {
    const int64_t n = e.tokens();
    total += n;  // bounded: every example is at most max_tokens, the data's size bounds the count
    if (n < least) {
      second = least;
      least = n;
    } else if (n < second) {
      second = n;
    }
  }
  // All in one micro-batch whatever the order, or each in its own.
  return total <= max_tokens_ || least + second > max_tokens_;
}

int64_t TrainBatches::steps_in_epochs(int64_t epochs, int64_t per_step,
                                      const std::string& where) const {
  const int64_t n_examples = static_cast<int64_t>(examples_.size());
  constexpr int64_t kMaxSteps = int64_t{1} << 53;  // the trainer state's bound
  if (packing_is_order_independent()) {
    const std::vector<int64_t> order = identity_order(n_examples);
    const int64_t n = static_cast<int64_t>(pack_examples(examples_, order, max_tokens_).size());
    const int64_t per_epoch = (n + per_step - 1) / per_step;
    if (per_epoch > 0 && epochs > kMaxSteps / per_epoch)
      throw InputError(where + ": epochs " + std::to_string(epochs) + " of " +
                       std::to_string(per_epoch) + " steps each is more than 2^53 steps");
    return epochs * per_epoch;
  }
  // A shuffled epoch packs into a number of micro-batches that depends on its order.
  if (epochs > kMaxPlannedExamples / std::max<int64_t>(n_examples, 1))
    throw InputError(where + ": epochs " + std::to_string(epochs) + " of " +
                     std::to_string(n_examples) +
                     " shuffled examples would each have to be packed to count the run's steps "
                     "(more than " + std::to_string(kMaxPlannedExamples) +
                     " example placements): set max_steps instead");
  Rng sim(seed_, "data-order");
  int64_t steps = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    const std::vector<int64_t> order = epoch_order(n_examples, shuffle_, sim);
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
  // The state at the start of epoch e is the seed's after e shuffles, each of which draws once
  // per example but the first (packing.cpp epoch_order); nothing else draws from it.
  const int64_t n_examples = static_cast<int64_t>(examples_.size());
  const int64_t per_epoch = shuffle_ ? std::max<int64_t>(n_examples - 1, 0) : 0;
  if (per_epoch == 0 || cursor.epoch <= kMaxRngAdvance / per_epoch) {
    Rng expect(seed_, "data-order");
    for (int64_t i = 0, draws = cursor.epoch * per_epoch; i < draws; ++i) (void)expect.next();
    if (!std::equal(cursor.epoch_rng.begin(), cursor.epoch_rng.end(), expect.state()))
      throw InputError(where + ": epoch_rng_state is not the data-order state that seed " +
                       std::to_string(seed_) + " gives at the start of epoch " +
                       std::to_string(cursor.epoch) +
                       " (the file was edited, or belongs to another run)");
  } else if (std::all_of(cursor.epoch_rng.begin(), cursor.epoch_rng.end(),
                         [](uint64_t w) { return w == 0; })) {
    throw InputError(where + ": epoch_rng_state is all zero, which no seed gives");
  }
  rng_.set_state(cursor.epoch_rng.data());
  plan_epoch();
  cursor_ = cursor;
  if (cursor_.micro_batches_done < 0 ||
      cursor_.micro_batches_done > static_cast<int64_t>(plans_.size()))
    throw InputError(where + ": \"micro_batches_done\" is " +
                     std::to_string(cursor_.micro_batches_done) + ", past the " +
                     std::to_string(plans_.size()) + " micro-batches of epoch " +
                     std::to_string(cursor_.epoch));
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

#include "step/step_runner.h"

#include "engine/context_rows.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "dist/lora_grads.h"
#include "step/objective_steps.h"

namespace sbp {

namespace {

// `inner` on its route's host version (objective/head_route.h host_chunks: the same numbers),
// keeping the target log-probs of the gradient pass.
class RecordingObjective final : public Objective {
 public:
  RecordingObjective(Objective& inner, std::vector<float>& logp) : inner_(inner), logp_(logp) {}
  HeadKind head() const override { return inner_.head(); }
  HeadRoute route() override {
    HostChunks host = host_chunks(inner_.route());
    host.constant = nullptr;  // every block's log-probs come to the host
    host.grads = [grads = std::move(host.grads), &logp = logp_](const TokenChunk& in,
                                                                const TokenChunkGrads& out) {
      std::copy(in.logp.begin(), in.logp.end(), logp.begin() + in.row_begin);
      grads(in, out);
    };
    return host;
  }
  std::vector<std::span<double>> prepass_sums(int pass) override {
    return inner_.prepass_sums(pass);
  }
  std::vector<std::span<double>> pass_sums() override { return inner_.pass_sums(); }
  double loss() const override { return inner_.loss(); }
  std::map<std::string, double> metrics() const override { return inner_.metrics(); }

 private:
  Objective& inner_;
  std::vector<float>& logp_;
};

void check_model(bool ok, const ObjectiveSetup& s, const char* what) {
  if (!ok) throw InputError(std::string("objective ") + s.describe() + " needs " + what);
}

// The per-sequence and per-token constants the objective reads, against the batch's shape.
void check_micro_batch(const ObjectiveSetup& s, const MicroBatch& mb, size_t i) {
  const std::string where = "micro-batch " + std::to_string(i) + ": ";
  const size_t S = mb.batch.seq_lens.size(), T = static_cast<size_t>(mb.batch.size());
  const ObjectiveTraits& t = s.traits();
  if (t.rollouts && mb.rewards.size() != S)
    throw InputError(where + std::to_string(mb.rewards.size()) + " rewards for " +
                     std::to_string(S) + " sequences");
  if (t.group == SequenceGroup::configured &&
      (mb.group_size < 1 || S % static_cast<size_t>(mb.group_size) != 0))
    throw InputError(where + std::to_string(S) + " sequences are not groups of " +
                     std::to_string(mb.group_size));
  if (!mb.old_logp.empty() && mb.old_logp.size() != T)
    throw InputError(where + std::to_string(mb.old_logp.size()) + " old log-probs for " +
                     std::to_string(T) + " rows");
  if (!mb.old_values.empty() && mb.old_values.size() != T)
    throw InputError(where + std::to_string(mb.old_values.size()) + " old values for " +
                     std::to_string(T) + " rows");
}

}  // namespace

StepBatches StepBatches::whole(std::vector<MicroBatch> micro) {
  StepBatches b;
  b.step_micro_batches = b.slots = static_cast<int64_t>(micro.size());
  for (int64_t i = 0; i < b.slots; ++i) b.index.push_back(i);
  b.micro = std::move(micro);
  return b;
}

StepRunner::StepRunner(const ObjectiveSetup& objective, const StepModels& models, Backend& be,
                       Pool& pool, const ExecConfig& exec, Communicator& comm,
                       StepRunnerOptions opts)
    : setup_(objective),
      models_(models),
      be_(be),
      pool_(pool),
      exec_(exec),
      comm_(comm),
      opts_(opts) {
  check_model(models.policy.model.defined(), setup_, "a policy");
  check_model(!setup_.needs_reference() || models.reference.defined() || models.lora.defined(),
              setup_, "a reference model");
  if (models.lora.defined()) {
    frozen_ = ParameterSet::unallocated(*models.policy.model.cfg, ModelHead::lm);
  }
  check_model(!setup_.needs_value_model() || models.value.defined(), setup_,
              "a value model and its gradients");
}

Engine StepRunner::engine(const ModelConfig& cfg, const ParameterSet& weights) {
  Engine e(cfg, weights, be_, pool_, exec_);
  e.set_context(opts_.context);
  return e;
}
Engine StepRunner::policy_engine() {
  Engine e = engine(*models_.policy.model.cfg, *models_.policy.model.weights);
  e.set_lora(models_.lora.weights, nullptr);
  return e;
}
Engine StepRunner::reference_engine() {
  // LoRA without a separate reference: the policy's base weights with the adapters off.
  if (!models_.reference.defined())
    return engine(*models_.policy.model.cfg, *models_.policy.model.weights);
  return engine(*models_.reference.cfg, *models_.reference.weights);
}
const ModelConfig& StepRunner::reference_config() const {
  return models_.reference.defined() ? *models_.reference.cfg : *models_.policy.model.cfg;
}
Engine StepRunner::value_engine() {
  return engine(*models_.value.model.cfg, *models_.value.model.weights);
}

Engine::TokenScores StepRunner::score(const Batch& batch) { return policy_engine().score(batch); }

void StepRunner::backward_slot(const TrainedView& model, MicroBatchPrep& prep, Objective& objective,
                               int64_t slot, std::vector<float>* logp) {
  Engine engine = this->engine(*model.model.cfg, *model.model.weights);
  const PreparedBatch& batch = prep.for_model(*model.model.cfg);
  // The LoRA policy: frozen base (no gradient buffers), the adapters' gradients instead.
  const bool lora = &model == &models_.policy && models_.lora.defined();
  if (lora) engine.set_lora(models_.lora.weights, models_.lora.grads);
  GradHook* hook = lora ? nullptr : model.grads->hook(slot);
  const ParameterSet& grads = lora ? frozen_ : model.grads->grads();
  if (logp) {
    logp->assign(static_cast<size_t>(batch.size()), 0.0f);
    RecordingObjective recording(objective, *logp);  // reads every block's log-probs now
    engine.forward_backward(batch, recording, grads, hook);
    // A context group's ranks each saw their own rows: every row on every rank.
    if (opts_.context && be_.computes())
      gather_host_rows(*opts_.context, engine.slice(batch.size()), std::span<float>(*logp));
  } else {
    engine.forward_backward(batch, objective, grads, hook, &reads_);
  }
  if (!lora) model.grads->end_slot(slot);
}

ReferenceLogp StepRunner::logp_at_next_wait(Engine& engine, const PreparedBatch& batch,
                                            Buffer* device) {
  if (opts_.context) return ReferenceLogp::on_host(engine.score(batch).logp);
  Buffer logp = engine.rows_on_device(batch, HeadKind::lm);  // (T)
  ReferenceLogp out;
  out.host = be_.computes() ? be_.download_at_next_wait(logp.view())
                            : std::make_shared<std::vector<float>>(
                                  static_cast<size_t>(logp.view().numel()), 0.0f);
  if (device) {
    out.device = logp.view();
    *device = std::move(logp);
  }
  return out;
}

std::shared_ptr<const std::vector<float>> StepRunner::values_at_next_wait(
    Engine& engine, const PreparedBatch& batch, Buffer* device) {
  if (opts_.context) return std::make_shared<const std::vector<float>>(engine.values(batch));
  Buffer values = engine.rows_on_device(batch, HeadKind::value);  // (T)
  auto host = be_.computes() ? be_.download_at_next_wait(values.view())
                             : std::make_shared<const std::vector<float>>(
                                   static_cast<size_t>(batch.size()), 0.0f);
  if (device) *device = std::move(values);
  return host;
}

void StepRunner::skip_slot(int64_t slot) {
  if (models_.policy.grads) models_.policy.grads->empty_slot(slot);
  if (models_.value.defined()) models_.value.grads->empty_slot(slot);
}

std::vector<float>* StepRunner::logp_slot(StepResult& r, size_t i) {
  return opts_.record_logp ? &r.logp[i] : nullptr;
}

void StepRunner::at_finish(std::function<void(StepResult&)> complete) {
  completions_.push_back(std::move(complete));
}

StepResult StepRunner::run(const StepBatches& step) {
  StepResult r = start(step);
  finish(r);
  return r;
}

void StepRunner::finish(StepResult& r) {
  be_.finish_reads();  // waits only if no wait came after start() (run(), not the training loop)
  reads_.run();
  std::vector<std::function<void(StepResult&)>> completions;
  completions.swap(completions_);
  for (auto& complete : completions) complete(r);
}

StepResult StepRunner::start(const StepBatches& step) {
  reads_.clear();
  completions_.clear();
  const bool lora = models_.lora.defined();
  check_model(lora ? models_.lora.grads != nullptr : models_.policy.defined(), setup_,
              "the policy's gradients");
  SBP_CHECK(step.micro.size() == step.index.size() &&
                static_cast<int64_t>(step.micro.size()) <= step.slots &&
                step.slots <= step.step_micro_batches,
            "StepRunner::run: inconsistent StepBatches");
  StepResult r;
  double loss_tokens = 0.0;
  for (size_t i = 0; i < step.micro.size(); ++i) {
    const MicroBatch& mb = step.micro[i];
    mb.batch.validate(models_.policy.model.cfg->vocab_size, "micro-batch " + std::to_string(i));
    check_micro_batch(setup_, mb, i);
    loss_tokens += mb.batch.loss_weight_sum();
    r.tokens += mb.batch.size();
  }
  r.loss_tokens = comm_.sum(loss_tokens);
  r.tokens = comm_.sum(r.tokens);
  if (opts_.record_logp) r.logp.resize(step.micro.size());
  if (lora) {
    for (size_t i = 0; i < models_.lora.grads->size(); ++i)
      be_.fill(models_.lora.grads->tensor(i), 0.0f);
  } else {
    models_.policy.grads->begin_step(step.slots);
  }
  if (models_.value.defined()) models_.value.grads->begin_step(step.slots);
  objective_step(setup_.kind).run(*this, step, r);
  // LoRA: each rank's adapter gradients hold its micro-batches' terms, already divided by the
  // step's global normalisers; their sum over ranks is the step's gradient (one collective).
  // With context parallelism each rank holds its rows' share: the context group sums first.
  if (lora && opts_.context) allreduce_lora_grads(*opts_.context, *models_.lora.grads);
  if (lora) allreduce_lora_grads(comm_, *models_.lora.grads);
  return r;
}

double StepRunner::evaluate(std::span<const MicroBatch> eval) {
  const auto evaluate = objective_step(setup_.kind).evaluate;
  return evaluate ? evaluate(*this, eval) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace sbp

#include "step/step_runner.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "objective/sft.h"
#include "objective/token_terms.h"
#include "step/weighted_means.h"

namespace sbp {

namespace {

// Passes everything through to `inner` and keeps the target log-probs of the gradient pass.
class RecordingObjective final : public Objective {
 public:
  RecordingObjective(Objective& inner, std::vector<float>& logp) : inner_(inner), logp_(logp) {}
  HeadKind head() const override { return inner_.head(); }
  bool wants_entropy() const override { return inner_.wants_entropy(); }
  int prepasses() const override { return inner_.prepasses(); }
  void prepass(int pass, const TokenChunk& rows) override { inner_.prepass(pass, rows); }
  void finish_prepass(int pass) override { inner_.finish_prepass(pass); }
  void chunk_grads(const TokenChunk& in, const TokenChunkGrads& out) override {
    std::copy(in.logp.begin(), in.logp.end(), logp_.begin() + in.row_begin);
    inner_.chunk_grads(in, out);
  }
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
  const bool rl = s.kind == ObjectiveKind::grpo || s.kind == ObjectiveKind::ppo;
  if (rl && mb.rewards.size() != S)
    throw InputError(where + std::to_string(mb.rewards.size()) + " rewards for " +
                     std::to_string(S) + " sequences");
  if (s.kind == ObjectiveKind::grpo &&
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
    if (comm.size() > 1)
      throw InputError("LoRA is not supported with data parallelism (" +
                       std::to_string(comm.size()) + " ranks)");
    frozen_ = ParameterSet::unallocated(*models.policy.model.cfg, ModelHead::lm);
  }
  check_model(!setup_.needs_value_model() || models.value.defined(), setup_,
              "a value model and its gradients");
}

Engine StepRunner::policy_engine() {
  Engine e(*models_.policy.model.cfg, *models_.policy.model.weights, be_, pool_, exec_);
  e.set_lora(models_.lora.weights, nullptr);
  return e;
}
Engine StepRunner::reference_engine() {
  // LoRA without a separate reference: the policy's base weights with the adapters off.
  if (!models_.reference.defined())
    return Engine(*models_.policy.model.cfg, *models_.policy.model.weights, be_, pool_, exec_);
  return Engine(*models_.reference.cfg, *models_.reference.weights, be_, pool_, exec_);
}
const ModelConfig& StepRunner::reference_config() const {
  return models_.reference.defined() ? *models_.reference.cfg : *models_.policy.model.cfg;
}
Engine StepRunner::value_engine() {
  return Engine(*models_.value.model.cfg, *models_.value.model.weights, be_, pool_, exec_);
}

Engine::TokenScores StepRunner::score(const Batch& batch) { return policy_engine().score(batch); }

void StepRunner::backward_slot(const TrainedView& model, MicroBatchPrep& prep,
                               Objective& objective, int64_t slot, std::vector<float>* logp) {
  Engine engine(*model.model.cfg, *model.model.weights, be_, pool_, exec_);
  const PreparedBatch& batch = prep.for_model(*model.model.cfg);
  // The LoRA policy: frozen base (no gradient buffers), the adapters' gradients instead.
  const bool lora = &model == &models_.policy && models_.lora.defined();
  if (lora) engine.set_lora(models_.lora.weights, models_.lora.grads);
  GradHook* hook = lora ? nullptr : model.grads->hook(slot);
  const ParameterSet& grads = lora ? frozen_ : model.grads->grads();
  if (logp) {
    logp->assign(static_cast<size_t>(batch.size()), 0.0f);
    RecordingObjective recording(objective, *logp);
    engine.forward_backward(batch, recording, grads, hook);
  } else {
    engine.forward_backward(batch, objective, grads, hook);
  }
  if (!lora) model.grads->end_slot(slot);
}

void StepRunner::skip_slot(int64_t slot) {
  if (models_.policy.grads) models_.policy.grads->empty_slot(slot);
  if (models_.value.defined()) models_.value.grads->empty_slot(slot);
}

std::vector<float>* StepRunner::logp_slot(StepResult& r, size_t i) {
  return opts_.record_logp ? &r.logp[i] : nullptr;
}

StepResult StepRunner::run(const StepBatches& step) {
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
  switch (setup_.kind) {
    case ObjectiveKind::sft: run_sft(step, r); break;
    case ObjectiveKind::dpo: run_dpo(step, r); break;
    case ObjectiveKind::grpo: run_grpo(step, r); break;
    case ObjectiveKind::ppo: run_ppo(step, r); break;
  }
  return r;
}

void StepRunner::run_sft(const StepBatches& step, StepResult& r) {
  for_each_slot(step, [&](size_t i, int64_t slot) {
    const Batch& b = step.micro[i].batch;
    SftObjective objective(b, r.loss_tokens);  // normalised by the loss tokens of the whole step
    MicroBatchPrep prep(b, be_, pool_);
    backward_slot(models_.policy, prep, objective, slot, logp_slot(r, i));
    r.loss += objective.loss();
  });
  r.loss = comm_.sum(r.loss);
}

void StepRunner::run_dpo(const StepBatches& step, StepResult& r) {
  double pairs = 0.0;
  for (const MicroBatch& mb : step.micro)
    pairs += static_cast<double>(mb.batch.seq_lens.size() / 2);
  pairs = comm_.sum(pairs);
  WeightedMeans stats;
  for_each_slot(step, [&](size_t i, int64_t slot) {
    const Batch& b = step.micro[i].batch;
    MicroBatchPrep prep(b, be_, pool_);  // shared by the reference's pass and the policy's
    const PreparedBatch& for_reference = prep.for_model(reference_config());
    const std::vector<float> ref = reference_engine().score(for_reference).logp;  // (T)
    DpoObjective objective(b, ref, setup_.dpo, pairs);
    backward_slot(models_.policy, prep, objective, slot, logp_slot(r, i));
    r.loss += objective.loss();
    stats.add(objective.metrics(), static_cast<double>(b.seq_lens.size() / 2));
  });
  r.loss = comm_.sum(r.loss);
  stats.merge_ranks(comm_);
  r.metrics = stats.means();
}

double StepRunner::evaluate(std::span<const MicroBatch> eval) {
  if (setup_.kind == ObjectiveKind::dpo) return evaluate_dpo(eval);
  if (setup_.kind != ObjectiveKind::sft) return std::numeric_limits<double>::quiet_NaN();
  double sums[2] = {0.0, 0.0};  // NLL, loss weight
  for (size_t i = static_cast<size_t>(comm_.rank()); i < eval.size();
       i += static_cast<size_t>(comm_.size())) {
    const Batch& b = eval[i].batch;
    const std::vector<float> logp = score(b).logp;
    const std::vector<float> w = b.target_weights();
    for (size_t t = 0; t < w.size(); ++t) {
      sums[0] -= static_cast<double>(w[t]) * static_cast<double>(logp[t]);
      sums[1] += w[t];
    }
  }
  comm_.sum(sums);
  return sums[1] > 0.0 ? sums[0] / sums[1] : 0.0;
}

// Per-sequence sums of the policy's and the reference's log-probs over the completions, then
// the pair loss: DpoObjective's formulas, forward only.
double StepRunner::evaluate_dpo(std::span<const MicroBatch> eval) {
  const DpoConfig& cfg = setup_.dpo;
  const bool ipo = cfg.loss_type == DpoLoss::ipo;
  double sums[2] = {0.0, 0.0};  // loss, pairs
  for (size_t i = static_cast<size_t>(comm_.rank()); i < eval.size();
       i += static_cast<size_t>(comm_.size())) {
    const Batch& b = eval[i].batch;
    MicroBatchPrep prep(b, be_, pool_);  // shared by the policy's pass and the reference's
    const std::vector<float> pol =
        policy_engine().score(prep.for_model(*models_.policy.model.cfg)).logp;
    const std::vector<float> ref =
        reference_engine().score(prep.for_model(reference_config())).logp;
    const SequenceRows rows(b);
    std::vector<double> sp(b.seq_lens.size(), 0.0), sr(sp.size(), 0.0);
    for (int64_t t = 0; t < rows.num_rows(); ++t) {
      const size_t s = static_cast<size_t>(rows.segment[static_cast<size_t>(t)]);
      sp[s] +=
          static_cast<double>(rows.weight[static_cast<size_t>(t)]) * pol[static_cast<size_t>(t)];
      sr[s] +=
          static_cast<double>(rows.weight[static_cast<size_t>(t)]) * ref[static_cast<size_t>(t)];
    }
    for (size_t q = 0; q + 1 < sp.size(); q += 2) {
      const double nc = ipo ? rows.weight_sum[q] : 1.0, nr = ipo ? rows.weight_sum[q + 1] : 1.0;
      const double z = (sp[q] / nc - sp[q + 1] / nr) - (sr[q] / nc - sr[q + 1] / nr);
      sums[0] += dpo_pair_loss(z, cfg.loss_type, cfg.beta, cfg.label_smoothing).value;
      sums[1] += 1.0;
    }
  }
  comm_.sum(sums);
  return sums[1] > 0.0 ? sums[0] / sums[1] : 0.0;
}

}  // namespace sbp

#include "step/step_context.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "dist/lora_grads.h"
#include "engine/context_rows.h"
#include "step/step_runner.h"
#include "step/weighted_means.h"

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

}  // namespace

StepContext::StepContext(const ObjectiveSetup& objective, const StepModels& models, Backend& be,
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

Engine StepContext::engine(const ModelConfig& cfg, const ParameterSet& weights) {
  Engine e(cfg, weights, be_, pool_, exec_);
  e.set_context(opts_.context);
  // ZeRO-3: the trained model whose weights these are binds them a group at a time.
  for (const TrainedView* m : {&models_.policy, &models_.value})
    if (m->grads && m->model.weights == &weights) e.set_weight_hook(m->grads->weight_hook());
  return e;
}
Engine StepContext::policy_engine() {
  Engine e = engine(*models_.policy.model.cfg, *models_.policy.model.weights);
  e.set_lora(models_.lora.weights, nullptr);
  return e;
}
Engine StepContext::reference_engine() {
  // LoRA without a separate reference: the policy's base weights with the adapters off.
  if (!models_.reference.defined())
    return engine(*models_.policy.model.cfg, *models_.policy.model.weights);
  return engine(*models_.reference.cfg, *models_.reference.weights);
}
const ModelConfig& StepContext::reference_config() const {
  return models_.reference.defined() ? *models_.reference.cfg : *models_.policy.model.cfg;
}
Engine StepContext::value_engine() {
  return engine(*models_.value.model.cfg, *models_.value.model.weights);
}

void StepContext::backward_slot(const TrainedView& model, MicroBatchPrep& prep,
                                Objective& objective, int64_t slot, std::vector<float>* logp) {
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

ReferenceLogp StepContext::logp_at_next_wait(Engine& engine, const PreparedBatch& batch,
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

std::shared_ptr<const std::vector<float>> StepContext::values_at_next_wait(
    Engine& engine, const PreparedBatch& batch, Buffer* device) {
  if (opts_.context) return std::make_shared<const std::vector<float>>(engine.values(batch));
  Buffer values = engine.rows_on_device(batch, HeadKind::value);  // (T)
  auto host = be_.computes() ? be_.download_at_next_wait(values.view())
                             : std::make_shared<const std::vector<float>>(
                                   static_cast<size_t>(batch.size()), 0.0f);
  if (device) *device = std::move(values);
  return host;
}

void StepContext::skip_slot(int64_t slot) {
  if (models_.policy.grads) models_.policy.grads->empty_slot(slot);
  if (models_.value.defined()) models_.value.grads->empty_slot(slot);
}

std::vector<float>* StepContext::logp_slot(StepResult& r, size_t i) {
  return opts_.record_logp ? &r.logp[i] : nullptr;
}

void StepContext::at_finish(std::function<void(StepResult&)> complete) {
  completions_.push_back(std::move(complete));
}

std::vector<const MicroBatch*> StepContext::eval_share(std::span<const MicroBatch> eval) {
  std::vector<const MicroBatch*> mine;
  for (size_t i = static_cast<size_t>(comm_.rank()); i < eval.size();
       i += static_cast<size_t>(comm_.size()))
    mine.push_back(&eval[i]);
  return mine;
}

void StepContext::begin_step() {
  reads_.clear();
  kept_.clear();
  completions_.clear();
}

void StepContext::check_trained() const {
  check_model(models_.lora.defined() ? models_.lora.grads != nullptr : models_.policy.defined(),
              setup_, "the policy's gradients");
}

void StepContext::zero_grads(int64_t slots) {
  if (models_.lora.defined()) {
    for (size_t i = 0; i < models_.lora.grads->size(); ++i)
      be_.fill(models_.lora.grads->tensor(i), 0.0f);
  } else {
    models_.policy.grads->begin_step(slots);
  }
  if (models_.value.defined()) models_.value.grads->begin_step(slots);
}

void StepContext::reduce_lora_grads() {
  if (!models_.lora.defined()) return;
  // Each rank's adapter gradients hold its micro-batches' terms, already divided by the step's
  // global normalisers; their sum over ranks is the step's gradient (one collective). With
  // context parallelism each rank holds its rows' share: the context group sums first.
  if (opts_.context) allreduce_lora_grads(*opts_.context, *models_.lora.grads);
  allreduce_lora_grads(comm_, *models_.lora.grads);
}

void StepContext::complete_kept(StepResult& r) {
  WeightedMeans stats;
  for (const Kept& k : kept_) {
    if (!k.weight) continue;
    r.loss += k.objective->loss();
    stats.add(k.objective->metrics(), *k.weight);
  }
  r.loss = comm_.sum(r.loss);
  stats.merge_ranks(comm_);
  r.metrics = stats.means();
}

void StepContext::finish_step(StepResult& r) {
  be_.finish_reads();  // waits only if no wait came after start() (run(), not the training loop)
  reads_.run();
  complete_kept(r);
  std::vector<std::function<void(StepResult&)>> completions;
  completions.swap(completions_);
  for (auto& complete : completions) complete(r);
  kept_.clear();
}

}  // namespace sbp

#include "engine/gradcheck.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "engine/engine.h"

namespace sbp {

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

namespace {

struct ModeRun {
  double loss = 0.0;
  std::map<std::string, double> metrics;
  std::vector<std::vector<float>> grads;  // per parameter tensor, copied out of the run's pool
  int64_t peak = 0;
};

void copy_out(const ParameterSet& g, ModeRun* r) {
  for (size_t i = 0; i < g.size(); ++i) {
    const Tensor& t = g.tensor(i);
    r->grads.emplace_back(t.f32(), t.f32() + t.numel());
  }
}

ModeRun run_mode(const ObjectiveSetup& setup, const ObjectiveModels& models,
                 const StepConstants& constants, const Batch& batch, const ExecConfig& exec,
                 bool poison) {
  Ledger ledger;
  Pool pool(ledger, PoolOptions{.materialize = true, .poison = poison});
  CpuBackend be;
  ModeRun r;
  ParameterSet grads(models.cfg, pool, Category::grads, DType::F32, /*zero=*/true);
  ParameterSet value_grads;
  if (models.value)
    value_grads = ParameterSet(models.cfg, pool, Category::grads, DType::F32, true, ModelHead::value);
  const StepOutcome out = run_objective_step(setup, models, constants, batch, be, pool, exec,
                                             grads, models.value ? &value_grads : nullptr);
  r.loss = out.loss;
  r.metrics = out.metrics;
  r.peak = ledger.peak();
  copy_out(grads, &r);
  if (models.value) copy_out(value_grads, &r);
  return r;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  const float* pa = a.data();
  const float* pb = b.data();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(pa[i]) - pb[i]);
    if (!(d <= num)) num = d;  // NaN counts as infinitely wrong
    den = std::max(den, std::fabs(static_cast<double>(pb[i])));
  }
  if (std::isnan(num)) return INFINITY;
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return num / den;
}

}  // namespace

GradcheckResult run_gradcheck(const ModelConfig& cfg, const ParameterSet& weights,
                              const Batch& batch, const GradcheckOptions& opts) {
  const ObjectiveSetup& setup = opts.objective;
  // The other models of the step live as long as the check; the constants are computed once.
  Ledger ledger;
  Pool pool(ledger);
  CpuBackend be;
  ParameterSet reference, value;
  ObjectiveModels models{cfg, weights};
  if (setup.needs_reference()) {
    reference = make_reference_weights(cfg, weights, pool, setup.reference_noise, opts.seed);
    models.reference = &reference;
  }
  if (setup.needs_value_model()) {
    value = ParameterSet(cfg, pool, Category::weights, DType::F32, false, ModelHead::value);
    init_parameters(value, opts.seed + 1, InitStyle::test, 0.2f);
    models.value = &value;
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < weights.size(); ++i) names.push_back(weights.name(i));
  for (size_t i = 0; i < value.size(); ++i) names.push_back("value:" + value.name(i));
  const ExecConfig base_exec = parse_mode("base");
  const StepConstants constants =
      make_step_constants(setup, models, batch, be, pool, base_exec, opts.seed);

  GradcheckResult res;
  const ModeRun base = run_mode(setup, models, constants, batch, base_exec, opts.poison);
  res.base_loss = base.loss;
  res.base_metrics = base.metrics;
  for (const ExecConfig& exec : opts.modes) {
    const ModeRun run = run_mode(setup, models, constants, batch, exec, opts.poison);
    ModeResult m;
    m.mode = mode_name(exec);
    m.layer_chunk = exec.layer_chunk_for(batch.size());
    m.head_chunk = exec.head_chunk_for(batch.size());
    m.loss = run.loss;
    m.loss_rel_err = std::fabs(run.loss - base.loss) / std::max(std::fabs(base.loss), 1e-30);
    if (std::isnan(run.loss)) m.loss_rel_err = INFINITY;
    m.max_rel_err = m.loss_rel_err;
    m.peak_bytes = run.peak;
    for (size_t i = 0; i < base.grads.size(); ++i) {
      const double e = rel_err(run.grads[i], base.grads[i]);
      m.per_param[names[i]] = e;
      m.max_rel_err = std::max(m.max_rel_err, e);
      double& worst = res.per_param[names[i]];
      worst = std::max(worst, e);
    }
    res.max_rel_err = std::max(res.max_rel_err, m.max_rel_err);
    res.modes.push_back(std::move(m));
  }
  return res;
}

}  // namespace sbp

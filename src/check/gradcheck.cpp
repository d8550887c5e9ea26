#include "check/gradcheck.h"

#include <algorithm>
#include <cmath>

#include "check/random_batches.h"
#include "core/error.h"
#include "core/rng.h"
#include "dist/data_parallel.h"
#include "engine/engine.h"
#include "objective/sequence_rows.h"
#include "step/micro_batch_prep.h"

namespace sbp::cli {

namespace {

double max_abs(const std::vector<float>& a) {
  double m = 0.0;
  for (float x : a) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// max |a - b| / scale; NaN counts as infinitely wrong.
double scaled_err(const std::vector<float>& a, const std::vector<float>& b, double scale) {
  double num = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= num)) num = d;
  }
  if (std::isnan(num)) return INFINITY;
  if (scale == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return num / scale;
}

// The value model's tensors are named "value:<HF name>" (a model of its own, with its own scale).
bool is_value_tensor(const std::string& name) { return name.starts_with("value:"); }

// Each tensor's denominator of the error measure (gradcheck.h): max(max |g_base| of the tensor,
// kNegligibleGradient x the largest max |g_base| of its model). Also each tensor's max |g_base|
// as a fraction of that largest one, in `fraction`.
std::vector<double> error_scales(const std::vector<std::vector<float>>& base,
                                 const std::vector<std::string>& names,
                                 std::map<std::string, double>* fraction) {
  double largest[2] = {0.0, 0.0};  // policy (or adapters), value model
  std::vector<double> own(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    own[i] = max_abs(base[i]);
    double& l = largest[is_value_tensor(names[i])];
    l = std::max(l, own[i]);
  }
  std::vector<double> scale(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    const double l = largest[is_value_tensor(names[i])];
    scale[i] = std::max(own[i], kNegligibleGradient * l);
    (*fraction)[names[i]] = l > 0.0 ? own[i] / l : 0.0;
  }
  return scale;
}

void copy_out(const ParameterSet& g, std::vector<std::vector<float>>* out) {
  for (size_t i = 0; i < g.size(); ++i) out->push_back(download_f32(g.tensor(i)));
}

// Adds noise * N(0, 1) to the completion rows of x (T).
void add_noise(std::vector<float>& x, const SequenceRows& rows, float noise, Rng& rng) {
  for (size_t t = 0; t < x.size(); ++t)
    if (rows.weight[t] > 0.0f) x[t] += noise * rng.normal();
}

}  // namespace

MicroBatch gradcheck_micro_batch(Backend& be, const ModelConfig& cfg, const ParameterSet& weights,
                                 const ParameterSet* value, const Batch& batch,
                                 const GradcheckOptions& opts, const LoraSet* lora) {
  const ObjectiveTraits& traits = opts.objective.traits();
  MicroBatch mb = random_micro_batch(traits.kind, opts.group_size, batch, opts.seed);
  if (!traits.rollouts) return mb;
  Ledger ledger;
  Pool pool(ledger, be);
  const ExecConfig base = parse_mode("base");
  const SequenceRows rows(batch);
  Rng rng(opts.seed, "rollout-noise");
  MicroBatchPrep prep(batch, be, pool);  // the policy's and the value model's passes share it
  if (opts.old_logp_noise != 0.0f) {
    Engine policy(cfg, weights, be, pool, base);
    policy.set_lora(lora, nullptr);
    mb.old_logp = policy.score(prep.for_model(cfg)).logp;
    add_noise(mb.old_logp, rows, opts.old_logp_noise, rng);
  }
  if (traits.value_model && value && opts.value_noise != 0.0f) {
    mb.old_values = Engine(cfg, *value, be, pool, base).values(prep.for_model(cfg));
    add_noise(mb.old_values, rows, opts.value_noise, rng);
  }
  return mb;
}

ModeGrads gradcheck_step(Backend& be, const ModelConfig& cfg, const ParameterSet& weights,
                         const ParameterSet* reference, const ParameterSet* value,
                         const MicroBatch& mb, const ExecConfig& exec, const GradcheckOptions& opts,
                         const LoraSet* lora) {
  Ledger ledger, host_ledger;
  Pool pool(ledger, be, PoolOptions{.poison = opts.poison});
  Pool host_pool(host_ledger, be.host_memory(), PoolOptions{.poison = opts.poison});
  if (exec.offload.any()) pool.set_host(&host_pool);
  // LoRA: the base is frozen (no gradient buffers at all), the adapters get zeroed gradients.
  std::unique_ptr<DataParallel> policy_grads;
  LoraSet lora_grads;
  if (!lora)
    policy_grads =
        std::make_unique<DataParallel>(single_process(), 0, cfg, ModelHead::lm, pool, be, nullptr);
  else
    lora_grads = LoraSet(cfg, lora->config(), pool, Category::grads, DType::F32, true);
  std::unique_ptr<DataParallel> value_grads;
  StepModels models;
  models.policy = {{&cfg, &weights}, policy_grads.get()};
  if (lora) models.lora = {lora, &lora_grads};
  if (reference) models.reference = {&cfg, reference};
  if (value) {
    value_grads = std::make_unique<DataParallel>(single_process(), 0, cfg, ModelHead::value, pool,
                                                 be, nullptr);
    models.value = {{&cfg, value}, value_grads.get()};
  }
  ModeGrads out;
  Communicator* context = opts.context;
  out.result = StepRunner(opts.objective, models, be, pool, exec, single_process(),
                          StepRunnerOptions{.context = context})
                   .run(StepBatches::whole({mb}));
  out.peak_bytes = ledger.peak();
  out.host_peak_bytes = host_ledger.peak();
  out.grads_bytes = ledger.category_peak(Category::grads);
  if (lora) {
    for (size_t i = 0; i < lora_grads.size(); ++i)
      out.grads.push_back(download_f32(lora_grads.tensor(i)));
  } else {
    copy_out(policy_grads->grads(), &out.grads);
  }
  if (value_grads) copy_out(value_grads->grads(), &out.grads);
  // Each rank holds its rows' share: the micro-batch's gradient is the sum over the group. The
  // step runner sums LoRA adapters' itself (step_runner.cpp); full gradients (the policy's, a
  // value model's) are summed here, as data parallelism's reduction over every rank would.
  if (context) {
    for (size_t i = lora ? lora_grads.size() : 0; i < out.grads.size(); ++i) {
      std::vector<float>& g = out.grads[i];
      std::vector<double> sum(g.begin(), g.end());
      context->sum(std::span<double>(sum));
      std::copy(sum.begin(), sum.end(), g.begin());
    }
  }
  return out;
}

namespace {

// Every mode of opts.modes against `base`, in res.modes and res.per_param.
void compare_modes(Backend& be, const ModelConfig& cfg, const ParameterSet& weights,
                   const ParameterSet* ref_p, const ParameterSet* value_p, const MicroBatch& mb,
                   const std::vector<std::string>& names, const ModeGrads& base,
                   const GradcheckOptions& opts, GradcheckResult& res,
                   const LoraSet* lora = nullptr) {
  const int64_t T = mb.batch.size();
  const std::vector<double> scale = error_scales(base.grads, names, &res.base_fraction);
  for (const ExecConfig& exec : opts.modes) {
    const ModeGrads run = gradcheck_step(be, cfg, weights, ref_p, value_p, mb, exec, opts, lora);
    ModeResult m;
    m.mode = mode_name(exec);
    m.layer_chunk = exec.layer_chunk_for(T);
    m.head_chunk = exec.head_chunk_for(T);
    m.loss = run.result.loss;
    m.loss_rel_err = std::fabs(run.result.loss - base.result.loss) /
                     std::max(std::fabs(base.result.loss), 1e-30);
    if (std::isnan(run.result.loss)) m.loss_rel_err = INFINITY;
    m.max_rel_err = m.loss_rel_err;
    m.peak_bytes = run.peak_bytes;
    m.host_peak_bytes = run.host_peak_bytes;
    m.grads_bytes = run.grads_bytes;
    for (size_t i = 0; i < base.grads.size(); ++i) {
      const double e = scaled_err(run.grads[i], base.grads[i], scale[i]);
      m.per_param[names[i]] = e;
      m.max_rel_err = std::max(m.max_rel_err, e);
      double& worst = res.per_param[names[i]];
      worst = std::max(worst, e);
    }
    res.max_rel_err = std::max(res.max_rel_err, m.max_rel_err);
    res.modes.push_back(std::move(m));
  }
}

// A copy of `w` in bf16 (the fp32 values rounded), in `pool`.
ParameterSet bf16_copy(Backend& be, const ModelConfig& cfg, const ParameterSet& w, Pool& pool) {
  ParameterSet out(cfg, pool, Category::weights, DType::BF16, false, w.head());
  for (size_t i = 0; i < w.size(); ++i) be.copy(out.tensor(i), w.tensor(i));
  return out;
}

GradcheckResult run_gradcheck_bf16(Backend& be, const ModelConfig& cfg, const ParameterSet& weights,
                                   const ParameterSet* ref_p, const ParameterSet* value_p,
                                   const MicroBatch& mb, const std::vector<std::string>& names,
                                   GradcheckOptions opts) {
  GradcheckResult res;
  // The yardstick: base in fp32 on the fp32 weights.
  opts.precision = Precision::fp32;
  GradcheckOptions alone = opts;  // base: the yardstick every rank computes on its own
  alone.context = nullptr;
  const ModeGrads f32 =
      gradcheck_step(be, cfg, weights, ref_p, value_p, mb, parse_mode("base"), alone);
  // Every model rounded to bf16; each mode in bf16.
  Ledger ledger;
  Pool pool(ledger, be);
  const ParameterSet w16 = bf16_copy(be, cfg, weights, pool);
  ParameterSet r16, v16;
  if (ref_p) r16 = bf16_copy(be, cfg, *ref_p, pool);
  if (value_p) v16 = bf16_copy(be, cfg, *value_p, pool);
  const ParameterSet* r = ref_p ? &r16 : nullptr;
  const ParameterSet* v = value_p ? &v16 : nullptr;
  opts.precision = Precision::bf16;
  for (ExecConfig& e : opts.modes) e.act_dtype = DType::BF16;
  ExecConfig base_exec = parse_mode("base");
  base_exec.act_dtype = DType::BF16;
  alone.precision = Precision::bf16;
  const ModeGrads base = gradcheck_step(be, cfg, w16, r, v, mb, base_exec, alone);
  res.base_loss = base.result.loss;
  res.base_metrics = base.result.metrics;
  res.base_metrics["loss"] = base.result.loss;
  std::map<std::string, double> f32_fraction;
  const std::vector<double> scale = error_scales(f32.grads, names, &f32_fraction);
  for (size_t i = 0; i < base.grads.size(); ++i)
    res.rounding[names[i]] = scaled_err(base.grads[i], f32.grads[i], scale[i]);
  compare_modes(be, cfg, w16, r, v, mb, names, base, opts, res);
  return res;
}

}  // namespace

GradcheckResult run_gradcheck(Backend& be, const ModelConfig& cfg, const ParameterSet& weights,
                              const Batch& batch, const GradcheckOptions& opts) {
  const ObjectiveSetup& setup = opts.objective;
  // The other models of the step live as long as the check.
  Ledger ledger;
  Pool pool(ledger, be);
  ParameterSet reference, value;
  LoraSet lora;
  const bool use_lora = opts.lora.enabled();
  if (use_lora) {
    if (opts.precision != Precision::fp32)
      throw InputError("gradcheck --lora-r: fp32 only (--precision fp32)");
    lora = LoraSet(cfg, opts.lora, pool, Category::weights, DType::F32, false);
    init_lora(lora, opts.seed + 2, opts.lora_b_std);
  }
  const LoraSet* lora_p = use_lora ? &lora : nullptr;
  // With LoRA the reference is the base weights, adapters off: no second model.
  if (setup.needs_reference() && !use_lora)
    reference = make_reference_weights(cfg, weights, pool, opts.reference_noise, opts.seed);
  if (setup.needs_value_model()) {
    value = ParameterSet(cfg, pool, Category::weights, DType::F32, false, ModelHead::value);
    init_parameters(value, opts.seed + 1, InitStyle::test, 0.2f);
  }
  const ParameterSet* ref_p = setup.needs_reference() && !use_lora ? &reference : nullptr;
  const ParameterSet* value_p = setup.needs_value_model() ? &value : nullptr;
  const MicroBatch mb = gradcheck_micro_batch(be, cfg, weights, value_p, batch, opts, lora_p);
  std::vector<std::string> names;
  if (use_lora) {
    for (size_t i = 0; i < lora.size(); ++i) names.push_back(lora.name(i));
  } else {
    for (size_t i = 0; i < weights.size(); ++i) names.push_back(weights.name(i));
  }
  for (size_t i = 0; i < value.size(); ++i) names.push_back("value:" + value.name(i));

  if (opts.precision == Precision::bf16)
    return run_gradcheck_bf16(be, cfg, weights, ref_p, value_p, mb, names, opts);
  GradcheckResult res;
  GradcheckOptions alone = opts;  // base: the yardstick every rank computes on its own
  alone.context = nullptr;
  const ModeGrads base =
      gradcheck_step(be, cfg, weights, ref_p, value_p, mb, parse_mode("base"), alone, lora_p);
  res.base_loss = base.result.loss;
  res.base_metrics = base.result.metrics;
  res.base_metrics["loss"] = base.result.loss;
  compare_modes(be, cfg, weights, ref_p, value_p, mb, names, base, opts, res, lora_p);
  return res;
}

}  // namespace sbp::cli

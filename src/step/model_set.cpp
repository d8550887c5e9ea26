#include "step/model_set.h"

namespace sbp {

ModelSet::ModelSet(const ObjectiveSetup& objective, const ModelConfig& policy_cfg, Pool& pool,
                   Backend& be, const ModelSetOptions& opts, const ModelConfig* reference_cfg,
                   const ModelConfig* value_cfg)
    : policy_cfg_(policy_cfg),
      reference_cfg_(reference_cfg ? *reference_cfg : policy_cfg),
      value_cfg_(value_cfg ? *value_cfg : policy_cfg) {
  Communicator& comm = opts.comm ? *opts.comm : single_process();
  policy_w_ = ParameterSet(policy_cfg_, pool, Category::weights, opts.param_dtype, false);
  // fp32 master weights beside bf16 weights, in the optimizer state (optim/adamw.h).
  const bool master = opts.optim && opts.master_weights && opts.param_dtype != DType::F32;
  policy_ = std::make_unique<DataParallel>(comm, opts.zero, policy_cfg_, ModelHead::lm, pool, be,
                                           opts.optim, opts.grad_dtype, master);
  if (objective.needs_reference())
    reference_w_ = ParameterSet(reference_cfg_, pool, Category::weights, opts.param_dtype, false);
  if (objective.needs_value_model()) {
    value_w_ = ParameterSet(value_cfg_, pool, Category::weights, opts.param_dtype, false,
                            ModelHead::value);
    value_ = std::make_unique<DataParallel>(comm, opts.zero, value_cfg_, ModelHead::value, pool, be,
                                            opts.optim, opts.grad_dtype, master);
  }
}

StepModels ModelSet::views() {
  StepModels m;
  m.policy = {{&policy_cfg_, &policy_w_}, policy_.get()};
  if (has_reference()) m.reference = {&reference_cfg_, &reference_w_};
  if (has_value()) m.value = {{&value_cfg_, &value_w_}, value_.get()};
  return m;
}

}  // namespace sbp

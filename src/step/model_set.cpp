#include "step/model_set.h"

#include "core/error.h"

namespace sbp {

ModelSet::ModelSet(const ObjectiveSetup& objective, const ModelConfig& policy_cfg, Pool& pool,
                   Backend& be, const ModelSetOptions& opts, const ModelConfig* reference_cfg,
                   const ModelConfig* value_cfg)
    : policy_cfg_(policy_cfg),
      reference_cfg_(reference_cfg ? *reference_cfg : policy_cfg),
      value_cfg_(value_cfg ? *value_cfg : policy_cfg) {
  Communicator& comm = opts.comm ? *opts.comm : single_process();
  // ZeRO-3 (several ranks, full fine-tuning): the policy's weights are this rank's slices, its
  // tensors bound only while a pass reads them (dist/sharded_weights.h).
  const bool zero3 = opts.zero == 3 && comm.size() > 1 && !opts.lora;
  policy_w_ = zero3 ? ParameterSet::unallocated(policy_cfg_, ModelHead::lm)
                    : ParameterSet(policy_cfg_, pool, Category::weights, opts.param_dtype, false);
  // fp32 master weights beside bf16 weights, in the optimizer state (optim/adamw.h).
  const bool master = opts.optim && opts.master_weights && opts.param_dtype != DType::F32;
  if (opts.lora) {
    // Adapters in fp32 whatever the base's dtype: they are what trains (as PEFT keeps them).
    // With several ranks they are whole and replicated on every rank whatever `zero` says
    // (their gradients are all-reduced once per step: dist/lora_grads.h); `zero` still divides
    // a value model's state.
    lora_w_ = LoraSet(policy_cfg_, *opts.lora, pool, Category::weights, DType::F32, false);
    lora_g_ = LoraSet(policy_cfg_, *opts.lora, pool, Category::grads, DType::F32, true);
    if (opts.optim)
      lora_opt_ = std::make_unique<LoraAdamW>(policy_cfg_, *opts.lora, pool, *opts.optim);
  } else {
    policy_ = std::make_unique<DataParallel>(comm, opts.zero, policy_cfg_, ModelHead::lm, pool, be,
                                             opts.optim, opts.grad_dtype, master,
                                             opts.offload_optimizer, opts.param_dtype);
    if (zero3) policy_->shard_weights(policy_w_, opts.param_dtype);
  }
  // LoRA: the reference is the policy's base with the adapters off, unless another is given.
  if (objective.needs_reference() && (!opts.lora || reference_cfg))
    reference_w_ = ParameterSet(reference_cfg_, pool, Category::weights, opts.param_dtype, false);
  if (objective.needs_value_model()) {
    value_w_ = ParameterSet(value_cfg_, pool, Category::weights, opts.param_dtype, false,
                            ModelHead::value);
    value_ = std::make_unique<DataParallel>(comm, opts.zero, value_cfg_, ModelHead::value, pool, be,
                                            opts.optim, opts.grad_dtype, master,
                                            opts.offload_optimizer, opts.param_dtype);
  }
}

StepModels ModelSet::views() {
  StepModels m;
  m.policy = {{&policy_cfg_, &policy_w_}, policy_.get()};
  if (has_reference()) m.reference = {&reference_cfg_, &reference_w_};
  if (has_value()) m.value = {{&value_cfg_, &value_w_}, value_.get()};
  if (has_lora()) m.lora = {&lora_w_, &lora_g_};
  return m;
}

}  // namespace sbp

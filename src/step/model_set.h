#pragma once
// The models a run of an objective holds, allocated in the order a training run allocates them,
// so that the planner, which builds the same set on the shape-only backend, records the very
// allocations of the run it plans:
//
//   policy     weights, gradients, optimizer state (AdamW moments)   ModelHead::lm
//   reference  weights                                               needs_reference()
//   value      weights, gradients, optimizer state                   needs_value_model()
//
// With LoRA (ModelSetOptions::lora) the policy's weights are frozen: no gradients, no optimizer
// state for them; instead adapter weights, gradients and AdamW moments (fp32, model/lora.h), and
// no reference model unless one is given (reference_cfg): the reference is the base weights
// with the adapters off.
//
// Weights are allocated uninitialised: the owner loads or draws them. Gradients and optimizer
// state are divided over ranks as ZeRO stage `zero` divides them (dist/data_parallel.h); LoRA
// adapters are not divided (small: replicated, their gradients all-reduced, dist/lora_grads.h).
#include <memory>

#include "backend/backend.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/parameters.h"
#include "objective/objective_setup.h"
#include "optim/adamw.h"
#include "optim/lora_adamw.h"
#include "step/step_models.h"

namespace sbp {

struct ModelSetOptions {
  DType param_dtype = DType::F32;      // weights
  DType grad_dtype = DType::F32;       // gradient buffers
  const AdamWConfig* optim = nullptr;  // null: no optimizer state
  // With an optimizer and non-F32 weights: fp32 master weights in the optimizer state.
  bool master_weights = true;
  Communicator* comm = nullptr;        // null: one process
  int zero = 0;
  // Adapters on a frozen policy; with several ranks replicated (ZeRO-0) whatever `zero` is.
  const LoraConfig* lora = nullptr;
  // offload: optimizer (dist/data_parallel.h): the trained models' optimizer state, master
  // weights and gradient sums in the pool's host pool. LoRA adapters keep theirs on the device
  // (a few MiB: moving them would cost more than it saves); a PPO value model's is offloaded.
  bool offload_optimizer = false;
};

class ModelSet {
 public:
  // reference_cfg / value_cfg: those models' shapes when they differ from the policy's (a
  // reference or value model loaded from another directory); null: the policy's.
  ModelSet(const ObjectiveSetup& objective, const ModelConfig& policy_cfg, Pool& pool, Backend& be,
           const ModelSetOptions& opts, const ModelConfig* reference_cfg = nullptr,
           const ModelConfig* value_cfg = nullptr);
  ModelSet(const ModelSet&) = delete;
  ModelSet& operator=(const ModelSet&) = delete;

  const ModelConfig& policy_config() const { return policy_cfg_; }
  ParameterSet& policy_weights() { return policy_w_; }
  DataParallel& policy() { return *policy_; }  // not with LoRA
  bool has_lora() const { return lora_w_.size() > 0; }
  LoraSet& lora_weights() { return lora_w_; }
  LoraSet& lora_grads() { return lora_g_; }
  LoraAdamW* lora_optimizer() { return lora_opt_.get(); }  // null without an optimizer

  bool has_reference() const { return reference_w_.size() > 0; }
  const ModelConfig& reference_config() const { return reference_cfg_; }
  ParameterSet& reference_weights() { return reference_w_; }

  bool has_value() const { return value_ != nullptr; }
  const ModelConfig& value_config() const { return value_cfg_; }
  ParameterSet& value_weights() { return value_w_; }
  DataParallel& value() { return *value_; }

  StepModels views();

 private:
  ModelConfig policy_cfg_, reference_cfg_, value_cfg_;
  ParameterSet policy_w_;
  std::unique_ptr<DataParallel> policy_;
  ParameterSet reference_w_;
  ParameterSet value_w_;
  std::unique_ptr<DataParallel> value_;
  LoraSet lora_w_, lora_g_;
  std::unique_ptr<LoraAdamW> lora_opt_;
};

}  // namespace sbp

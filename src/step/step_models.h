#pragma once
// The models one step reads and writes, as views: the step runner owns none of them. Whoever
// runs steps holds them (the trainer and the planner in a ModelSet, model_set.h; gradcheck and
// bench their own weights with fresh gradients per mode).
#include "dist/data_parallel.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/parameters.h"

namespace sbp {

// A model the step reads: its shape and its weights.
struct ModelView {
  const ModelConfig* cfg = nullptr;
  const ParameterSet* weights = nullptr;
  bool defined() const { return cfg != nullptr && weights != nullptr; }
};

// A model the step trains: the weights it reads and the gradients it adds into. DataParallel
// holds the gradient buffers, reduces them across ranks once per layer (one process: no
// reduction) and owns the optimizer state, if any.
struct TrainedView {
  ModelView model;
  DataParallel* grads = nullptr;
  bool defined() const { return model.defined() && grads != nullptr; }
};

// LoRA adapters of the policy (model/lora.h): the policy is its frozen base weights plus these
// adapters, and only the adapters train. The reference model is then the base weights with the
// adapters off, unless a separate reference model is given: no second copy of the weights.
struct LoraView {
  const LoraSet* weights = nullptr;
  const LoraSet* grads = nullptr;  // zeroed by each step, then ADDED into; null: score only
  bool defined() const { return weights != nullptr; }
};

struct StepModels {
  TrainedView policy;   // LM head; with lora, policy.grads is null (the base is frozen)
  ModelView reference;  // ObjectiveSetup::needs_reference(); optional with lora
  TrainedView value;    // ObjectiveSetup::needs_value_model(): value head (score.weight)
  LoraView lora;        // the policy's adapters, or none
};

}  // namespace sbp

#pragma once
// The models one step reads and writes, as views: the step runner owns none of them. Whoever
// runs steps holds them (the trainer and the planner in a ModelSet, model_set.h; gradcheck and
// bench their own weights with fresh gradients per mode).
#include "dist/data_parallel.h"
#include "model/config.h"
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

struct StepModels {
  TrainedView policy;   // LM head
  ModelView reference;  // ObjectiveSetup::needs_reference()
  TrainedView value;    // ObjectiveSetup::needs_value_model(): value head (score.weight)
};

}  // namespace sbp

#pragma once
// The reference model of DPO, GRPO (KL) and PPO (KL penalty): a second model instance with its
// own weights (the policy's starting checkpoint, or any other), run forward only. It has no
// gradient state at all: no grads, no optimizer moments, no checkpoints; its forward streams
// layer by layer and its head block by block (Engine::score), so beyond its weights it holds
// two (T, d) hidden states, one layer's K/V and chunk working set, and one head chunk — and it
// runs before the policy's step, so that working set is never live at the same time as the
// policy's checkpoints. Its log-probs come from a real forward of its own weights, never from
// the policy's hidden states.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "engine/batch.h"
#include "engine/engine.h"
#include "engine/exec_config.h"
#include "model/config.h"
#include "model/parameters.h"

namespace sbp {

class ReferenceModel {
 public:
  // Borrows `weights` (they must outlive this object). `exec` gives the chunk sizes of the
  // forward; its layer mode is irrelevant (a forward keeps nothing for a backward).
  ReferenceModel(const ModelConfig& cfg, const ParameterSet& weights, Backend& be, Pool& pool,
                 ExecConfig exec);
  // Loads a Hugging Face model directory into `pool` (category `weights`, F32) and owns it.
  static std::unique_ptr<ReferenceModel> load(const std::string& dir, Backend& be, Pool& pool,
                                              ExecConfig exec);

  // (T) log-probability of each row's target under the reference model, 0 where none.
  std::vector<float> target_logp(const Batch& batch);

  const ModelConfig& config() const { return cfg_; }
  const ParameterSet& weights() const { return *weights_; }
  void set_exec(const ExecConfig& e) { engine_.set_exec(e); }

 private:
  ReferenceModel(std::unique_ptr<ModelConfig> cfg, std::unique_ptr<ParameterSet> owned,
                 Backend& be, Pool& pool, ExecConfig exec);
  std::unique_ptr<ModelConfig> owned_cfg_;
  std::unique_ptr<ParameterSet> owned_;
  const ModelConfig& cfg_;
  const ParameterSet* weights_;
  Engine engine_;
};

}  // namespace sbp

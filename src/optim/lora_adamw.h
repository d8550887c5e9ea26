#pragma once
// AdamW over LoRA adapters (model/lora.h): fp32 moments in the adapters' layout, in the ledger's
// `optimizer` category; the frozen base weights have none. On disk as every optimizer of this
// engine: optimizer.safetensors with "m.<name>", "v.<name>" (optim/optimizer_files.h), the names
// PEFT's tensor names.
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "model/lora.h"
#include "optim/adamw.h"
#include "optim/optimizer_files.h"

namespace sbp {

class LoraAdamW {
 public:
  LoraAdamW(const ModelConfig& cfg, const LoraConfig& lc, Pool& pool, AdamWConfig c);

  // One update of `params` with `grads` at learning rate lr; increments the step count.
  // Weight decay applies to every adapter matrix (the Hugging Face Trainer decays them too).
  void step(const LoraSet& params, const LoraSet& grads, Backend& be, float lr);

  int64_t steps() const { return steps_; }
  void save(const std::string& dir) const;  // optimizer.safetensors in dir
  void load(const std::string& dir);        // from it; restores the step count

 private:
  std::vector<MomentSlice> slices() const;
  AdamWConfig cfg_;
  LoraSet m_, v_;
  int64_t steps_ = 0;
};

// The adapters' global gradient norm (fp64, fixed order), and their clipping given it
// (clip_factor, as scale_to_max_norm for full weights).
double lora_grad_norm(const LoraSet& grads, Backend& be);
void scale_lora_grads(const LoraSet& grads, Backend& be, double max_norm, double norm);

}  // namespace sbp

#include "engine/reference_model.h"

#include "model/checkpoint_io.h"

namespace sbp {

ReferenceModel::ReferenceModel(const ModelConfig& cfg, const ParameterSet& weights, Backend& be,
                               Pool& pool, ExecConfig exec)
    : cfg_(cfg), weights_(&weights), engine_(cfg, weights, be, pool, exec) {}

ReferenceModel::ReferenceModel(std::unique_ptr<ModelConfig> cfg,
                               std::unique_ptr<ParameterSet> owned, Backend& be, Pool& pool,
                               ExecConfig exec)
    : owned_cfg_(std::move(cfg)), owned_(std::move(owned)), cfg_(*owned_cfg_),
      weights_(owned_.get()), engine_(cfg_, *weights_, be, pool, exec) {}

std::unique_ptr<ReferenceModel> ReferenceModel::load(const std::string& dir, Backend& be,
                                                     Pool& pool, ExecConfig exec) {
  auto cfg = std::make_unique<ModelConfig>(load_config(dir));
  auto w = std::make_unique<ParameterSet>(*cfg, pool, Category::weights, DType::F32, false);
  load_weights(dir, *cfg, *w);
  return std::unique_ptr<ReferenceModel>(
      new ReferenceModel(std::move(cfg), std::move(w), be, pool, exec));
}

std::vector<float> ReferenceModel::target_logp(const Batch& batch) {
  return engine_.score(batch).logp;
}

}  // namespace sbp

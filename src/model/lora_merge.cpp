#include "model/lora_merge.h"

namespace sbp {

const Tensor& lora_base_weight(const ModelTensors& w, int64_t layer, LoraTarget t) {
  const LayerTensors& l = w.layers[static_cast<size_t>(layer)];
  switch (t) {
    case LoraTarget::q_proj: return l.q_proj;
    case LoraTarget::k_proj: return l.k_proj;
    case LoraTarget::v_proj: return l.v_proj;
    case LoraTarget::o_proj: return l.o_proj;
    case LoraTarget::gate_proj: return l.gate_proj;
    case LoraTarget::up_proj: return l.up_proj;
    case LoraTarget::down_proj: return l.down_proj;
  }
  return l.q_proj;
}

void merge_lora(const ParameterSet& weights, const LoraSet& lora, Backend& be, float sign) {
  const auto& layers = lora.layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    for (int p = 0; p < kLoraTargets; ++p) {
      const LoraPair& ad = layers[l].proj[static_cast<size_t>(p)];
      if (!ad.defined()) continue;
      const Tensor& W =
          lora_base_weight(weights.views(), static_cast<int64_t>(l), static_cast<LoraTarget>(p));
      be.gemm(W, ad.B, false, ad.A, false, sign * lora.scale(), 1.0f);  // (out, in) += s B A
    }
  }
}

}  // namespace sbp

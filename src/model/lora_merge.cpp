#include "model/lora_merge.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/memory.h"

namespace sbp {

namespace {

// The value as `out` stores it (rounded), back in f32: inf when it overflows `out`.
float as_stored(float v, DType out) {
  if (out == DType::BF16) return bf16_to_f32(f32_to_bf16(v));
  if (out == DType::F16) return f16_to_f32(f32_to_f16(v));
  return v;
}

}  // namespace

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

void check_merged_weights(const ParameterSet& weights, const LoraSet& lora, DType out) {
  const auto& layers = lora.layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    for (int p = 0; p < kLoraTargets; ++p) {
      if (!layers[l].proj[static_cast<size_t>(p)].defined()) continue;
      const auto t = static_cast<LoraTarget>(p);
      const std::vector<float> w =
          download_f32(lora_base_weight(weights.views(), static_cast<int64_t>(l), t));
      for (size_t i = 0; i < w.size(); ++i) {
        const float stored = as_stored(w[i], out);
        if (std::isfinite(stored)) continue;
        // Projections are spelled alike in every norm layout.
        const std::string name =
            hf_name(layer_param(static_cast<int64_t>(l), lora_base_role(t)), NormLayout::plain);
        char what[160];
        if (std::isfinite(w[i]))
          std::snprintf(what, sizeof what, "is %g, beyond %s's range", static_cast<double>(w[i]),
                        dtype_name(out));
        else
          std::snprintf(what, sizeof what, "is %s", std::isnan(w[i]) ? "nan" : "infinite");
        throw InputError("merge: " + name + " + scale * B A: element " + std::to_string(i) + " " +
                         what + " (the adapter's product overflows; nothing written)");
      }
    }
  }
}

}  // namespace sbp

#pragma once
// LoRA adapters (Hu et al. 2021) on a decoder's linear projections, laid out as PEFT lays them
// out, so that adapter files go both ways (peft.PeftModel.from_pretrained):
//
//   y = x W^T (+ b) + s * (x A^T) B^T      A (r, in), B (out, r), s = alpha / r
//                                          (alpha / sqrt(r) with use_rslora)
//
// The base weights stay frozen in their ParameterSet; an adapter set is a separate object with
// one (A, B) pair per targeted projection per layer. The same layout serves the adapters'
// weights, their gradients and their optimizer moments (one LoraSet each), as ParameterSet does
// for full weights.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/pool.h"
#include "model/config.h"
#include "model/parameter_id.h"

namespace sbp {

// The projections an adapter can sit on.
enum class LoraTarget : int { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };
inline constexpr int kLoraTargets = 7;
// The weight an adapter sits beside (ParamRole::q_proj ... down_proj).
ParamRole lora_base_role(LoraTarget t);
// PEFT's module name, "q_proj": the Hugging Face module's (parameter_id.h).
const char* lora_target_name(LoraTarget t);

struct LoraConfig {
  int64_t r = 0;            // rank; 0: no adapters
  double alpha = 16.0;      // lora_alpha
  double dropout = 0.0;     // lora_dropout; only 0 is supported (checked by validate)
  bool use_rslora = false;  // scale alpha / sqrt(r) instead of alpha / r
  // PEFT names (q_proj ... down_proj) or the single entry "all-linear" (every projection of the
  // layers; never the LM head, as PEFT's all-linear).
  std::vector<std::string> target_modules = {lora_target_name(LoraTarget::q_proj),
                                             lora_target_name(LoraTarget::v_proj)};

  bool enabled() const { return r > 0; }
  float scale() const;
  bool targets(LoraTarget t) const;
  // Throws InputError naming the bad field: r < 1, an unknown module, dropout != 0, ...
  void validate() const;
  // "r=8 alpha=16 targets=q_proj,v_proj"
  std::string describe() const;
};

// Parses "q_proj,v_proj" / "all-linear" into target_modules (validated later).
std::vector<std::string> parse_lora_targets(const std::string& csv);

// One projection's adapter: A (r, in), B (out, r); undefined where the projection has none.
struct LoraPair {
  Tensor A;
  Tensor B;
  bool defined() const { return A.defined(); }
};
struct LoraLayer {
  std::array<LoraPair, kLoraTargets> proj;
  const LoraPair& operator[](LoraTarget t) const { return proj[static_cast<size_t>(t)]; }
};

// One adapter matrix's identity.
enum class LoraMatrix { A, B };
struct LoraId {
  int64_t layer = 0;
  LoraTarget target = LoraTarget::q_proj;
  LoraMatrix matrix = LoraMatrix::A;
  auto operator<=>(const LoraId&) const = default;
};

// PEFT's tensor name, e.g. "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight":
// the base weight's Hugging Face module path between PEFT's prefix and the matrix.
std::string lora_tensor_name(const LoraId& id);
std::string lora_tensor_name(int64_t layer, LoraTarget t, bool is_b);
// The inverse; nullopt for a name that is not an adapter matrix of some layer's projection.
std::optional<LoraId> parse_lora_tensor_name(const std::string& name);

class LoraSet {
 public:
  LoraSet() = default;
  // One buffer per adapter matrix, uninitialised (zeros if `zero`).
  LoraSet(const ModelConfig& cfg, const LoraConfig& lc, Pool& pool, Category category, DType dtype,
          bool zero);
  LoraSet(LoraSet&&) = default;
  LoraSet& operator=(LoraSet&&) = default;

  size_t size() const { return buffers_.size(); }
  const std::string& name(size_t i) const { return names_[i]; }
  const LoraId& id(size_t i) const { return ids_[i]; }
  const Tensor& tensor(size_t i) const { return buffers_[i].view(); }
  // By PEFT name (parsed once, by parse_lora_tensor_name).
  bool contains(const std::string& name) const;
  const Tensor& get(const std::string& name) const;  // throws naming the tensor
  const std::vector<LoraLayer>& layers() const { return layers_; }
  const LoraConfig& config() const { return lc_; }
  float scale() const { return lc_.scale(); }
  int64_t numel() const;

 private:
  LoraConfig lc_;
  std::vector<LoraId> ids_;
  std::vector<std::string> names_;
  std::vector<Buffer> buffers_;
  std::map<LoraId, size_t> index_;
  std::vector<LoraLayer> layers_;
};

// PEFT's default initialisation: A ~ kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)),
// B = 0 (the adapted model starts as the base model). `b_std` > 0 draws B ~ N(0, b_std) instead:
// tests need a nonzero B, or dA would be zero and the adapters invisible.
void init_lora(LoraSet& lora, uint64_t seed, float b_std = 0.0f);

}  // namespace sbp

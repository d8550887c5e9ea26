#include "model/lora.h"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string_view>

#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"

namespace sbp {

namespace {

// Bounds on an adapter's numbers, from a config or adapter_config.json: far above any real
// adapter (PEFT's are r <= 256, alpha <= 512), low enough that alpha/r and B A stay finite floats.
constexpr int64_t kMaxLoraRank = 65536;
constexpr double kMaxLoraAlpha = 1e6;

}  // namespace

namespace {

// Indexed by LoraTarget.
constexpr std::array<ParamRole, kLoraTargets> kBaseRoles = {
    ParamRole::q_proj,    ParamRole::k_proj,  ParamRole::v_proj,   ParamRole::o_proj,
    ParamRole::gate_proj, ParamRole::up_proj, ParamRole::down_proj};

// PEFT wraps the model twice (PeftModel.base_model, LoraModel.model) before the HF names.
constexpr std::string_view kPeftPrefix = "base_model.model.";
constexpr std::string_view kMatrixA = ".lora_A.weight", kMatrixB = ".lora_B.weight";
static_assert(kMatrixA.size() == kMatrixB.size());

// (out, in) of projection t.
std::pair<int64_t, int64_t> proj_shape(const ModelConfig& cfg, LoraTarget t) {
  const int64_t d = cfg.hidden_size, F = cfg.intermediate_size;
  const int64_t Hh = cfg.num_attention_heads * cfg.head_dim;
  const int64_t Gh = cfg.num_key_value_heads * cfg.head_dim;
  switch (t) {
    case LoraTarget::q_proj: return {Hh, d};
    case LoraTarget::k_proj: return {Gh, d};
    case LoraTarget::v_proj: return {Gh, d};
    case LoraTarget::o_proj: return {d, Hh};
    case LoraTarget::gate_proj: return {F, d};
    case LoraTarget::up_proj: return {F, d};
    case LoraTarget::down_proj: return {d, F};
  }
  return {0, 0};
}

}  // namespace

ParamRole lora_base_role(LoraTarget t) { return kBaseRoles[static_cast<size_t>(t)]; }

const char* lora_target_name(LoraTarget t) { return hf_module_name(lora_base_role(t)); }

float LoraConfig::scale() const {
  const double rr = static_cast<double>(r);
  return static_cast<float>(use_rslora ? alpha / std::sqrt(rr) : alpha / rr);
}

bool LoraConfig::targets(LoraTarget t) const {
  for (const std::string& m : target_modules)
    if (m == "all-linear" || m == lora_target_name(t)) return true;
  return false;
}

void LoraConfig::validate() const {
  if (r < 1) throw InputError("lora: r = " + std::to_string(r) + " must be at least 1");
  if (r > kMaxLoraRank)
    throw InputError("lora: r = " + std::to_string(r) + " must be at most " +
                     std::to_string(kMaxLoraRank));
  if (!std::isfinite(alpha) || alpha <= 0.0)
    throw InputError("lora: alpha = " + std::to_string(alpha) + " must be positive");
  // The scale alpha/r is a float: 1e39 would be inf, and anything near it overflows B A.
  if (alpha > kMaxLoraAlpha) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "lora: alpha = %g must be at most %g", alpha, kMaxLoraAlpha);
    throw InputError(buf);
  }
  if (dropout != 0.0)
    throw InputError("lora: dropout = " + std::to_string(dropout) +
                     " is not supported (only 0): adapter dropout would make the gradient depend "
                     "on a mask that every execution mode must reproduce");
  if (target_modules.empty()) throw InputError("lora: target_modules is empty");
  for (const std::string& m : target_modules) {
    bool known = m == "all-linear";
    std::string choices;
    for (int p = 0; p < kLoraTargets; ++p) {
      const char* n = lora_target_name(static_cast<LoraTarget>(p));
      known = known || m == n;
      choices += std::string(n) + ", ";
    }
    if (!known)
      throw InputError("lora: unknown target module '" + m + "' (" + choices + "all-linear)");
  }
}

std::string LoraConfig::describe() const {
  std::ostringstream s;
  s << "r=" << r << " alpha=" << alpha << (use_rslora ? " rslora" : "") << " targets=";
  for (size_t i = 0; i < target_modules.size(); ++i) s << (i ? "," : "") << target_modules[i];
  return s.str();
}

std::vector<std::string> parse_lora_targets(const std::string& csv) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : csv + ",") {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  return out;
}

std::string lora_tensor_name(const LoraId& id) {
  // Projections are spelled alike in every norm layout.
  std::string name(kPeftPrefix);
  name += hf_module_path(layer_param(id.layer, lora_base_role(id.target)), NormLayout::plain);
  name += id.matrix == LoraMatrix::B ? kMatrixB : kMatrixA;
  return name;
}

std::string lora_tensor_name(int64_t layer, LoraTarget t, bool is_b) {
  return lora_tensor_name({layer, t, is_b ? LoraMatrix::B : LoraMatrix::A});
}

std::optional<LoraId> parse_lora_tensor_name(const std::string& name) {
  if (name.size() < kPeftPrefix.size() + kMatrixA.size() || !name.starts_with(kPeftPrefix))
    return std::nullopt;
  LoraMatrix matrix;
  if (name.ends_with(kMatrixA))
    matrix = LoraMatrix::A;
  else if (name.ends_with(kMatrixB))
    matrix = LoraMatrix::B;
  else
    return std::nullopt;
  // The base weight's name: the module path between the prefix and the matrix, + ".weight".
  const size_t path_size = name.size() - kPeftPrefix.size() - kMatrixA.size();
  const std::optional<ParamId> base =
      parse_hf_name(name.substr(kPeftPrefix.size(), path_size) + ".weight", NormLayout::plain);
  if (!base) return std::nullopt;
  for (int p = 0; p < kLoraTargets; ++p)
    if (kBaseRoles[static_cast<size_t>(p)] == base->role)
      return LoraId{base->layer, static_cast<LoraTarget>(p), matrix};
  return std::nullopt;
}

LoraSet::LoraSet(const ModelConfig& cfg, const LoraConfig& lc, Pool& pool, Category category,
                 DType dtype, bool zero)
    : lc_(lc) {
  lc_.validate();
  layers_.resize(static_cast<size_t>(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    for (int p = 0; p < kLoraTargets; ++p) {
      const auto t = static_cast<LoraTarget>(p);
      if (!lc_.targets(t)) continue;
      const auto [out, in] = proj_shape(cfg, t);
      for (const LoraMatrix m : {LoraMatrix::A, LoraMatrix::B}) {
        const Shape shape = m == LoraMatrix::B ? Shape{out, lc_.r} : Shape{lc_.r, in};
        const LoraId id{l, t, m};
        index_[id] = buffers_.size();
        ids_.push_back(id);
        names_.push_back(lora_tensor_name(id));
        buffers_.push_back(zero ? pool.zeros(category, dtype, shape)
                                : pool.allocate(category, dtype, shape));
      }
      LoraPair& pair = layers_[static_cast<size_t>(l)].proj[static_cast<size_t>(p)];
      pair.A = buffers_[buffers_.size() - 2].view();
      pair.B = buffers_.back().view();
    }
  }
}

bool LoraSet::contains(const std::string& name) const {
  const std::optional<LoraId> id = parse_lora_tensor_name(name);
  return id && index_.count(*id) != 0;
}

const Tensor& LoraSet::get(const std::string& name) const {
  const std::optional<LoraId> id = parse_lora_tensor_name(name);
  const auto it = id ? index_.find(*id) : index_.end();
  if (it == index_.end()) throw InputError("no LoRA tensor named " + name);
  return buffers_[it->second].view();
}

int64_t LoraSet::numel() const {
  int64_t n = 0;
  for (const Buffer& b : buffers_) n += b.view().numel();
  return n;
}

void init_lora(LoraSet& lora, uint64_t seed, float b_std) {
  for (size_t i = 0; i < lora.size(); ++i) {
    const Tensor& t = lora.tensor(i);
    if (!t.data) continue;  // shape-only
    const bool is_b = lora.id(i).matrix == LoraMatrix::B;
    Rng rng(seed, lora.name(i));  // one stream per tensor, keyed by its name
    std::vector<float> p(static_cast<size_t>(t.numel()));
    // kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in)
    // = 1 / sqrt(fan_in), fan_in = A's columns (the projection's input width).
    const double bound = 1.0 / std::sqrt(static_cast<double>(t.cols()));
    for (float& x : p) {
      if (!is_b)
        x = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
      else
        x = b_std > 0.0f ? b_std * rng.normal() : 0.0f;
    }
    upload_f32(t, p);
  }
}

}  // namespace sbp

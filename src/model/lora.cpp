#include "model/lora.h"

#include <cmath>
#include <cstdio>
#include <sstream>

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

constexpr std::array<const char*, kLoraTargets> kNames = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

bool is_attention(LoraTarget t) {
  return static_cast<int>(t) <= static_cast<int>(LoraTarget::o_proj);
}

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

const char* lora_target_name(LoraTarget t) { return kNames[static_cast<size_t>(t)]; }

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
    for (const char* n : kNames) known = known || m == n;
    if (!known)
      throw InputError("lora: unknown target module '" + m +
                       "' (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, "
                       "all-linear)");
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

std::string lora_tensor_name(int64_t layer, LoraTarget t, bool is_b) {
  return "base_model.model.model.layers." + std::to_string(layer) +
         (is_attention(t) ? ".self_attn." : ".mlp.") + lora_target_name(t) +
         (is_b ? ".lora_B.weight" : ".lora_A.weight");
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
      for (bool is_b : {false, true}) {
        const Shape shape = is_b ? Shape{out, lc_.r} : Shape{lc_.r, in};
        index_[lora_tensor_name(l, t, is_b)] = buffers_.size();
        names_.push_back(lora_tensor_name(l, t, is_b));
        buffers_.push_back(zero ? pool.zeros(category, dtype, shape)
                                : pool.allocate(category, dtype, shape));
      }
      LoraPair& pair = layers_[static_cast<size_t>(l)].proj[static_cast<size_t>(p)];
      pair.A = buffers_[buffers_.size() - 2].view();
      pair.B = buffers_.back().view();
    }
  }
}

const Tensor& LoraSet::get(const std::string& name) const {
  const auto it = index_.find(name);
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
    const std::string& n = lora.name(i);
    const bool is_b = n.find(".lora_B.") != std::string::npos;
    Rng rng(seed, n);  // one stream per tensor
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

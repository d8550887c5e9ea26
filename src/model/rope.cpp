// The rotary frequencies of every rope scaling, computed as transformers' rope initialisers
// compute them (modeling_rope_utils.py): the same float32 and float64 steps in the same order,
// so that a table built from them is the table transformers rotates with. This file is compiled
// with -ffp-contract=off (CMakeLists.txt): a fused multiply-add would round differently from
// torch's separate float32 operations.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "model/config.h"

namespace sbp {

namespace {

// theta^(2i/h) for i < h/2, in float32 from an int64 arange, as every initialiser starts.
std::vector<float> pos_freqs(double theta, int64_t dim) {
  std::vector<float> p(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(dim);
    p[static_cast<size_t>(i)] = std::pow(static_cast<float>(theta), expo);
  }
  return p;
}

std::vector<float> default_inv_freq(double theta, int64_t dim) {
  std::vector<float> inv = pos_freqs(theta, dim);
  for (float& f : inv) f = 1.0f / f;
  return inv;
}

// Llama 3.1 frequency-dependent scaling: long wavelengths are divided by `factor`, short ones
// kept, and the band between is interpolated smoothly.
void apply_llama3(const RopeScaling& r, std::vector<float>& inv) {
  const double factor = r.factor;
  const double low = r.low_freq_factor, high = r.high_freq_factor;
  const double old_ctx = static_cast<double>(r.original_max_position_embeddings);
  const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  for (float& f : inv) {
    const double wavelen = 2.0 * M_PI / static_cast<double>(f);
    if (wavelen > low_wavelen) {
      f = static_cast<float>(f / factor);
    } else if (wavelen >= high_wavelen) {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      const double scaled = f / factor;
      f = static_cast<float>((1.0 - smooth) * scaled + smooth * f);
    }
  }
}

// YaRN's attention factor (float64, as transformers' get_mscale): 1 for factor <= 1, else
// 0.1 * m * ln(factor) + 1; with both mscale and mscale_all_dim set (and nonzero: transformers
// tests their truth), the ratio of the two.
double yarn_attention_factor(const RopeScaling& r) {
  if (r.attention_factor) return *r.attention_factor;
  const auto get_mscale = [](double scale, double m) {
    return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
  };
  if (r.mscale && *r.mscale != 0 && r.mscale_all_dim && *r.mscale_all_dim != 0)
    return get_mscale(r.factor, *r.mscale) / get_mscale(r.factor, *r.mscale_all_dim);
  return get_mscale(r.factor, 1.0);
}

// YaRN: dimensions that turn fewer than beta_slow times over the original context are
// interpolated (divided by factor), those that turn more than beta_fast times are kept, and a
// linear ramp over the dimension index blends the two between.
std::vector<float> yarn_inv_freq(const RopeScaling& r, double theta, int64_t dim) {
  const std::vector<float> pos = pos_freqs(theta, dim);
  const double beta_fast = r.beta_fast && *r.beta_fast != 0 ? *r.beta_fast : 32.0;
  const double beta_slow = r.beta_slow && *r.beta_slow != 0 ? *r.beta_slow : 1.0;
  const double orig = static_cast<double>(r.original_max_position_embeddings);
  // The dimension index at which a frequency turns `rotations` times over `orig` positions.
  const auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(orig / (rotations * 2 * M_PI))) /
           (2 * std::log(theta));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (r.truncate.value_or(true)) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const float low_f = static_cast<float>(low), width_f = static_cast<float>(high - low);
  const float factor_f = static_cast<float>(r.factor);
  std::vector<float> inv(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    const float extrapolation = 1.0f / pos[i];
    const float interpolation = 1.0f / (factor_f * pos[i]);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / width_f, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // transformers' inv_freq_extrapolation_factor
    const float a = interpolation * (1.0f - keep);
    const float b = extrapolation * keep;
    inv[i] = a + b;
  }
  return inv;
}

// Dynamic NTK: the base grows to theta * (factor * L / M - (factor - 1))^(h / (h - 2)) for a
// length L beyond M = max_position_embeddings. Within M transformers keeps the frequencies of
// its initialisation (L = M, float64 arithmetic); beyond, it recomputes them from
// max(position_ids) + 1, a tensor, so every step is float32.
std::vector<float> dynamic_inv_freq(const RopeScaling& r, double theta, int64_t dim,
                                    int64_t max_positions, int64_t seq_len) {
  const double exponent = static_cast<double>(dim) / static_cast<double>(dim - 2);
  if (seq_len <= max_positions) {
    const double m = static_cast<double>(max_positions);
    const double base = theta * std::pow((r.factor * m / m) - (r.factor - 1), exponent);
    return default_inv_freq(base, dim);
  }
  float s = static_cast<float>(r.factor) * static_cast<float>(seq_len);
  s = s / static_cast<float>(max_positions);
  s = s - static_cast<float>(r.factor - 1);
  // torch's pow of a float32 tensor by a Python float exponent rounds the float64 power.
  const float grown = static_cast<float>(std::pow(static_cast<double>(s), exponent));
  const float base = static_cast<float>(theta) * grown;
  return default_inv_freq(base, dim);
}

}  // namespace

RopeFrequencies ModelConfig::rope_frequencies(int64_t seq_len, bool local) const {
  RopeFrequencies out;
  if (local) {  // Gemma's sliding layers: default rope, never scaled
    out.inv_freq = default_inv_freq(rope_local_base_freq, head_dim);
    return out;
  }
  switch (rope_scaling.type) {
    case RopeScalingType::none: out.inv_freq = default_inv_freq(rope_theta, head_dim); break;
    case RopeScalingType::linear:
      // transformers' "linear" rope: inv_freq / factor (in float32).
      out.inv_freq = default_inv_freq(rope_theta, head_dim);
      for (float& f : out.inv_freq) f = f / static_cast<float>(rope_scaling.factor);
      break;
    case RopeScalingType::llama3:
      out.inv_freq = default_inv_freq(rope_theta, head_dim);
      apply_llama3(rope_scaling, out.inv_freq);
      break;
    case RopeScalingType::yarn:
      out.inv_freq = yarn_inv_freq(rope_scaling, rope_theta, head_dim);
      // transformers multiplies the float32 cos and sin by this Python float: float32 too.
      out.attention_factor = static_cast<float>(yarn_attention_factor(rope_scaling));
      break;
    case RopeScalingType::dynamic:
      out.inv_freq =
          dynamic_inv_freq(rope_scaling, rope_theta, head_dim, max_position_embeddings, seq_len);
      break;
  }
  return out;
}

std::string ModelConfig::rope_scaling_description() const {
  const RopeScaling& r = rope_scaling;
  char factor[32];
  std::snprintf(factor, sizeof factor, "x%g", r.factor);
  const std::string over =
      " over " + std::to_string(r.original_max_position_embeddings) + " original positions";
  switch (r.type) {
    case RopeScalingType::none: return "";
    case RopeScalingType::linear: return std::string("linear ") + factor;
    case RopeScalingType::llama3: return std::string("llama3 ") + factor + over;
    case RopeScalingType::yarn: return std::string("yarn ") + factor + over;
    case RopeScalingType::dynamic:
      return std::string("dynamic NTK ") + factor + " beyond " +
             std::to_string(max_position_embeddings) + " positions";
  }
  return "";
}

int64_t ModelConfig::trained_positions() const {
  return rope_scaling.type == RopeScalingType::yarn ? rope_scaling.original_max_position_embeddings
                                                    : max_position_embeddings;
}

std::vector<float> ModelConfig::rope_inv_freq(bool local) const {
  return rope_frequencies(max_position_embeddings, local).inv_freq;
}

}  // namespace sbp

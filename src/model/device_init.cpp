#include "model/device_init.h"

#include <string>

namespace sbp {

uint64_t parameter_stream(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

void init_parameters_on_backend(Backend& be, ParameterSet& params, uint64_t seed, InitStyle style,
                                float std) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params.tensor(i);
    if (!t.data) continue;
    const uint64_t stream = parameter_stream(params.name(i));
    const bool is_norm = params.id(i).kind() == ParamKind::norm;
    const bool is_bias = params.id(i).kind() == ParamKind::bias;
    const bool test = style == InitStyle::test;
    if (is_norm) {
      const float identity = 1.0f - params.norm_weight_offset();  // (offset + w) = 1
      if (test)
        be.fill_normal(t, identity, 0.2f, seed, stream);
      else
        be.fill(t, identity);
    } else if (is_bias) {
      if (test)
        be.fill_normal(t, 0.0f, 0.1f, seed, stream);
      else
        be.fill(t, 0.0f);
    } else {
      be.fill_normal(t, 0.0f, std, seed, stream);
    }
    // transformers zeroes nn.Embedding's padding_idx row after drawing the others.
    const int64_t zero_row =
        style == InitStyle::hf && params.id(i).role == ParamRole::embed ? params.padding_row() : -1;
    if (zero_row >= 0 && zero_row < t.rows()) be.fill(t.slice_rows(zero_row, zero_row + 1), 0.0f);
  }
}

}  // namespace sbp

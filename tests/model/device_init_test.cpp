// Random weights drawn on the backend (model/device_init.h, `bench`'s random models): the
// distribution init_parameters documents (matrices N(0, std), norms the identity, biases zero,
// the padding row zero) from Backend::fill_normal, one stream per tensor name; the same bytes in
// F32 and, rounded once, in BF16; and a tensor's numbers do not depend on the other tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/memory.h"
#include "model/config.h"
#include "model/device_init.h"
#include "support/test_support.h"

namespace sbp {
namespace {

TEST(DeviceInit, FollowsInitParametersDistribution) {
  for (const char* preset : {"tiny-qwen2", "tiny-gemma3"}) {  // biases; a norm offset and padding
    SCOPED_TRACE(preset);
    const ModelConfig cfg = preset_config(preset);
    const std::unique_ptr<Backend> be = test::backend();
    Ledger ledger;
    Pool pool(ledger, *be);
    ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
    ParameterSet b(cfg, pool, Category::weights, DType::BF16, false);
    init_parameters_on_backend(*be, w, 5, InitStyle::hf, 0.02f);
    init_parameters_on_backend(*be, b, 5, InitStyle::hf, 0.02f);
    double sum2 = 0;
    int64_t count = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string& n = w.name(i);
      if (!w.tensor(i).data) continue;
      const std::vector<float> v = download_f32(w.tensor(i)), vb = download_f32(b.tensor(i));
      for (size_t j = 0; j < v.size(); ++j)
        ASSERT_EQ(vb[j], bf16_to_f32(f32_to_bf16(v[j]))) << n << " " << j;
      if (n.find("norm") != std::string::npos) {
        for (float x : v) ASSERT_EQ(x, 1.0f - w.norm_weight_offset()) << n;
      } else if (n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0) {
        for (float x : v) ASSERT_EQ(x, 0.0f) << n;
      } else {
        const int64_t pad = n == "model.embed_tokens.weight" ? w.padding_row() : -1;
        const int64_t cols = w.tensor(i).cols();
        for (size_t j = 0; j < v.size(); ++j) {
          if (pad >= 0 && static_cast<int64_t>(j) / cols == pad) {
            ASSERT_EQ(v[j], 0.0f) << n << " padding row";
            continue;
          }
          sum2 += double{v[j]} * v[j];
          ++count;
        }
      }
    }
    const double sd = std::sqrt(sum2 / static_cast<double>(count));
    EXPECT_NEAR(sd, 0.02, 0.02 * 5 / std::sqrt(2.0 * static_cast<double>(count)));
  }
}

TEST(DeviceInit, ATensorsNumbersDependOnItsNameOnly) {
  const ModelConfig two = preset_config("tiny-qwen3");
  ModelConfig one = two;
  one.set_num_layers(1);
  const std::unique_ptr<Backend> be = test::backend();
  Ledger ledger;
  Pool pool(ledger, *be);
  ParameterSet a(two, pool, Category::weights, DType::F32, false);
  ParameterSet b(one, pool, Category::weights, DType::F32, false);
  init_parameters_on_backend(*be, a, 9, InitStyle::test);
  init_parameters_on_backend(*be, b, 9, InitStyle::test);
  for (size_t i = 0; i < b.size(); ++i) {
    if (b.tensor(i).data) {
      EXPECT_EQ(download_f32(b.tensor(i)), download_f32(a.get(b.name(i)))) << b.name(i);
    }
  }
}

}  // namespace
}  // namespace sbp

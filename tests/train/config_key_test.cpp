// A trainer key's row (train/config_key.h): what check_key says for each kind of bound, in which
// order a row's rules are said, and that every number key of the table is bounded by its row
// unless one of the named checks of several keys bounds it.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "train/config_keys.h"

namespace sbp {
namespace {

std::string error_of(const ConfigKey& k, const TrainConfig& c) {
  try {
    check_key(k, c);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

ConfigKey grad_accum_row(IntegerBound b) {
  return field_key<int64_t>("grad_accum", [](TrainConfig& c) -> int64_t& { return c.grad_accum; })
      .in(b);
}

TEST(ConfigKey, IntegerBoundSaysBelowOutsideOrTheRange) {
  TrainConfig c;  // built in code: errors name "config"
  const ConfigKey counted = grad_accum_row({.lo = 1, .hi = 8, .below = "must be at least 1"});
  c.grad_accum = 0;
  EXPECT_EQ(error_of(counted, c), "config: grad_accum must be at least 1");
  c.grad_accum = 9;
  EXPECT_EQ(error_of(counted, c), "config: grad_accum is 9, outside [1, 8]");
  c.grad_accum = 8;
  EXPECT_EQ(error_of(counted, c), "");
  const ConfigKey choices = grad_accum_row({.lo = 1, .hi = 2, .outside = "must be 1 or 2"});
  for (const int64_t v : {0, 3}) {
    c.grad_accum = v;
    EXPECT_EQ(error_of(choices, c), "config: grad_accum must be 1 or 2");
  }
  const ConfigKey plain = grad_accum_row({.lo = 1, .hi = 2});
  c.grad_accum = 0;
  EXPECT_EQ(error_of(plain, c), "config: grad_accum is 0, outside [1, 2]");
}

TEST(ConfigKey, RealBoundSaysTheIntervalThenItsNote) {
  TrainConfig c;
  c.origin["optim.max_grad_norm"] = "cfg.yaml:3";
  const ConfigKey row = field_key<double>("optim.max_grad_norm", [](TrainConfig& t) -> double& {
                          return t.max_grad_norm;
                        }).in(RealBound{kNonNegative, " (0: no clipping)"});
  c.max_grad_norm = -1.0;
  EXPECT_EQ(error_of(row, c), "cfg.yaml:3: optim.max_grad_norm must be >= 0 (0: no clipping)");
  c.max_grad_norm = 0.0;
  EXPECT_EQ(error_of(row, c), "");
}

TEST(ConfigKey, RequiredThenRuleThenBound) {
  TrainConfig c;
  ConfigKey row = field_key<std::string>("model", [](TrainConfig& t) -> std::string& {
                    return t.model;
                  }).must_give("a Hugging Face model directory");
  EXPECT_EQ(error_of(row, c), "config: model is required (a Hugging Face model directory)");
  // The rule is said before the bound: a key's own words for a value come first.
  ConfigKey counted =
      grad_accum_row({.lo = 2, .hi = 8}).with_rule([](const TrainConfig& t, const ConfigKey& k) {
        require_key(t.grad_accum != 1, t, k.name, "is 1: use at least 2");
      });
  c.grad_accum = 1;
  EXPECT_EQ(error_of(counted, c), "config: grad_accum is 1: use at least 2");
  c.grad_accum = 0;
  EXPECT_EQ(error_of(counted, c), "config: grad_accum is 0, outside [2, 8]");
}

// A number key added without a bound would take any value: each is bounded by its row, or is
// one of these, which the named checks bound together with other keys (or which any value fits).
TEST(ConfigKey, EveryNumberKeyIsBoundedByItsRow) {
  // Any value is a seed; data.max_seq_len lies between 2 and max_tokens; LoraConfig::validate
  // bounds the LoRA numbers, and the sampler's check every online objective's temperature,
  // top_p and min_p.
  const std::set<std::string> bounded_elsewhere = {"seed",   "demo.seed",  "data.max_seq_len",
                                                   "lora.r", "lora.alpha", "lora.dropout"};
  const auto sampling = [](const std::string& name) {
    return name.ends_with(".temperature") || name.ends_with(".top_p") || name.ends_with(".min_p");
  };
  const TrainConfig c;
  for (const ConfigKey& k : config_keys()) {
    if (!k.get(c).is_number() || bounded_elsewhere.count(k.name) || sampling(k.name)) continue;
    EXPECT_FALSE(std::holds_alternative<std::monostate>(k.bound)) << k.name << " has no bound";
  }
}

}  // namespace
}  // namespace sbp

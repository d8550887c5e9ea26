// The per-rank ledger of `mpirun -np 2 streambp train` (rank 0's, in metrics.jsonl): ZeRO-1
// holds half the AdamW moments, ZeRO-2 also half the gradients but for the groups the backward
// has bound at the peak (the group being written and the one being reduced), so its peak is
// below ZeRO-0's by the expected amount. The numbers are quoted in docs/DISTRIBUTED.md.
#include <gtest/gtest.h>

#include "dist/dist_support.h"
#include "model/config.h"
#include "model/parameters.h"
#include "optim/shard_range.h"

namespace sbp {
namespace {

using dist_test::TrainDir;
using nlohmann::json;

// Six layers and an untied LM head, so that the shards, not the bound groups, dominate.
const char* const kModel = R"({"model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,
  "num_hidden_layers": 6, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
  "vocab_size": 512, "max_position_embeddings": 1024, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "torch_dtype": "float32"})";

TEST(DistMemory, ZeroTwoPeakPerRankIsBelowZeroZeroByTheShardedOptimizerAndGradients) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run("data:\n  train: " + test::source_dir() +
                   "/examples/tiny-chat/train.jsonl\nmax_tokens: 128\nlayer_chunk: 16\nhead_chunk: "
                   "32\nmax_steps: 2\n",
               kModel);
  const ModelConfig cfg = ModelConfig::from_json(json::parse(kModel), "model");
  int64_t P = 0, S = 0, layer = 0,
          head = 0;  // elements: all, rank 0's slices, one layer, the head group
  for (const ParamSpec& s : parameter_specs(cfg)) {
    const int64_t n = s.shape.numel();
    P += n;
    S += shard_range(n, 2, 0).count;
    if (s.name.rfind("model.layers.0.", 0) == 0) layer += n;
    if (s.name == "lm_head.weight" || s.name == "model.norm.weight") head += n;
  }
  const int64_t embed = cfg.vocab_size * cfg.hidden_size;
  const int64_t bound = std::max({head + layer, 2 * layer, layer + embed});  // most bound at once

  std::map<int, json> peak;  // per zero stage: rank 0's peak breakdown, the step with the highest
  for (int zero : {0, 1, 2}) {
    const std::string name = "zero" + std::to_string(zero);
    const auto r = run.train(2, name, "dist.zero=" + std::to_string(zero));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const json& l : dist_test::read_metrics(run.out(name + "/metrics.jsonl"))) {
      const json& p = l["peak_memory_bytes"];
      EXPECT_GE(l["dist/peak_memory_max_rank"].get<int64_t>(), p["total"].get<int64_t>());
      if (!peak.count(zero) || p["total"] > peak[zero]["total"]) peak[zero] = p;
    }
  }
  auto at = [&](int zero, const char* category) { return peak[zero][category].get<int64_t>(); };
  EXPECT_EQ(at(0, "optimizer"), 8 * P);  // fp32 m and v
  EXPECT_EQ(at(0, "grads"), 4 * P);
  EXPECT_EQ(at(1, "optimizer"), 8 * S);
  EXPECT_EQ(at(1, "grads"), 4 * P);
  EXPECT_EQ(at(1, "total"), at(0, "total") - 8 * (P - S));
  EXPECT_EQ(at(2, "optimizer"), 8 * S);
  EXPECT_GE(at(2, "grads"), 4 * S);
  EXPECT_LE(at(2, "grads"), 4 * (S + bound));
  // Below ZeRO-0 by the optimizer's half and the gradients' half less what is bound at the peak
  // (at most: the activations at the two peaks may differ).
  const int64_t saved = at(0, "total") - at(2, "total");
  EXPECT_GE(saved, 8 * (P - S) + 4 * (P - S - bound));
  EXPECT_LE(saved, 8 * (P - S) + 4 * (P - S));
  EXPECT_GT(static_cast<double>(saved) / static_cast<double>(at(0, "total")), 0.25);
}

}  // namespace
}  // namespace sbp

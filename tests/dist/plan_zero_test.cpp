// `streambp plan --ranks N --zero Z`: the memory of one data-parallel rank, from the real
// sharding code (dist/data_parallel.h) run against a communicator that moves no data. One rank,
// or ZeRO-0, is exactly today's plan; ZeRO-1 divides the optimizer category (moments and bf16
// master weights) by the ranks; ZeRO-2 divides the gradients too, but for the groups whose
// whole buffers are bound while the backward writes them (at most two groups, plus a tied
// embedding, at a time).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/parameters.h"
#include "optim/shard_range.h"
#include "plan/planner.h"
#include "support/test_support.h"

namespace sbp {
namespace {

// Elements rank 0 holds of every tensor of cfg split over `ranks`, and the whole count.
int64_t rank0_elements(const ModelConfig& cfg, int ranks) {
  int64_t n = 0;
  for (const ParamSpec& s : parameter_specs(cfg)) n += shard_range(s.shape.numel(), ranks, 0).count;
  return n;
}

// The most gradient elements bound at once under ZeRO-2: two consecutive groups in the
// backward's order (head, layers, embedding), plus the embedding all along when the LM head is
// tied to it.
int64_t most_bound(const ModelConfig& cfg) {
  const std::vector<ParamSpec> specs = parameter_specs(cfg);
  std::vector<int64_t> groups(static_cast<size_t>(cfg.num_hidden_layers + 2),
                              0);  // head, L-1 .. 0, embedding
  for (const ParamSpec& s : specs) {
    size_t g = 0;
    if (s.name.rfind("model.layers.", 0) == 0)
      g = 1 + static_cast<size_t>(cfg.num_hidden_layers - 1 - std::stoll(s.name.substr(13)));
    else if (s.name == "model.embed_tokens.weight")
      g = groups.size() - 1;
    groups[g] += s.shape.numel();
  }
  int64_t worst = 0;
  const size_t pairs_end = cfg.tie_word_embeddings ? groups.size() - 1 : groups.size();
  for (size_t i = 0; i + 1 < pairs_end; ++i) worst = std::max(worst, groups[i] + groups[i + 1]);
  return worst + (cfg.tie_word_embeddings ? groups.back() : 0);
}

PlanSetup setup(const char* preset, DType dtype, int ranks, int zero) {
  PlanSetup s;
  s.cfg = preset_config(preset);
  s.cfg.num_hidden_layers = 6;
  s.param_dtype = s.act_dtype = s.grad_dtype = dtype;  // the paper: bf16 weights and gradients
  s.adamw = true;
  s.ranks = ranks;
  s.zero = zero;
  return s;
}

TEST(PlanZero, OneRankOrZeroZeroIsTodaysPlan) {
  ExecConfig stream = parse_mode("stream");
  stream.layer_chunk = 16;
  for (DType dt : {DType::F32, DType::BF16}) {
    const PlannedStep base = plan_at(setup("tiny-qwen3", dt, 1, 0), stream, 200);
    for (const auto& [ranks, zero] : {std::pair{1, 2}, std::pair{2, 0}, std::pair{4, 0}}) {
      const PlannedStep p = plan_at(setup("tiny-qwen3", dt, ranks, zero), stream, 200);
      EXPECT_EQ(p.peak_bytes, base.peak_bytes) << ranks << " ranks, zero " << zero;
      EXPECT_EQ(p.breakdown.bytes, base.breakdown.bytes);
    }
  }
}

TEST(PlanZero, ZeroOneDividesTheOptimizerStateZeroTwoTheGradientsToo) {
  ExecConfig stream = parse_mode("stream");
  stream.layer_chunk = 16;
  for (const char* preset : {"tiny-qwen3", "tiny-qwen2"}) {  // untied; tied
    for (DType dt : {DType::F32, DType::BF16}) {
      const int64_t e = static_cast<int64_t>(dtype_size(dt));
      const PlanSetup s0 = setup(preset, dt, 2, 0);
      const int64_t P = s0.cfg.num_parameters(), S = rank0_elements(s0.cfg, 2);
      ASSERT_LT(S, P);
      // fp32 m and v, and with bf16 weights an fp32 master copy.
      const int64_t opt_per_element = dt == DType::F32 ? 8 : 12;
      const PlannedStep z0 = plan_at(s0, stream, 200);
      const PlannedStep z1 = plan_at(setup(preset, dt, 2, 1), stream, 200);
      const PlannedStep z2 = plan_at(setup(preset, dt, 2, 2), stream, 200);
      EXPECT_EQ(z0.breakdown[Category::optimizer], opt_per_element * P) << preset;
      EXPECT_EQ(z1.breakdown[Category::optimizer], opt_per_element * S) << preset;
      EXPECT_EQ(z2.breakdown[Category::optimizer], opt_per_element * S) << preset;
      // ZeRO-1 keeps whole gradients: the same step, less optimizer state.
      EXPECT_EQ(z1.breakdown[Category::grads], e * P);
      EXPECT_EQ(z1.peak_bytes, z0.peak_bytes - opt_per_element * (P - S));
      // ZeRO-2: this rank's slices, plus what the backward has bound at the peak.
      const int64_t grads = z2.breakdown[Category::grads];
      EXPECT_GE(grads, e * S) << preset;
      EXPECT_LE(grads, e * (S + most_bound(s0.cfg))) << preset;
      EXPECT_LE(z2.peak_bytes,
                z0.peak_bytes - opt_per_element * (P - S) - e * (P - S - most_bound(s0.cfg)))
          << preset;
      EXPECT_GE(z2.peak_bytes, z0.peak_bytes - opt_per_element * (P - S) - e * (P - S)) << preset;
    }
  }
}

// The most weight elements gathered at once under ZeRO-3: the group the engine reads and the
// one being prefetched (two consecutive groups of embedding, layers, head), the embedding again
// with the head when tied; at most two layers and the head/embedding.
int64_t most_gathered(const ModelConfig& cfg) {
  int64_t layer = 0, embed = 0, head = 0;
  for (const ParamSpec& s : parameter_specs(cfg)) {
    if (s.name.rfind("model.layers.0.", 0) == 0)
      layer += s.shape.numel();
    else if (s.name == "model.embed_tokens.weight")
      embed = s.shape.numel();
    else if (s.name.rfind("model.layers.", 0) != 0)
      head += s.shape.numel();
  }
  return 2 * layer + embed + head;
}

TEST(PlanZero, ZeroThreeDividesTheWeightsButForTheGroupsGathered) {
  ExecConfig stream = parse_mode("stream");
  stream.layer_chunk = 16;
  for (const char* preset : {"tiny-qwen3", "tiny-qwen2"}) {  // untied; tied
    for (DType dt : {DType::F32, DType::BF16}) {
      const int64_t e = static_cast<int64_t>(dtype_size(dt));
      for (int ranks : {2, 4}) {
        PlanSetup s = setup(preset, dt, ranks, 3);
        s.cfg.num_hidden_layers = 12;
        const int64_t P = s.cfg.num_parameters(), S = rank0_elements(s.cfg, ranks);
        const PlannedStep z3 = plan_at(s, stream, 200);
        s.zero = 2;
        const PlannedStep z2 = plan_at(s, stream, 200);
        const int64_t w = z3.breakdown[Category::weights];
        EXPECT_GE(w, e * S) << preset;
        EXPECT_LE(w, e * (S + most_gathered(s.cfg))) << preset;
        EXPECT_LT(w, e * P) << preset;
        // Gradients and optimizer state as ZeRO-2's.
        EXPECT_EQ(z3.breakdown[Category::optimizer], z2.breakdown[Category::optimizer]);
        EXPECT_LT(z3.peak_bytes, z2.peak_bytes) << preset << " " << ranks;
      }
    }
  }
}

TEST(PlanZero, ZeroTwoTrainsLongerSequencesUnderTheSameBudget) {
  PlanSetup s = setup("tiny-qwen3", DType::BF16, 4, 0);
  s.budget = 8 << 20;
  const ExecConfig stream = parse_mode("stream");
  const MaxLenResult z0 = find_max_seq_len(s, stream, ChunkRequest{64, 64});
  s.zero = 2;
  const MaxLenResult z2 = find_max_seq_len(s, stream, ChunkRequest{64, 64});
  ASSERT_TRUE(z0.fits_at_all && z2.fits_at_all);
  EXPECT_GT(z2.plan.seq_len, z0.plan.seq_len);
}

TEST(PlanZero, CliTakesRanksAndZero) {
  test::TempDir tmp;
  const std::string plan = test::streambp_binary() +
                           " plan --model tiny-qwen3 --dtype f32 --optimizer adamw --seq-len 100 "
                           "--modes stream --layer-chunk 16 ";
  auto r = test::run_command(plan + "--ranks 2 --zero 2 --json " + tmp.file("p.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("data parallel: 2 ranks, zero 2: the memory of one rank"),
            std::string::npos)
      << r.output;
  const nlohmann::json j = nlohmann::json::parse(test::read_text(tmp.file("p.json")));
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["zero"], 2);
  PlanSetup s;
  s.cfg = preset_config("tiny-qwen3");
  s.param_dtype = s.act_dtype = DType::F32;
  s.adamw = true;
  s.ranks = 2;
  s.zero = 2;
  ExecConfig stream = parse_mode("stream");
  stream.layer_chunk = 16;
  EXPECT_EQ(j["modes"]["stream"]["peak_bytes"], plan_at(s, stream, 100).peak_bytes);
  r = test::run_command(plan + "--ranks 2 --zero 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("zero 3: the memory of one rank"), std::string::npos) << r.output;
  r = test::run_command(plan + "--ranks 2 --zero 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("streambp: error: --zero: must be 0 (replicated optimizer), 1"),
            std::string::npos)
      << r.output;
  for (const char* refused : {"--objective dpo", "--lora-r 2"}) {
    r = test::run_command(plan + "--ranks 2 --zero 3 " + refused);
    EXPECT_EQ(r.exit_code, 1) << refused;
    EXPECT_NE(r.output.find("--zero 3: "), std::string::npos) << refused << ": " << r.output;
  }
  r = test::run_command(plan + "--ranks 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--ranks: must be an integer from 1 to 65536"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace sbp

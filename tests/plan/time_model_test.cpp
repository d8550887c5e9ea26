// The time planner's accounting (plan/time_model.h): what the shape-only step records per op
// family and per GEMM shape against closed-form counts, and the pricing of a GPU profile
// against hand arithmetic. No test here times anything: the CPU's probed profile is checked by
// scripts/time-check.sh (docs/BENCHMARKS.md, "Time planner"), not by a timed test.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "core/ledger.h"
#include "core/pool.h"
#include "plan/gpu_profiles.h"
#include "plan/time_plan.h"
#include "support/test_support.h"

namespace sbp {
namespace {

PlanSetup f32_setup(const ModelConfig& cfg) {
  PlanSetup s;
  s.cfg = cfg;
  s.param_dtype = s.act_dtype = s.grad_dtype = DType::F32;
  return s;
}

// An untied tiny-qwen3 (the LM head is its own GEMM weight) without biases.
ModelConfig tiny() {
  ModelConfig c = preset_config("tiny-qwen3");
  c.tie_word_embeddings = false;
  c.attention_bias = false;
  return c;
}

TEST(TimeAccounting, GemmRecordsTwoMNKAndItsShape) {
  const std::unique_ptr<Backend> be = make_shape_only_backend(true);
  Ledger ledger;
  Pool pool(ledger, *be);
  OpProfile prof;
  be->set_profile(&prof);
  const int64_t M = 37, N = 53, K = 71;
  const Buffer A = pool.allocate(Category::other, DType::BF16, {K, M});  // transposed
  const Buffer B = pool.allocate(Category::other, DType::F32, {K, N});
  const Buffer C = pool.allocate(Category::other, DType::F32, {M, N});
  be->gemm(C.view(), A.view(), true, B.view(), false, 1.0f, 1.0f);
  be->gemm(C.view(), A.view(), true, B.view(), false, 1.0f, 1.0f);
  be->set_profile(nullptr);
  EXPECT_EQ(prof[OpFamily::layer_gemm].flops, 2 * 2 * M * N * K);
  EXPECT_EQ(prof[OpFamily::layer_gemm].calls, 2);
  ASSERT_EQ(prof.gemms().size(), 1u);
  const GemmCount& g = prof.gemms().front();
  EXPECT_EQ(g.calls, 2);
  EXPECT_EQ(g.shape.M, M);
  EXPECT_EQ(g.shape.N, N);
  EXPECT_EQ(g.shape.K, K);
  EXPECT_TRUE(g.shape.trans_a);
  EXPECT_FALSE(g.shape.trans_b);
  EXPECT_EQ(g.shape.a, DType::BF16);
  EXPECT_TRUE(g.shape.accumulate);
  EXPECT_EQ(g.shape.flops(), 2.0 * M * N * K);
  // A (bf16) + B + C read and written.
  EXPECT_EQ(g.shape.bytes(), double(M * K * 2 + K * N * 4 + 2 * M * N * 4));
}

// Causal (query, key) pairs of one sequence of n: n (n + 1) / 2.
double pairs(int64_t n) { return double(n) * double(n + 1) / 2.0; }

// The engine's FLOPs of an SFT step on one sequence, closed form: every projection and the LM
// head forward (2 T p), backward dX and dW (4 T p); attention forward 4 H h per pair and
// backward 10 H h per pair (the kernels' own count: S and P recomputed, then dV, dP, dQ, dK).
// Checkpoint recomputes each layer's forward but its down projection (the layer's output is not
// needed to go back through it) and its attention forward; stream does checkpoint's work plus
// one a Wk^T over the T rows per layer (DESIGN.md §2), however many chunks.
double closed_form_flops(const ModelConfig& c, int64_t T, const std::string& mode) {
  const double d = double(c.hidden_size), F = double(c.intermediate_size);
  // Every layer's projection parameters together.
  const double layer_p = matmul_parameters(c) - double(c.vocab_size * c.hidden_size);
  const double head_p = double(c.vocab_size * c.hidden_size);
  const double Hh = double(c.num_attention_heads * c.head_dim);
  const double Gh = double(c.num_key_value_heads * c.head_dim);
  const double L = double(c.num_hidden_layers);
  const double t = double(T);
  double f = 6.0 * t * (layer_p + head_p) + L * 14.0 * Hh * pairs(T);
  if (mode != "base") f += 2.0 * t * (layer_p - L * d * F) + L * 4.0 * Hh * pairs(T);
  if (mode == "stream") f += L * 2.0 * t * d * Gh;
  return f;
}

TEST(TimeAccounting, StepFlopsEqualAClosedFormCount) {
  const ModelConfig cfg = tiny();
  for (const int64_t T : {1, 17, 64}) {
    for (const std::string name : {"base", "checkpoint", "stream"}) {
      OpProfile ops;
      const PlannedStep p = plan_at(f32_setup(cfg), parse_mode(name), T, &ops);
      double gemm = double(ops[OpFamily::layer_gemm].flops + ops[OpFamily::head_gemm].flops);
      double attention =
          double(ops[OpFamily::attention_forward].flops + ops[OpFamily::attention_backward].flops);
      EXPECT_DOUBLE_EQ(gemm + attention, closed_form_flops(cfg, T, name))
          << name << " T=" << T;
      EXPECT_EQ(double(p.flops), gemm + attention) << name << " T=" << T;
      // The head's GEMMs: logits, dW and dX of (T, V, d), exactly.
      EXPECT_DOUBLE_EQ(double(ops[OpFamily::head_gemm].flops),
                       6.0 * double(T) * double(cfg.vocab_size * cfg.hidden_size))
          << name;
      // The per-shape table holds every GEMM FLOP the families hold.
      double by_shape = 0.0;
      for (const GemmCount& g : ops.gemms()) by_shape += double(g.calls) * g.shape.flops();
      EXPECT_DOUBLE_EQ(by_shape, gemm) << name;
    }
  }
}

TEST(TimeAccounting, StreamCountsEveryChunkOnceWhateverTheChunkSize) {
  // More chunks: more calls, the same FLOPs (K/V once per layer, queries once per chunk), and
  // the per-shape table still holds all of them.
  const ModelConfig cfg = tiny();
  ExecConfig one = parse_mode("stream"), four = parse_mode("stream");
  one.layer_chunk = 64;
  four.layer_chunk = 16;
  OpProfile a, b;
  const PlannedStep pa = plan_at(f32_setup(cfg), one, 64, &a);
  const PlannedStep pb = plan_at(f32_setup(cfg), four, 64, &b);
  EXPECT_EQ(pa.flops, pb.flops);
  EXPECT_EQ(pa.flops, int64_t(closed_form_flops(cfg, 64, "stream")));
  EXPECT_GT(b[OpFamily::attention_forward].calls, a[OpFamily::attention_forward].calls);
  double by_shape = 0.0;
  for (const GemmCount& g : b.gemms()) by_shape += double(g.calls) * g.shape.flops();
  EXPECT_DOUBLE_EQ(by_shape,
                   double(b[OpFamily::layer_gemm].flops + b[OpFamily::head_gemm].flops));
}

TEST(TimeAccounting, ModelFlopsConventions) {
  ModelConfig c = tiny();
  const ModelFlops f = model_flops(c, {100});
  const double dense = 6.0 * matmul_parameters(c) * 100.0;
  const double per_pair = 12.0 * double(c.num_attention_heads * c.head_dim) *
                          double(c.num_hidden_layers);
  EXPECT_DOUBLE_EQ(f.raw, dense + per_pair * 100.0 * 100.0);
  EXPECT_DOUBLE_EQ(f.causal, dense + per_pair * 100.0 * 101.0 / 2.0);
  // Two sequences of 50 count 2 x 50^2 pairs, not 100^2.
  const ModelFlops g = model_flops(c, {50, 50});
  EXPECT_DOUBLE_EQ(g.raw, dense + per_pair * 2.0 * 2500.0);
}

TEST(TimeModel, GpuGemmIsItsRooflineWithSplit3ForAnF32Operand) {
  const DeviceProfile h100 = gpu_profile("h100");
  EXPECT_TRUE(h100.gpu);
  EXPECT_DOUBLE_EQ(h100.peak_flops, 989.4e12);  // the datasheet's dense bf16
  GemmShape g{.M = 8192, .N = 8192, .K = 8192, .a = DType::BF16, .b = DType::BF16,
              .c = DType::BF16};
  const double one = g.flops() / (h100.peak_flops * h100.gemm_efficiency);
  EXPECT_DOUBLE_EQ(gemm_seconds(g, h100), one + h100.op_latency_s);
  g.a = DType::F32;  // split3: three bf16 passes
  EXPECT_DOUBLE_EQ(gemm_seconds(g, h100), 3.0 * one + h100.op_latency_s);
  g.b = DType::F32;  // fp32 x fp32: CUDA cores
  EXPECT_DOUBLE_EQ(gemm_seconds(g, h100),
                   g.flops() / (h100.fp32_flops * h100.gemm_efficiency) + h100.op_latency_s);
  // A matrix-vector product is bound by its bytes.
  GemmShape v{.M = 1, .N = 8192, .K = 8192, .a = DType::BF16, .b = DType::BF16, .c = DType::BF16};
  EXPECT_DOUBLE_EQ(gemm_seconds(v, h100), v.bytes() / h100.memory_bytes_per_s + h100.op_latency_s);
  EXPECT_THROW(gpu_profile("h800"), InputError);
}

TEST(TimeModel, PredictionAddsTheFamiliesAndDividesTheModelFlops) {
  PlanSetup s;
  s.cfg = preset_config("tiny-qwen3");
  for (const std::string& dev : gpu_profile_names()) {
    const TimePlan t = plan_time(s, parse_mode("stream"), 256, dev);
    double sum = 0.0;
    for (const double f : t.time.family_seconds) sum += f;
    EXPECT_DOUBLE_EQ(sum, t.time.compute_seconds) << dev;
    EXPECT_DOUBLE_EQ(t.time.seconds, t.time.compute_seconds) << dev;  // nothing else on one GPU
    EXPECT_NEAR(t.time.tokens_per_s_per_device, 256.0 / t.time.seconds, 1e-9 * 256.0 / t.time.seconds);
    EXPECT_NEAR(t.time.mfu_causal,
                t.shape.model_flops_causal / (t.time.seconds * t.device.peak_flops), 1e-12)
        << dev;
    EXPECT_LT(t.time.mfu_causal, t.time.mfu_raw) << dev;
    EXPECT_LT(t.time.mfu_raw, 1.0) << dev;
    EXPECT_GE(t.time.engine_flops, t.shape.model_flops_causal) << dev;  // recomputation
  }
}

TEST(TimeModel, OffloadAndContextParallelBytesArePriced) {
  PlanSetup s;
  s.cfg = preset_config("tiny-qwen3");
  ExecConfig off = parse_mode("stream");
  off.offload.checkpoints = true;
  const TimePlan t = plan_time(s, off, 512, "h100");
  EXPECT_GT(t.step.offloaded_bytes, 0);
  EXPECT_GT(t.time.offload_seconds, 0.0);
  EXPECT_GE(t.time.seconds, t.time.compute_seconds);

  PlanSetup cp = s;
  cp.ranks = cp.context_parallel = 4;
  const TimePlan c = plan_time(cp, parse_mode("stream"), 1024, "h100");
  EXPECT_GT(c.step.context_bytes.total(), 0);
  EXPECT_GT(c.time.collective_exposed_seconds, 0.0);
  // Tokens per second per GPU: the group's tokens over its GPUs.
  EXPECT_NEAR(c.time.tokens_per_s_per_device, 1024.0 / (c.time.seconds * 4.0),
              1e-9 * c.time.tokens_per_s_per_device);
}

TEST(PlanTimeCli, JsonCarriesTheTimeAndTextTheTable) {
  test::TempDir tmp;
  const auto r = test::run_command(test::streambp_binary() +
                                   " plan --model tiny-qwen3 --seq-len 512 --modes stream --time "
                                   "--device h200 --json " +
                                   tmp.file("p.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("time on H200"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("p.json")));
  const auto& t = j["modes"]["stream"]["time"];
  for (const char* k : {"seconds", "tokens_per_s_per_device", "mfu_causal", "mfu_raw",
                        "engine_flops", "model_flops_causal", "dominant", "families"})
    EXPECT_TRUE(t.contains(k)) << k;
  EXPECT_FALSE(t["measured_profile"].get<bool>());
  const auto bad = test::run_command(test::streambp_binary() +
                                     " plan --model tiny-qwen3 --seq-len 512 --device h100");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--time"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace sbp

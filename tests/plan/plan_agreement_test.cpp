// Agreement with reality (DESIGN §4): the shape-only plan of a step records exactly the
// ledger a real CPU step records (the same peak, the same breakdown at the peak), for several
// architectures, every mode, several T, segment layouts and chunk sizes; and a budget set to
// the planned peak lets the real step run while one byte less stops it.
#include <gtest/gtest.h>

#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "check/gradcheck.h"
#include "check/random_batches.h"
#include "core/rng.h"
#include "dist/communicator.h"
#include "engine/context_slice.h"
#include "engine/engine.h"
#include "objective/sft.h"
#include "optim/adamw.h"
#include "plan/planner.h"
#include "step/model_set.h"
#include "step/step_runner.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Measured {
  int64_t peak = 0;
  MemoryBreakdown breakdown;
  int64_t host_peak = 0;  // the host space's ledger (offload)
  MemoryBreakdown host_breakdown;
};

// One real fp32 step on the CPU, allocated in the order a training run allocates: weights,
// gradients, optimizer state, then the step (and, with AdamW, the update).
Measured real_step(const ModelConfig& cfg, const ExecConfig& exec, const Batch& batch, bool adamw,
                   int64_t budget = 0) {
  Ledger ledger(budget);
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool(ledger, be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 3, InitStyle::hf);
  ParameterSet g(cfg, pool, Category::grads, DType::F32, true);
  std::unique_ptr<AdamW> opt;
  if (adamw) opt = std::make_unique<AdamW>(cfg, pool, AdamWConfig{});
  Engine engine(cfg, w, be, pool, exec);
  SftObjective obj(batch, batch.loss_weight_sum());
  engine.forward_backward(batch, obj, g);
  if (opt) opt->step(w, g, be, 1e-3f);
  return Measured{ledger.peak(), ledger.peak_breakdown(), 0, {}};
}

ModelConfig tied_qwen3_with_bias() {
  ModelConfig c = preset_config("tiny-qwen3");
  c.tie_word_embeddings = true;
  c.attention_bias = true;
  return c;
}

ModelConfig mqa_llama() {
  ModelConfig c = preset_config("tiny-llama");
  c.num_key_value_heads = 1;
  c.num_hidden_layers = 3;
  return c;
}

ExecConfig mode(const char* name, int64_t layer_chunk, int64_t head_chunk) {
  ExecConfig e = parse_mode(name);
  e.layer_chunk = layer_chunk;
  e.head_chunk = head_chunk;
  return e;
}

// The ledger does not depend on the thread count; one thread keeps these many small steps
// fast on a loaded machine (OpenMP barriers stall when threads outnumber free cores).
class PlanAgreement : public ::testing::Test {
 protected:
  void SetUp() override { set_cpu_threads(1); }
};

TEST_F(PlanAgreement, LedgerPeakAndBreakdownEqualARealStepExactly) {
  const std::vector<ModelConfig> models = {preset_config("tiny-qwen3"), preset_config("tiny-qwen2"),
                                           preset_config("tiny-llama"), tied_qwen3_with_bias(),
                                           mqa_llama(),
                                           // sandwich norms, sliding layers, the soft-capped
                                           // head's second logits block
                                           preset_config("tiny-gemma3"),
                                           // every layer sliding: the window buffers of
                                           // engine/window_stream.h set the stream peak
                                           preset_config("tiny-mistral")};
  int cases = 0;
  for (size_t mi = 0; mi < models.size(); ++mi) {
    const ModelConfig& cfg = models[mi];
    for (int64_t T : {1, 2, 37, 64}) {
      for (int64_t segments : {int64_t{1}, int64_t{3}}) {
        if (segments > T) continue;
        const Batch batch = cli::random_batch(cfg.vocab_size, T, segments, 100 + T, segments > 1);
        const std::vector<ExecConfig> execs = {mode("base", 0, 0),
                                               mode("checkpoint", 0, 0),
                                               mode("stream", 1, 1),
                                               mode("stream", 7, 5),
                                               mode("stream", T, T),
                                               mode("stream", 16, 64),
                                               mode("recompute+chunked", 0, 9),
                                               mode("store+chunked", 0, 4),
                                               mode("stream+full", 6, 0)};
        for (const ExecConfig& e : execs) {
          const bool adamw = (cases % 3) == 0;
          const PlannedStep plan = plan_sft_step(cfg, e, batch, DType::F32, adamw);
          const Measured real = real_step(cfg, e, batch, adamw);
          ASSERT_EQ(plan.peak_bytes, real.peak)
              << "model " << mi << " " << mode_name(e) << " T=" << T << " segments=" << segments
              << " chunks " << e.layer_chunk << "/" << e.head_chunk;
          ASSERT_EQ(plan.breakdown.bytes, real.breakdown.bytes)
              << "model " << mi << " " << mode_name(e) << " T=" << T << "\nplan "
              << plan.breakdown.str() << "\nreal " << real.breakdown.str();
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 378);  // 7 models x 54
}

// One real fp32 step of any objective through the step runner on the CPU, with every model the
// run holds (ModelSet: the policy's weights, gradients and optimizer state, the reference, the
// value model), on the planner's own micro-batch with random token ids and rewards.
// `mem` as the planner takes it: weights, gradients, AdamW (with fp32 master weights for bf16).
Measured real_objective_step(const ModelConfig& cfg, const ObjectiveSetup& s,
                             const ExecConfig& exec, const StepBatches& planned,
                             const StepMemoryOptions& mem) {
  Ledger ledger, host_ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool(ledger, be);
  Pool host_pool(host_ledger, be.host_memory());
  if (exec.offload.any()) pool.set_host(&host_pool);
  const AdamWConfig optim;
  // Data-parallel ranks (ZeRO): rank 0 on a communicator that moves nothing, as the plan.
  ShapeOnlyCommunicator ranks(0, mem.ranks);
  ModelSet models(s, cfg, pool, be,
                  ModelSetOptions{.param_dtype = mem.param_dtype,
                                  .grad_dtype = mem.grad_dtype,
                                  .optim = mem.adamw ? &optim : nullptr,
                                  .master_weights = mem.master_weights,
                                  .comm = &ranks,
                                  .zero = mem.zero,
                                  .lora = mem.lora,
                                  .offload_optimizer = exec.offload.optimizer});
  if (!models.has_lora() && models.policy().weight_hook()) {
    // ZeRO-3: drawn whole into the staging copy (outside this ledger), then sliced.
    init_parameters(*models.policy().master(), 3, InitStyle::hf);
    models.policy().weights_loaded(models.policy_weights());
  } else {
    init_parameters(models.policy_weights(), 3, InitStyle::hf);
  }
  if (models.has_lora()) init_lora(models.lora_weights(), 6, 0.05f);
  if (models.has_reference()) init_parameters(models.reference_weights(), 4, InitStyle::hf);
  if (models.has_value()) init_parameters(models.value_weights(), 5, InitStyle::hf);
  StepBatches step = planned;
  Rng rng(7, "agreement");
  for (MicroBatch& mb : step.micro) {
    for (int32_t& id : mb.batch.tokens)
      id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
    // Rollout rewards are random; labels (KTO) stay the planner's 0/1.
    if (!objective_traits(s.kind).sequence_labels)
      for (float& r : mb.rewards) r = rng.normal();
  }
  // Context parallelism: the planned rank of the group, on a communicator that moves nothing
  // (what a rank allocates does not depend on the bytes the others send it).
  const int64_t T = step.micro.front().batch.size();
  ShapeOnlyCommunicator group(busiest_rank(T, mem.context_parallel), mem.context_parallel);
  StepRunner(s, models.views(), be, pool, exec, ranks,
             StepRunnerOptions{.context = mem.context_parallel > 1 ? &group : nullptr})
      .run(step);
  return Measured{ledger.peak(), ledger.peak_breakdown(), host_ledger.peak(),
                  host_ledger.peak_breakdown()};
}

// The planned peak and breakdown of one objective step equal the real CPU step's, to the byte.
void expect_plan_is_the_step(const ModelConfig& model, const ObjectiveSetup& s, const ExecConfig& e,
                             const StepBatches& step, const StepMemoryOptions& mem, size_t mi,
                             int64_t T) {
  const PlannedStep plan = plan_step(model, s, e, step, mem);
  const Measured real = real_objective_step(model, s, e, step, mem);
  const std::string what = std::string(objective_name(s.kind)) + " model " + std::to_string(mi) +
                           " " + mode_name(e) + " T=" + std::to_string(T);
  ASSERT_EQ(plan.peak_bytes, real.peak)
      << what << " chunks " << e.layer_chunk << "/" << e.head_chunk;
  ASSERT_EQ(plan.breakdown.bytes, real.breakdown.bytes)
      << what << "\nplan " << plan.breakdown.str() << "\nreal " << real.breakdown.str();
  ASSERT_EQ(plan.host_peak_bytes, real.host_peak) << what << " (host)";
  ASSERT_EQ(plan.host_breakdown.bytes, real.host_breakdown.bytes)
      << what << " (host)\nplan " << plan.host_breakdown.str() << "\nreal "
      << real.host_breakdown.str();
}

// Offloaded checkpoints (and the optimizer): both spaces' peaks and breakdowns equal a real
// step's, for every objective of the registry, fp32 and bf16, LoRA, in every layer mode.
TEST_F(PlanAgreement, EveryObjectiveWithOffloadEqualsARealStepInBothSpaces) {
  const ModelConfig model = preset_config("tiny-qwen3");
  const LoraConfig lora{.r = 2};
  int cases = 0;
  for (const auto& name : objective_names()) {
    ObjectiveSetup s;
    s.kind = name.value;
    s.grpo.beta = 0.04;
    const int64_t T = 41;
    const StepBatches step = planning_step(s.kind, 3, T);
    for (ExecConfig e : {mode("base", 0, 0), mode("checkpoint", 0, 0), mode("stream", 7, 5),
                         mode("stream", T, T)}) {
      e.offload.checkpoints = true;
      // fp32 + AdamW, bf16, LoRA; then offload: optimizer with fp32 + AdamW, bf16 + AdamW
      // (fp32 master weights), LoRA + AdamW (the adapters' state stays on the device).
      for (int variant = 0; variant < 6; ++variant) {
        StepMemoryOptions mem{.param_dtype = DType::F32, .adamw = variant == 0 || variant >= 3};
        if (variant == 1 || variant == 4) {
          mem.param_dtype = DType::BF16;
          e.act_dtype = DType::BF16;
        } else {
          e.act_dtype = DType::F32;
        }
        if (variant == 2 || variant == 5) mem.lora = &lora;
        e.offload.residual_grad = variant == 1;  // bf16: the residual-stream gradient too
        e.offload.optimizer = variant >= 3;
        ASSERT_NO_FATAL_FAILURE(expect_plan_is_the_step(model, s, e, step, mem, 0, T));
        ASSERT_GT(plan_step(model, s, e, step, mem).host_peak_bytes, 0);
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, static_cast<int>(objective_names().size()) * 4 * 6);
}

// Context parallelism (plan --cp): the planned rank's peaks and breakdowns equal a real rank's
// step, for every objective, cp 2 and 4, in the modes it runs, fp32 + AdamW, bf16, LoRA and
// offloaded checkpoints. T = 48: every rank owns the same rows (the real run's stand-in
// communicator hands a rank its own rows back as the others').
TEST_F(PlanAgreement, EveryObjectiveWithContextParallelismEqualsARealRanksStep) {
  const ModelConfig model = preset_config("tiny-qwen3");
  const LoraConfig lora{.r = 2};
  const int64_t T = 48;
  int cases = 0;
  for (const auto& name : objective_names()) {
    ObjectiveSetup s;
    s.kind = name.value;
    s.grpo.beta = 0.04;
    const StepBatches step = planning_step(s.kind, 3, T);
    for (int cp : {2, 4})
      for (ExecConfig e : {mode("checkpoint", 0, 0), mode("stream", 5, 7), mode("stream", T, T),
                           mode("recompute+chunked", 0, 9)})
        for (int variant = 0; variant < 4; ++variant) {  // fp32 + AdamW, bf16, LoRA, offload
          StepMemoryOptions mem{.param_dtype = DType::F32, .adamw = variant == 0};
          mem.context_parallel = cp;
          e.act_dtype = variant == 1 ? DType::BF16 : DType::F32;
          if (variant == 1) mem.param_dtype = DType::BF16;
          if (variant == 2) mem.lora = &lora;
          e.offload.checkpoints = e.offload.residual_grad = variant == 3;
          ASSERT_NO_FATAL_FAILURE(expect_plan_is_the_step(model, s, e, step, mem, cp, T));
          ++cases;
        }
  }
  EXPECT_EQ(cases, static_cast<int>(objective_names().size()) * 2 * 4 * 4);
}

// ZeRO-3 (plan --ranks R --zero 3): the planned rank's peak and breakdown equal a real rank's
// SFT step, its weights its slices plus the groups gathered at that moment, for 2 and 4 ranks,
// fp32 + AdamW and bf16 + AdamW (fp32 master slices), untied and tied heads, in every layer mode;
// then with context parallelism (cp 2 of 2 and of 4 ranks), offloaded checkpoints and the
// optimizer in host memory (both spaces).
TEST_F(PlanAgreement, ZeroThreeEqualsARealRanksStep) {
  const ObjectiveSetup s;  // sft
  const int64_t T = 48;
  const StepBatches step = planning_step(s.kind, 3, T);
  int cases = 0;
  for (const ModelConfig& model : {preset_config("tiny-qwen3"), tied_qwen3_with_bias()})
    for (int ranks : {2, 4})
      for (ExecConfig e : {mode("base", 0, 0), mode("checkpoint", 0, 0), mode("stream", 7, 5),
                           mode("stream", T, T)})
        for (DType dt : {DType::F32, DType::BF16}) {
          StepMemoryOptions mem{.param_dtype = dt, .adamw = true};
          e.act_dtype = dt;
          mem.ranks = ranks;
          mem.zero = 3;
          ASSERT_NO_FATAL_FAILURE(expect_plan_is_the_step(model, s, e, step, mem, 0, T));
          ++cases;
        }
  EXPECT_EQ(cases, 2 * 2 * 4 * 2);
  const ModelConfig model = preset_config("tiny-qwen3");
  for (int ranks : {2, 4})
    for (ExecConfig e : {mode("checkpoint", 0, 0), mode("stream", 5, 7)})
      for (int offload : {0, 1, 2}) {  // none, activations, activations and the optimizer
        StepMemoryOptions mem{.param_dtype = DType::BF16, .adamw = true};
        e.act_dtype = DType::BF16;
        e.offload.checkpoints = e.offload.residual_grad = offload > 0;
        e.offload.optimizer = offload == 2;
        mem.ranks = ranks;
        mem.context_parallel = 2;
        mem.zero = 3;
        ASSERT_NO_FATAL_FAILURE(expect_plan_is_the_step(model, s, e, step, mem, 2, T));
      }
  // The optimizer in host memory without context parallelism, fp32 and bf16.
  for (DType dt : {DType::F32, DType::BF16}) {
    ExecConfig e = mode("stream", 5, 7);
    e.act_dtype = dt;
    e.offload.optimizer = true;
    StepMemoryOptions mem{.param_dtype = dt, .adamw = true};
    mem.ranks = 4;
    mem.zero = 3;
    ASSERT_NO_FATAL_FAILURE(expect_plan_is_the_step(model, s, e, step, mem, 4, T));
  }
}

// Each rank keeps the layer checkpoints of its own rows only: 1/cp of one process's bytes.
TEST_F(PlanAgreement, ContextParallelCheckpointsFallAsOneOverCp) {
  const ModelConfig model = preset_config("tiny-qwen3");
  const int64_t T = 4096;
  const StepBatches step = planning_step(ObjectiveKind::sft, 3, T);
  StepMemoryOptions mem{.param_dtype = DType::F32};
  const ExecConfig e = mode("checkpoint", 0, 0);
  const int64_t one = plan_step(model, ObjectiveSetup{}, e, step, mem)
                          .breakdown.bytes[static_cast<size_t>(Category::checkpoints)];
  ASSERT_GT(one, 0);
  for (int cp : {2, 4, 8}) {
    mem.context_parallel = cp;
    const int64_t mine = plan_step(model, ObjectiveSetup{}, e, step, mem)
                             .breakdown.bytes[static_cast<size_t>(Category::checkpoints)];
    EXPECT_EQ(mine * cp, one) << "cp " << cp;
  }
}

TEST_F(PlanAgreement, EveryObjectiveEqualsARealStepExactly) {
  const std::vector<ModelConfig> models = {preset_config("tiny-qwen3"), tied_qwen3_with_bias()};
  int cases = 0;
  for (const ObjectiveTraits* row : all_objectives()) {
    const ObjectiveKind kind = row->kind;
    ObjectiveSetup s;
    s.kind = kind;
    s.grpo.beta = 0.04;  // with its reference model
    s.grpo.entropy_coef = 0.01;
    for (size_t mi = 0; mi < models.size(); ++mi) {
      for (int64_t T : {12, 41}) {
        const StepBatches step = planning_step(kind, 3, T);
        for (const ExecConfig& e :
             {mode("base", 0, 0), mode("checkpoint", 0, 0), mode("stream", 1, 1),
              mode("stream", 7, 5), mode("stream", T, T), mode("recompute+chunked", 0, 9),
              mode("stream+full", 6, 0)}) {
          const bool adamw = (cases % 2) == 0;
          const StepMemoryOptions mem{.param_dtype = DType::F32, .adamw = adamw};
          ASSERT_NO_FATAL_FAILURE(expect_plan_is_the_step(models[mi], s, e, step, mem, mi, T));
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, static_cast<int>(all_objectives().size()) * 2 * 2 * 7);
}

// Mixed precision (`precision: bf16`): bf16 weights, activations, checkpoints, K/V and head
// blocks; gradients in fp32 (the trainer's default) or bf16; AdamW with fp32 moments and fp32
// master weights. The plan `plan --precision bf16` prints is this step, to the byte.
TEST_F(PlanAgreement, EveryObjectiveInBf16EqualsARealBf16StepExactly) {
  const std::vector<ModelConfig> models = {preset_config("tiny-qwen3"), tied_qwen3_with_bias(),
                                           mqa_llama()};
  int cases = 0;
  for (const ObjectiveTraits* row : all_objectives()) {
    const ObjectiveKind kind = row->kind;
    ObjectiveSetup s;
    s.kind = kind;
    s.grpo.beta = 0.04;
    s.grpo.entropy_coef = 0.01;
    for (size_t mi = 0; mi < models.size(); ++mi) {
      for (int64_t T : {12, 41}) {
        const StepBatches step = planning_step(kind, 3, T);
        for (ExecConfig e : {mode("base", 0, 0), mode("checkpoint", 0, 0), mode("stream", 1, 1),
                             mode("stream", 7, 5), mode("stream", T, T),
                             mode("recompute+chunked", 0, 9), mode("stream+full", 6, 0)}) {
          e.act_dtype = DType::BF16;
          const StepMemoryOptions mem{.param_dtype = DType::BF16,
                                      .grad_dtype = (cases % 2) == 0 ? DType::F32 : DType::BF16,
                                      .adamw = (cases % 3) != 2};
          ASSERT_NO_FATAL_FAILURE(expect_plan_is_the_step(models[mi], s, e, step, mem, mi, T));
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, static_cast<int>(all_objectives().size()) * 3 * 2 * 7);
}

// LoRA (`plan --lora-r`): frozen weights (no gradients, moments or master weights for them),
// fp32 adapters with their gradients and moments, no reference model (the base with the adapters
// off). The plan is the real step, to the byte, in fp32 and bf16.
TEST_F(PlanAgreement, EveryObjectiveWithLoraEqualsARealStepExactly) {
  const std::vector<ModelConfig> models = {preset_config("tiny-qwen3"), tied_qwen3_with_bias()};
  LoraConfig lora;
  lora.r = 4;
  lora.target_modules = {"all-linear"};
  int cases = 0;
  for (const ObjectiveTraits* row : all_objectives()) {
    const ObjectiveKind kind = row->kind;
    ObjectiveSetup s;
    s.kind = kind;
    s.grpo.beta = 0.04;  // a reference pass: the base with the adapters off
    for (size_t mi = 0; mi < models.size(); ++mi) {
      for (int64_t T : {12, 41}) {
        const StepBatches step = planning_step(kind, 3, T);
        for (ExecConfig e : {mode("base", 0, 0), mode("checkpoint", 0, 0), mode("stream", 1, 1),
                             mode("stream", 7, 5), mode("recompute+chunked", 0, 9)}) {
          const bool bf16 = (cases % 2) == 1;
          if (bf16) e.act_dtype = DType::BF16;
          const StepMemoryOptions mem{.param_dtype = bf16 ? DType::BF16 : DType::F32,
                                      .adamw = (cases % 3) != 2,
                                      .lora = &lora};
          ASSERT_NO_FATAL_FAILURE(expect_plan_is_the_step(models[mi], s, e, step, mem, mi, T));
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, static_cast<int>(all_objectives().size()) * 2 * 2 * 5);
}

// A mid-sized model where activations dominate (tens of MB), through the planner's own entry
// points (one sequence, PlanSetup, auto chunks) rather than plan_sft_step.
ModelConfig mid_qwen3() {
  ModelConfig c = preset_config("tiny-qwen3");
  c.hidden_size = 128;
  c.intermediate_size = 384;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.vocab_size = 1024;
  c.validate("mid_qwen3");
  return c;
}

TEST_F(PlanAgreement, PlannedBudgetIsExactlyWhatARealStepNeeds) {
  const ModelConfig cfg = mid_qwen3();
  PlanSetup s;
  s.cfg = cfg;
  s.param_dtype = s.act_dtype = DType::F32;
  const AutoChunkLimits limits{.min_layer = 16, .min_head = 8, .align = 16};
  for (const char* name : {"base", "checkpoint", "stream", "recompute+chunked"}) {
    const ExecConfig m = parse_mode(name);
    const int64_t T = 300;
    // A budget between the smallest and the largest chunks' peaks, so auto has to choose.
    s.budget = 0;
    const int64_t small = plan_at(s, mode(name, 16, 8), T).peak_bytes;
    const int64_t large = plan_at(s, mode(name, T, T), T).peak_bytes;
    s.budget = small + (large - small) / 3;
    const ChunkedPlan p = choose_chunks(s, m, T, ChunkRequest{}, limits);
    ASSERT_TRUE(p.fits) << name;
    Batch batch;
    batch.tokens.assign(static_cast<size_t>(T), 5);
    batch.seq_lens = {T};
    const ExecConfig chosen = mode(name, p.layer_chunk, p.head_chunk);
    EXPECT_EQ(real_step(cfg, chosen, batch, false).peak, p.step.peak_bytes) << name;
    // The real step runs under a budget equal to the planned peak, and fails one byte below.
    EXPECT_NO_THROW(real_step(cfg, chosen, batch, false, p.step.peak_bytes)) << name;
    EXPECT_THROW(real_step(cfg, chosen, batch, false, p.step.peak_bytes - 1), OutOfMemoryError)
        << name;
    // The next larger chunk the search could have taken does not fit.
    if (m.layers == LayerMode::stream && p.layer_chunk < T) {
      EXPECT_GT(plan_at(s, mode(name, p.layer_chunk + limits.align, limits.min_head), T).peak_bytes,
                s.budget);
    }
  }
}

}  // namespace
}  // namespace sbp

// bench --profile's accounting (backend/op_profile.h): a profiled step's families add up to no
// more than the step's wall time, every kernel family a step runs is seen, the GEMM and
// attention FLOPs are exactly the backend's FLOP counter, the LM head's GEMMs are told apart
// from the layers' (the head's FLOPs are exactly 3 GEMMs of 2*T*d*V), an op called from inside
// another op is counted once, and a detached profile records nothing.
#include <gtest/gtest.h>

#include <chrono>

#include "backend/cpu/cpu_backend.h"
#include "check/random_batches.h"
#include "step/model_set.h"
#include "step/step_runner.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Profiled {
  OpProfile profile;
  double step_s = 0;
  int64_t flops = 0;
};

Profiled profiled_step(const ModelConfig& cfg, const ExecConfig& exec, int64_t T) {
  Ledger ledger;
  const std::unique_ptr<Backend> be = test::backend();
  Pool pool(ledger, *be);
  ObjectiveSetup s;  // sft
  ModelSet models(s, cfg, pool, *be, ModelSetOptions{});
  init_parameters(models.policy_weights(), 1, InitStyle::test, 0.2f);
  const MicroBatch mb = cli::random_micro_batch(
      ObjectiveKind::sft, 1, cli::random_batch(cfg.vocab_size, T, 2, 3, false), 3);
  Profiled p;
  be->reset_flops();
  be->set_profile(&p.profile);
  const auto t0 = std::chrono::steady_clock::now();
  StepRunner(s, models.views(), *be, pool, exec).run(StepBatches::whole({mb}));
  p.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  be->set_profile(nullptr);
  p.flops = be->flops();
  return p;
}

TEST(OpProfile, AccountsForTheStep) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  const int64_t T = 48;
  for (const char* mode : {"checkpoint", "stream"}) {
    ExecConfig exec = parse_mode(mode);
    exec.layer_chunk = 16;
    exec.head_chunk = 20;  // stream: blocks of 20, 20, 8 rows
    const Profiled p = profiled_step(cfg, exec, T);
    const OpProfile& prof = p.profile;
    EXPECT_LE(prof.seconds(), p.step_s) << mode;
    for (OpFamily f : {OpFamily::layer_gemm, OpFamily::head_gemm, OpFamily::attention_forward,
                       OpFamily::attention_backward, OpFamily::norm, OpFamily::rope, OpFamily::glu,
                       OpFamily::head_softmax, OpFamily::embedding}) {
      EXPECT_GT(prof[f].calls, 0) << mode << " " << op_family_name(f);
      EXPECT_GT(prof[f].bytes, 0) << mode << " " << op_family_name(f);
    }
    int64_t counted = 0;
    for (int f = 0; f < kNumOpFamilies; ++f) {
      const OpFamily fam = static_cast<OpFamily>(f);
      if (!op_family_counts_flops(fam)) {
        EXPECT_EQ(prof[fam].flops, 0) << op_family_name(fam);
      }
      counted += prof[fam].flops;
    }
    EXPECT_EQ(counted, p.flops) << mode;
    // logits = hf W^T, dhf = dlogits W, dW += dlogits^T hf: 3 GEMMs of 2 T d V, nothing else.
    EXPECT_EQ(prof[OpFamily::head_gemm].flops, 3 * 2 * T * cfg.hidden_size * cfg.vocab_size)
        << mode;
    const int64_t hc = exec.head_chunk_for(T);  // checkpoint: one block of T rows
    EXPECT_EQ(prof[OpFamily::head_gemm].calls, 3 * ((T + hc - 1) / hc)) << mode;
  }
}

TEST(OpProfile, CountsAnOpOnceAndNothingWhenDetached) {
  const std::unique_ptr<Backend> be = test::backend();
  Ledger ledger;
  Pool pool(ledger, *be);
  Buffer C = pool.allocate(Category::other, DType::F32, {2, 3});  // (2, 3)
  Buffer A = pool.allocate(Category::other, DType::F32, {2, 0});  // (2, 0)
  Buffer B = pool.allocate(Category::other, DType::F32, {0, 3});  // (0, 3)
  OpProfile prof;
  be->set_profile(&prof);
  {
    const ProfileRegion head(be->profile(), OpRegion::head);
    // K = 0: the CPU backend fills C from inside its gemm; that fill is part of the gemm.
    be->gemm(C.view(), A.view(), false, B.view(), false, 1.0f, 0.0f);
  }
  EXPECT_EQ(prof.region(), OpRegion::layers);  // restored
  be->fill(C.view(), 1.0f);
  EXPECT_EQ(prof[OpFamily::head_gemm].calls, 1);
  EXPECT_EQ(prof[OpFamily::layer_gemm].calls, 0);
  EXPECT_EQ(prof[OpFamily::copy].calls, 1);
  EXPECT_EQ(prof[OpFamily::copy].bytes, 2 * 3 * 4);
  be->set_profile(nullptr);
  be->fill(C.view(), 2.0f);
  be->gemm(C.view(), A.view(), false, B.view(), false, 1.0f, 0.0f);
  EXPECT_EQ(prof[OpFamily::copy].calls, 1);
  EXPECT_EQ(prof[OpFamily::head_gemm].calls, 1);
}

// An asynchronous backend's op is timed to its completion: the profiler synchronises before
// (earlier work is not this op's) and after (a launch returns before the work is done), once
// per outermost op, and not at all without a profile.
struct SyncCountingBackend : CpuBackend {
  int syncs = 0;

 protected:
  void synchronize_impl() override { ++syncs; }
};

TEST(OpProfile, SynchronisesAnAsynchronousBackend) {
  SyncCountingBackend be;
  Ledger ledger;
  Pool pool(ledger, be);
  Buffer C = pool.allocate(Category::other, DType::F32, {2, 3});  // (2, 3)
  Buffer A = pool.allocate(Category::other, DType::F32, {2, 0});  // (2, 0)
  Buffer B = pool.allocate(Category::other, DType::F32, {0, 3});  // (0, 3)
  be.fill(C.view(), 1.0f);
  EXPECT_EQ(be.syncs, 0);
  OpProfile prof;
  be.set_profile(&prof);
  be.fill(C.view(), 1.0f);
  EXPECT_EQ(be.syncs, 2);
  be.gemm(C.view(), A.view(), false, B.view(), false, 1.0f, 0.0f);  // its inner fill: no more
  EXPECT_EQ(be.syncs, 4);
  be.set_profile(nullptr);
  be.fill(C.view(), 2.0f);
  EXPECT_EQ(be.syncs, 4);
}

}  // namespace
}  // namespace sbp

// The sequence-level objectives (DPO, ORPO, KTO) take one of two routes through the engine's head
// (objective/head_route.h SequenceRoute): on one process, the pre-pass's log-probs stay on the
// device and the backend computes every row's gradient from them (objective_kernels.h's
// sequence_token_grads), the host seeing the pre-pass only afterwards; with a context group, or
// where an objective offers no formula, the host reads the pre-pass first and writes the gradients
// (its host_chunks()). Both must give the same bits: the gradients, the loss and every statistic,
// in several blocks and in one, with the reads at once and left for the step's end (DeferredReads).
// And GRPO's reference read on the device gives what its rows give.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "check/random_batches.h"
#include "engine/engine.h"
#include "objective/dpo.h"
#include "objective/grpo.h"
#include "objective/kto.h"
#include "objective/orpo.h"
#include "objective/simpo.h"
#include "step/step_runner.h"
#include "support/host_route.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Fixture {
  ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool{ledger, be};
  ParameterSet w, ref_w;
  Fixture() {
    w = ParameterSet(cfg, pool, Category::weights, DType::F32, false);
    init_parameters(w, 4, InitStyle::test, 0.2f);
    ref_w = cli::make_reference_weights(cfg, w, pool, 0.05f, 3);
  }
  ParameterSet zeros() { return ParameterSet(cfg, pool, Category::grads, DType::F32, true); }
};

TEST(SequenceObjectivePaths, DeviceAndHostRoutesGiveTheSameBits) {
  Fixture f;
  const int64_t T = 45;
  const Batch pairs = cli::random_objective_batch(ObjectiveKind::dpo, 0, f.cfg.vocab_size, T, 6, 8);
  const Batch unpaired =
      cli::random_objective_batch(ObjectiveKind::kto, 0, f.cfg.vocab_size, T, 4, 8);
  const std::vector<float> labels = {1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 0.0f, 1.0f, 0.0f};
  struct Case {
    std::string name;
    const Batch* batch;
    std::function<std::unique_ptr<Objective>(const std::vector<float>& ref)> make;
  };
  std::vector<Case> cases;
  for (DpoLoss lt : {DpoLoss::sigmoid, DpoLoss::ipo, DpoLoss::hinge}) {
    DpoConfig cfg;
    cfg.loss_type = lt;
    cfg.beta = 0.5;
    cfg.label_smoothing = lt == DpoLoss::sigmoid ? 0.1 : 0.0;
    cases.push_back({std::string("dpo ") + dpo_loss_name(lt), &pairs,
                     [&pairs, cfg](const std::vector<float>& ref) {
                       return std::make_unique<DpoObjective>(pairs, ref, cfg, 5.0);
                     }});
  }
  cases.push_back({"orpo", &pairs, [&pairs](const std::vector<float>&) {
                     return std::make_unique<OrpoObjective>(pairs, OrpoConfig{.beta = 0.25}, 5.0,
                                                            60.0);
                   }});
  cases.push_back({"simpo", &pairs, [&pairs](const std::vector<float>&) {
                     return std::make_unique<SimpoObjective>(
                         pairs,
                         SimpoConfig{.beta = 2.0, .gamma = 1.0, .label_smoothing = 0.1,
                                     .cpo_alpha = 0.5},
                         5.0, 60.0);
                   }});
  cases.push_back(
      {"kto", &unpaired, [&unpaired, &labels](const std::vector<float>& ref) {
         const std::vector<float> l(
             labels.begin(), labels.begin() + static_cast<int64_t>(unpaired.seq_lens.size()));
         return std::make_unique<KtoObjective>(
             unpaired, ref, l, 0.125,
             KtoConfig{.beta = 0.5, .desirable_weight = 1.0, .undesirable_weight = 1.5}, 9.0);
       }});
  for (const Case& c : cases) {
    const std::vector<float> ref =
        Engine(f.cfg, f.ref_w, f.be, f.pool, parse_mode("stream")).score(*c.batch).logp;
    for (int64_t head_chunk : {int64_t{7}, T}) {  // several blocks; one block
      for (bool deferred : {false, true}) {
        const std::string where = c.name + " head_chunk " + std::to_string(head_chunk) +
                                  (deferred ? " deferred" : " at once");
        ExecConfig exec = parse_mode("stream");
        exec.layer_chunk = 16;
        exec.head_chunk = head_chunk;
        Engine e(f.cfg, f.w, f.be, f.pool, exec);
        const std::unique_ptr<Objective> device = c.make(ref), host = c.make(ref);
        ASSERT_TRUE(std::holds_alternative<SequenceRoute>(device->route())) << where;
        test::OnTheHost host_route(*host);
        ParameterSet gd = f.zeros(), gh = f.zeros();
        DeferredReads later;
        e.forward_backward(*c.batch, *device, gd, nullptr, deferred ? &later : nullptr);
        EXPECT_EQ(later.empty(), !deferred) << where;
        f.be.finish_reads();  // what the step runner does before its reads (step_runner.h)
        later.run();
        e.forward_backward(*c.batch, host_route, gh);
        EXPECT_EQ(device->loss(), host->loss()) << where;
        EXPECT_NE(device->loss(), 0.0) << where;
        EXPECT_EQ(device->metrics(), host->metrics()) << where;
        for (size_t i = 0; i < gd.size(); ++i)
          EXPECT_EQ(download_f32(gd.tensor(i)), download_f32(gh.tensor(i)))
              << where << " " << gd.name(i);
      }
    }
  }
}

// GRPO with a KL term reads its reference's log-probs on the device where their forward left them
// there (PolicyFormula::reference), instead of from its rows: the same bits.
TEST(SequenceObjectivePaths, GrpoReferenceOnTheDeviceGivesTheSameBits) {
  Fixture f;
  const int64_t T = 48;
  const Batch batch =
      cli::random_objective_batch(ObjectiveKind::grpo, 4, f.cfg.vocab_size, T, 4, 8);
  const std::vector<float> adv = {0.5f, -1.25f, 1.0f, -0.25f};
  GrpoConfig cfg;
  cfg.beta = 0.04;
  cfg.entropy_coef = 0.01;
  const std::vector<float> ref =
      Engine(f.cfg, f.ref_w, f.be, f.pool, parse_mode("stream")).score(batch).logp;
  Buffer ref_device = f.pool.allocate(Category::other, DType::F32, {T});  // (T)
  upload_f32(ref_device.view(), ref);
  ReferenceLogp on_device = ReferenceLogp::on_host(ref);
  on_device.device = ref_device.view();
  ExecConfig exec = parse_mode("stream");
  exec.head_chunk = 7;
  Engine e(f.cfg, f.w, f.be, f.pool, exec);
  GrpoObjective rows_route(batch, adv, cfg, {}, ref), device_route(batch, adv, cfg, {}, on_device);
  ASSERT_NE(std::get<PolicyFormula>(device_route.route()).reference, nullptr);
  ASSERT_EQ(std::get<PolicyFormula>(rows_route.route()).reference, nullptr);
  ParameterSet gr = f.zeros(), gd = f.zeros();
  e.forward_backward(batch, rows_route, gr);
  e.forward_backward(batch, device_route, gd);
  EXPECT_EQ(rows_route.loss(), device_route.loss());
  EXPECT_NE(device_route.metrics().at("kl"), 0.0);
  EXPECT_EQ(rows_route.metrics(), device_route.metrics());
  for (size_t i = 0; i < gr.size(); ++i)
    EXPECT_EQ(download_f32(gr.tensor(i)), download_f32(gd.tensor(i))) << gr.name(i);
}

// KTO's KL estimate left on the device for the gradient passes (one process, kto_step.cpp) and
// the estimate summed on the host first (what several ranks do; a shape-only communicator of 2
// ranks, whose sums are the identity, takes that route with one process's numbers): the same
// loss, statistics and gradient bits, over two micro-batches.
TEST(SequenceObjectivePaths, KtoStepKlOnTheDeviceGivesTheHostRoutesBits) {
  Fixture f;
  ObjectiveSetup kto;
  kto.kind = ObjectiveKind::kto;
  kto.kto.beta = 0.5;
  std::vector<MicroBatch> micro(2);
  for (size_t i = 0; i < micro.size(); ++i) {
    micro[i].batch = cli::random_objective_batch(ObjectiveKind::kto, 0, f.cfg.vocab_size, 40,
                                                 3 + static_cast<int64_t>(i), 20 + i);
    for (size_t s = 0; s < micro[i].batch.seq_lens.size(); ++s)
      micro[i].rewards.push_back((s + i) % 2 == 0 ? 1.0f : 0.0f);
  }
  ExecConfig exec = parse_mode("stream");
  exec.head_chunk = 7;
  ShapeOnlyCommunicator two_ranks(0, 2);
  StepResult result[2];
  std::vector<std::vector<float>> grads[2];
  for (int route = 0; route < 2; ++route) {  // device, host
    DataParallel dp(single_process(), 0, f.cfg, ModelHead::lm, f.pool, f.be, nullptr);
    StepModels models;
    models.policy = {{&f.cfg, &f.w}, &dp};
    models.reference = {&f.cfg, &f.ref_w};
    Communicator& comm = route == 0 ? single_process() : static_cast<Communicator&>(two_ranks);
    result[route] =
        StepRunner(kto, models, f.be, f.pool, exec, comm).run(StepBatches::whole(micro));
    for (size_t i = 0; i < dp.grads().size(); ++i)
      grads[route].push_back(download_f32(dp.grads().tensor(i)));
  }
  EXPECT_NE(result[0].metrics.at("kl"), 0.0);  // an estimate that is not clamped away
  EXPECT_EQ(result[0].loss, result[1].loss);
  EXPECT_EQ(result[0].metrics, result[1].metrics);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_EQ(grads[0][i], grads[1][i]) << i;
}

}  // namespace
}  // namespace sbp

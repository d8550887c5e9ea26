// Every head route (objective/head_route.h) against its host version (host_chunks): the engine's
// route, whose gradients the backend's formula kernels write (ConstantGrads, PolicyFormula,
// ValueFormula, SequenceRoute), and the same objective with the host writing every block's
// gradients from the same core/*_terms.h functions must give the same bits: the weight
// gradients, the loss and every statistic, in several head blocks and in one, with the
// completion's read at once and left for the step's end. On the CPU backend here, on the
// emulated CUDA backend under scripts/test-emu.sh (STREAMBP_TEST_BACKEND=cuda).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "check/random_batches.h"
#include "engine/engine.h"
#include "model/value_model_io.h"
#include "objective/dpo.h"
#include "objective/grpo.h"
#include "objective/kto.h"
#include "objective/orpo.h"
#include "objective/ppo.h"
#include "objective/sft.h"
#include "objective/simpo.h"
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
  ParameterSet w, values;
  Fixture() {
    w = ParameterSet(cfg, pool, Category::weights, DType::F32, false);
    init_parameters(w, 4, InitStyle::test, 0.2f);
    values = make_value_parameters(cfg, pool, Category::weights, DType::F32, false);
    init_parameters(values, 5, InitStyle::test, 0.2f);
  }
};

std::vector<float> ramp(int64_t n, float scale, float offset) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = offset + scale * static_cast<float>((i * 7) % 11 - 5);
  return v;
}

struct Case {
  std::string name;
  size_t route;  // the HeadRoute alternative the objective must name
  Batch batch;
  bool value_model = false;
  std::function<std::unique_ptr<Objective>(const Batch&, const std::vector<float>& ref)> make;
};

std::vector<Case> cases(int64_t vocab, int64_t T) {
  std::vector<Case> out;
  const Batch sft = cli::random_objective_batch(ObjectiveKind::sft, 0, vocab, T, 3, 11);
  const Batch pairs = cli::random_objective_batch(ObjectiveKind::dpo, 0, vocab, T, 6, 12);
  const Batch unpaired = cli::random_objective_batch(ObjectiveKind::kto, 0, vocab, T, 4, 13);
  const Batch groups = cli::random_objective_batch(ObjectiveKind::grpo, 4, vocab, T, 4, 14);
  const Batch rollouts = cli::random_objective_batch(ObjectiveKind::ppo, 0, vocab, T, 3, 15);
  out.push_back({"sft", 1, sft, false, [](const Batch& b, const std::vector<float>&) {
                   return std::make_unique<SftObjective>(b, 17.0);
                 }});
  for (double beta : {0.0, 0.04}) {
    out.push_back({"grpo beta " + std::to_string(beta), 2, groups, false,
                   [beta](const Batch& b, const std::vector<float>& ref) {
                     GrpoConfig cfg;
                     cfg.beta = beta;
                     cfg.entropy_coef = beta == 0.0 ? 0.0 : 0.01;
                     cfg.loss_type = beta == 0.0 ? GrpoLoss::grpo : GrpoLoss::dapo;
                     const std::vector<float> adv = {0.5f, -1.25f, 1.0f, -0.25f};
                     return std::make_unique<GrpoObjective>(
                         b, adv, cfg, ramp(b.size(), 0.05f, -1.0f),
                         beta == 0.0 ? std::vector<float>() : ref);
                   }});
  }
  out.push_back({"ppo policy", 2, rollouts, false, [](const Batch& b, const std::vector<float>&) {
                   PpoConfig cfg;
                   cfg.entropy_coef = 0.02;
                   return std::make_unique<PpoPolicyObjective>(
                       b, ramp(b.size(), 0.3f, 0.1f), ramp(b.size(), 0.05f, -1.2f), cfg);
                 }});
  out.push_back({"ppo value", 3, rollouts, true, [](const Batch& b, const std::vector<float>&) {
                   PpoConfig cfg;
                   cfg.cliprange_value = 0.05;
                   return std::make_unique<PpoValueObjective>(b, ramp(b.size(), 0.2f, 0.3f),
                                                              ramp(b.size(), 0.01f, 0.0f), cfg);
                 }});
  out.push_back({"dpo", 4, pairs, false, [](const Batch& b, const std::vector<float>& ref) {
                   DpoConfig cfg;
                   cfg.beta = 0.5;
                   cfg.label_smoothing = 0.1;
                   return std::make_unique<DpoObjective>(b, ref, cfg, 4.0);
                 }});
  out.push_back({"orpo", 4, pairs, false, [](const Batch& b, const std::vector<float>&) {
                   return std::make_unique<OrpoObjective>(b, OrpoConfig{.beta = 0.25}, 5.0, 60.0);
                 }});
  out.push_back({"simpo", 4, pairs, false, [](const Batch& b, const std::vector<float>&) {
                   return std::make_unique<SimpoObjective>(
                       b, SimpoConfig{.beta = 2.0, .gamma = 1.0, .cpo_alpha = 0.5}, 5.0, 60.0);
                 }});
  out.push_back({"kto", 4, unpaired, false, [](const Batch& b, const std::vector<float>& ref) {
                   std::vector<float> labels;
                   for (size_t s = 0; s < b.seq_lens.size(); ++s)
                     labels.push_back(s % 3 == 1 ? 0.0f : 1.0f);
                   return std::make_unique<KtoObjective>(
                       b, ref, labels, 0.125,
                       KtoConfig{.beta = 0.5, .desirable_weight = 1.0, .undesirable_weight = 1.5},
                       9.0);
                 }});
  return out;
}

TEST(HeadRoute, EveryRouteGivesItsHostVersionsBits) {
  Fixture f;
  const int64_t T = 45;
  for (const Case& c : cases(f.cfg.vocab_size, T)) {
    const ParameterSet& weights = c.value_model ? f.values : f.w;
    // A reference's log-probs: the policy's own with noise would do; a ramp is enough here.
    const std::vector<float> ref = ramp(c.batch.size(), 0.1f, -2.0f);
    for (int64_t head_chunk : {int64_t{7}, T}) {  // several blocks; one block
      for (bool deferred : {false, true}) {
        const std::string where = c.name + " head_chunk " + std::to_string(head_chunk) +
                                  (deferred ? " deferred" : " at once");
        ExecConfig exec = parse_mode("stream");
        exec.layer_chunk = 16;
        exec.head_chunk = head_chunk;
        Engine e(f.cfg, weights, f.be, f.pool, exec);
        const std::unique_ptr<Objective> device = c.make(c.batch, ref), host = c.make(c.batch, ref);
        ASSERT_EQ(device->route().index(), c.route) << where;
        test::OnTheHost on_host(*host);
        auto zeros = [&] {
          return c.value_model
                     ? make_value_parameters(f.cfg, f.pool, Category::grads, DType::F32, true)
                     : ParameterSet(f.cfg, f.pool, Category::grads, DType::F32, true);
        };
        ParameterSet gd = zeros(), gh = zeros();
        DeferredReads later;
        e.forward_backward(c.batch, *device, gd, nullptr, deferred ? &later : nullptr);
        EXPECT_EQ(later.empty(), !deferred) << where;
        f.be.finish_reads();  // what the step runner does before its reads (step_runner.h)
        later.run();
        e.forward_backward(c.batch, on_host, gh);
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

}  // namespace
}  // namespace sbp

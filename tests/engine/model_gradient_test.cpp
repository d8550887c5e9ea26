// Whole-model checks of the base gradient itself (mode equality only compares modes with
// base): directional finite differences per parameter tensor, gradient accumulation over
// micro-batches equal to one packed batch, and forward-only log-probs equal to the training
// pass's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "check/gradcheck.h"
#include "check/random_batches.h"
#include "engine/engine.h"
#include "objective/sft.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct SmallModel {
  ModelConfig cfg;
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool{ledger, be};
  ParameterSet w;
  explicit SmallModel(const std::string& preset) : cfg(preset_config(preset)) {
    w = ParameterSet(cfg, pool, Category::weights, DType::F32, false);
    init_parameters(w, 3, InitStyle::test, 0.2f);
  }
  double loss(const Batch& b, ExecConfig exec, const ParameterSet* grads = nullptr) {
    Engine e(cfg, w, be, pool, exec);
    ParameterSet scratch;
    if (!grads) {
      scratch = ParameterSet(cfg, pool, Category::grads, DType::F32, true);
      grads = &scratch;
    }
    SftObjective obj(b, b.loss_weight_sum());
    e.forward_backward(b, obj, *grads);
    return obj.loss();
  }
};

TEST(ModelGradient, DirectionalFiniteDifferencesPerTensor) {
  // tiny-gemma3: sandwich norms, GeGLU, window 5 below the segment lengths, soft-capped logits.
  // tiny-mistral: every layer a window of 5.
  for (const char* preset :
       {"tiny-qwen3", "tiny-qwen2", "tiny-llama", "tiny-gemma3", "tiny-mistral"}) {
    SmallModel m(preset);
    const Batch b = cli::random_batch(m.cfg.vocab_size, 23, 2, 5, true);
    ParameterSet g(m.cfg, m.pool, Category::grads, DType::F32, true);
    m.loss(b, parse_mode("base"), &g);
    Rng rng(99);
    for (size_t i = 0; i < m.w.size(); ++i) {
      const Tensor& p = m.w.tensor(i);
      const std::vector<float> gi = download_f32(g.tensor(i));
      double gnorm = 0;
      for (float x : gi) gnorm += static_cast<double>(x) * x;
      gnorm = std::sqrt(gnorm);
      ASSERT_GT(gnorm, 0.0) << preset << " " << m.w.name(i) << " has a zero gradient";
      // Two directions: along the analytic gradient, and a random one.
      std::vector<double> u(static_cast<size_t>(p.numel()));
      for (int dir = 0; dir < 2; ++dir) {
        double unorm = 0;
        for (int64_t j = 0; j < p.numel(); ++j) {
          u[j] = dir == 0 ? gi[j] : rng.normal();
          unorm += u[j] * u[j];
        }
        unorm = std::sqrt(unorm);
        double analytic = 0;
        for (int64_t j = 0; j < p.numel(); ++j) {
          u[j] /= unorm;
          analytic += u[j] * gi[j];
        }
        const double h = 1e-2;
        const std::vector<float> saved = download_f32(p);
        std::vector<float> moved(saved.size());
        for (size_t j = 0; j < saved.size(); ++j)
          moved[j] = saved[j] + static_cast<float>(h * u[j]);
        upload_f32(p, moved);
        const double lp = m.loss(b, parse_mode("stream"));
        for (size_t j = 0; j < saved.size(); ++j)
          moved[j] = saved[j] - static_cast<float>(h * u[j]);
        upload_f32(p, moved);
        const double lm = m.loss(b, parse_mode("stream"));
        upload_f32(p, saved);
        const double fd = (lp - lm) / (2 * h);
        // fp32 forward: loss rounding ~1e-6 over a step of 1e-2 bounds the FD error ~1e-4
        // absolute, plus O(h^2) curvature; relative to the tensor's gradient norm.
        EXPECT_NEAR(fd, analytic, 2e-2 * gnorm + 2e-4)
            << preset << " " << m.w.name(i) << (dir == 0 ? " along the gradient" : " random dir");
      }
    }
  }
}

TEST(ModelGradient, AccumulationOverMicroBatchesEqualsOneBatch) {
  SmallModel m("tiny-qwen3");
  const Batch a = cli::random_batch(m.cfg.vocab_size, 30, 2, 1, true);
  const Batch b = cli::random_batch(m.cfg.vocab_size, 17, 3, 2, true);
  Batch ab = a;
  ab.append(b);
  const double N = a.loss_weight_sum() + b.loss_weight_sum();
  ASSERT_EQ(N, ab.loss_weight_sum());
  ParameterSet g_acc(m.cfg, m.pool, Category::grads, DType::F32, true);
  ParameterSet g_one(m.cfg, m.pool, Category::grads, DType::F32, true);
  Engine e(m.cfg, m.w, m.be, m.pool, parse_mode("stream"));
  SftObjective oa(a, N), ob(b, N), oab(ab, N);
  e.forward_backward(a, oa, g_acc);
  e.forward_backward(b, ob, g_acc);
  e.forward_backward(ab, oab, g_one);
  EXPECT_NEAR(oa.loss() + ob.loss(), oab.loss(), 1e-6 * oab.loss());
  for (size_t i = 0; i < g_one.size(); ++i)
    EXPECT_LT(test::rel_err(g_acc.tensor(i), g_one.tensor(i)), 1e-5) << g_one.name(i);
}

TEST(ModelGradient, ForwardOnlyLogprobsMatchTrainingLoss) {
  SmallModel m("tiny-llama");
  const Batch b = cli::random_batch(m.cfg.vocab_size, 29, 3, 8, true);
  for (const char* mode : {"base", "checkpoint", "stream"}) {
    ExecConfig exec = parse_mode(mode);
    exec.layer_chunk = 4;
    exec.head_chunk = 6;
    Engine e(m.cfg, m.w, m.be, m.pool, exec);
    const std::vector<float> lp = e.score(b).logp;
    const std::vector<float> w = b.target_weights();
    double loss = 0;
    for (size_t t = 0; t < lp.size(); ++t) loss -= w[t] * lp[t];
    loss /= b.loss_weight_sum();
    EXPECT_NEAR(loss, m.loss(b, exec), 1e-6 * loss) << mode;
  }
}

TEST(ModelGradient, SameInputsSameBits) {
  SmallModel m("tiny-qwen3");
  const Batch b = cli::random_batch(m.cfg.vocab_size, 40, 3, 4, false);
  ParameterSet g1(m.cfg, m.pool, Category::grads, DType::F32, true);
  ParameterSet g2(m.cfg, m.pool, Category::grads, DType::F32, true);
  ExecConfig exec = parse_mode("stream");
  exec.layer_chunk = 9;
  m.loss(b, exec, &g1);
  m.loss(b, exec, &g2);
  for (size_t i = 0; i < g1.size(); ++i)
    EXPECT_EQ(test::bytes_of(g1.tensor(i)), test::bytes_of(g2.tensor(i))) << g1.name(i);
}

TEST(ModelGradient, BudgetTooSmallGivesOutOfMemoryNotACrash) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool(ledger, be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 1, InitStyle::hf);
  ParameterSet g(cfg, pool, Category::grads, DType::F32, true);
  const Batch b = cli::random_batch(cfg.vocab_size, 256, 1, 1, false);
  // Enough for weights and grads but not for base mode's stored activations.
  ledger.set_budget(ledger.live() + 1024 * 1024);
  Engine e(cfg, w, be, pool, parse_mode("base"));
  SftObjective obj(b, b.loss_weight_sum());
  try {
    e.forward_backward(b, obj, g);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& err) {
    EXPECT_NE(std::string(err.what()).find("out of memory"), std::string::npos);
  }
  EXPECT_EQ(ledger.live(), ledger.live_breakdown()[Category::weights] +
                               ledger.live_breakdown()[Category::grads]);  // all released
  // The same budget is enough in stream mode with small chunks.
  ExecConfig s = parse_mode("stream");
  s.layer_chunk = 32;
  s.head_chunk = 32;
  Engine es(cfg, w, be, pool, s);
  SftObjective obj2(b, b.loss_weight_sum());
  EXPECT_NO_THROW(es.forward_backward(b, obj2, g));
}

}  // namespace
}  // namespace sbp

// DPO with the policy equal to the reference model: z = 0 for every pair, so the sigmoid loss
// is log 2 and its gradient is (beta / 2P) * sum over pairs of (grad NLL(rejected) -
// grad NLL(chosen)) ... written here through two plain SFT steps (one pass, no pre-pass, no
// reference model): an independent route to the same numbers. Also a directional finite
// difference of the DPO loss (policy != reference) through forward-only scoring.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "check/random_batches.h"
#include "engine/engine.h"
#include "objective/dpo.h"
#include "objective/sft.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Fixture {
  ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool{ledger, be};
  ParameterSet w;
  Batch batch;
  Fixture() {
    w = ParameterSet(cfg, pool, Category::weights, DType::F32, false);
    init_parameters(w, 4, InitStyle::test, 0.2f);
    batch =
        cli::random_objective_batch(ObjectiveKind::dpo, 0, cfg.vocab_size, 45, 6, 8);  // 3 pairs
  }
  ParameterSet zeros() { return ParameterSet(cfg, pool, Category::grads, DType::F32, true); }
};

// Loss mask restricted to the chosen (parity 0) or rejected (parity 1) segments.
Batch only(const Batch& b, int parity) {
  Batch o = b;
  int64_t row = 0;
  for (size_t s = 0; s < b.seq_lens.size(); ++s) {
    for (int64_t i = 0; i < b.seq_lens[s]; ++i, ++row)
      if (static_cast<int>(s % 2) != parity) o.loss_mask[static_cast<size_t>(row)] = 0.0f;
  }
  return o;
}

TEST(DpoIdentity, PolicyEqualsReferenceGivesLog2AndTheSftGradient) {
  Fixture f;
  const double beta = 0.1, P = 3;
  // Independent: g_c = grad of -sum_{chosen} logp (SFT with normaliser 1), same for rejected.
  ParameterSet gc = f.zeros(), gr = f.zeros();
  {
    Engine e(f.cfg, f.w, f.be, f.pool, parse_mode("base"));
    const Batch c = only(f.batch, 0), r = only(f.batch, 1);
    SftObjective oc(c, 1.0), orj(r, 1.0);
    e.forward_backward(c, oc, gc);
    e.forward_backward(r, orj, gr);
  }
  for (const char* mode : {"base", "stream", "recompute+chunked"}) {
    ExecConfig exec = parse_mode(mode);
    exec.layer_chunk = 7;
    exec.head_chunk = 5;
    // The reference model: the policy's own weights.
    const std::vector<float> ref_logp = Engine(f.cfg, f.w, f.be, f.pool, exec).score(f.batch).logp;
    DpoConfig cfg;
    cfg.beta = beta;
    DpoObjective obj(f.batch, ref_logp, cfg);
    ParameterSet g = f.zeros();
    Engine e(f.cfg, f.w, f.be, f.pool, exec);
    e.forward_backward(f.batch, obj, g);
    EXPECT_NEAR(obj.loss(), std::log(2.0), 1e-6) << mode;
    for (const DpoObjective::Pair& p : obj.pairs()) EXPECT_NEAR(p.z, 0.0, 1e-5) << mode;
    const std::map<std::string, double> m = obj.metrics();
    EXPECT_NEAR(m.at("rewards/chosen"), 0.0, 1e-6);
    EXPECT_NEAR(m.at("rewards/margins"), 0.0, 1e-6);
    // dL/dz = -beta / 2 per pair, mean over P pairs: grad = (beta / 2P) (g_c - g_r).
    for (size_t i = 0; i < g.size(); ++i) {
      const std::vector<float> got = download_f32(g.tensor(i));
      const std::vector<float> c = download_f32(gc.tensor(i)), r = download_f32(gr.tensor(i));
      std::vector<float> want(got.size());
      for (size_t j = 0; j < want.size(); ++j)
        want[j] = static_cast<float>(beta / (2 * P) * (static_cast<double>(c[j]) - r[j]));
      EXPECT_LT(test::rel_err(got.data(), want.data(), g.tensor(i).numel()), 1e-5)
          << mode << " " << g.name(i);
    }
  }
}

// The DPO loss as a function of the policy's weights, forward only: policy log-probs from
// Engine::score, then the objective's own pre-pass arithmetic.
double dpo_loss(Fixture& f, const std::vector<float>& ref_logp, const DpoConfig& cfg) {
  Engine e(f.cfg, f.w, f.be, f.pool, parse_mode("stream"));
  const std::vector<float> lp = e.score(f.batch).logp;
  DpoObjective obj(f.batch, ref_logp, cfg);
  TokenChunk all;
  all.logp = lp;
  obj.prepass(0, all);
  obj.finish_prepass(0);
  return obj.loss();
}

TEST(DpoIdentity, DirectionalFiniteDifferences) {
  Fixture f;
  const ParameterSet ref_w = cli::make_reference_weights(f.cfg, f.w, f.pool, 0.05f, 3);
  const std::vector<float> ref_logp =
      Engine(f.cfg, ref_w, f.be, f.pool, parse_mode("stream")).score(f.batch).logp;
  for (DpoLoss lt : {DpoLoss::sigmoid, DpoLoss::ipo}) {
    DpoConfig cfg;
    cfg.loss_type = lt;
    cfg.beta = 0.5;
    ParameterSet g = f.zeros();
    DpoObjective obj(f.batch, ref_logp, cfg);
    Engine(f.cfg, f.w, f.be, f.pool, parse_mode("stream")).forward_backward(f.batch, obj, g);
    // One random direction over every parameter at once.
    Rng rng(5);
    std::vector<std::vector<float>> u(f.w.size()), saved(f.w.size());
    double analytic = 0, norm = 0;
    for (size_t i = 0; i < f.w.size(); ++i) {
      const Tensor& p = f.w.tensor(i);
      saved[i] = download_f32(p);
      for (int64_t j = 0; j < p.numel(); ++j) u[i].push_back(rng.normal());
    }
    for (auto& v : u)
      for (float x : v) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
    for (size_t i = 0; i < f.w.size(); ++i) {
      const std::vector<float> gi = download_f32(g.tensor(i));
      for (size_t j = 0; j < u[i].size(); ++j) {
        u[i][j] = static_cast<float>(u[i][j] / norm);
        analytic += static_cast<double>(u[i][j]) * gi[j];
      }
    }
    auto shifted = [&](double h) {
      for (size_t i = 0; i < f.w.size(); ++i) {
        std::vector<float> moved(saved[i].size());
        for (size_t j = 0; j < u[i].size(); ++j)
          moved[j] = saved[i][j] + static_cast<float>(h * u[i][j]);
        upload_f32(f.w.tensor(i), moved);
      }
      return dpo_loss(f, ref_logp, cfg);
    };
    const double h = 1e-2;
    const double fd = (shifted(h) - shifted(-h)) / (2 * h);
    shifted(0);
    EXPECT_NEAR(fd, analytic, 2e-2 * std::fabs(analytic) + 1e-4) << dpo_loss_name(lt);
  }
}

}  // namespace
}  // namespace sbp

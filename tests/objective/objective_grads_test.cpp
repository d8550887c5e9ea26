// The per-token gradients of every objective, checked by finite differences of the objective's
// own loss with respect to each token's log-prob (entropy, value), driven exactly as the engine
// drives it (pre-passes, then blocks of rows in order), for each loss type; plus: the result
// does not depend on how the rows are split into blocks, and GRPO's normalisers follow their
// definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "check/random_batches.h"
#include "core/rng.h"
#include "objective/dpo.h"
#include "objective/grpo.h"
#include "objective/kto.h"
#include "objective/orpo.h"
#include "objective/ppo.h"
#include "objective/sequence_rows.h"
#include "objective/simpo.h"
#include "objective/token_terms.h"

namespace sbp {
namespace {

enum class Input { logp, entropy, value };

struct Eval {
  double loss = 0;
  std::vector<float> dlogp, dentropy, dvalue;
};

using Factory = std::function<std::unique_ptr<Objective>()>;

// Drives a fresh objective over T rows in blocks of `chunk`, as the engine does.
Eval drive(const Factory& make, const std::vector<float>& logp, const std::vector<float>& ent,
           const std::vector<float>& val, int64_t chunk) {
  std::unique_ptr<Objective> obj = make();
  const HostChunks route = host_chunks(obj->route());  // the objective's route on the host
  const int64_t T = static_cast<int64_t>(std::max(logp.size(), val.size()));
  const bool value = obj->head() == HeadKind::value;
  const bool want_ent = route.entropy;
  auto block = [&](int64_t s, int64_t e) {
    TokenChunk c;
    c.row_begin = s;
    const size_t n = static_cast<size_t>(e - s);
    if (value) {
      c.value = std::span<const float>(val.data() + s, n);
    } else {
      c.logp = std::span<const float>(logp.data() + s, n);
      if (want_ent) c.entropy = std::span<const float>(ent.data() + s, n);
    }
    return c;
  };
  for (int p = 0; p < route.prepasses; ++p) {
    for (int64_t s = 0; s < T; s += chunk) route.prepass(p, block(s, std::min(T, s + chunk)));
    route.finish_prepass(p);
  }
  Eval ev;
  ev.dlogp.assign(static_cast<size_t>(T), NAN);
  ev.dentropy.assign(static_cast<size_t>(T), NAN);
  ev.dvalue.assign(static_cast<size_t>(T), NAN);
  for (int64_t s = 0; s < T; s += chunk) {
    const int64_t e = std::min(T, s + chunk);
    const size_t n = static_cast<size_t>(e - s);
    TokenChunkGrads g;
    if (value) {
      g.dvalue = std::span<float>(ev.dvalue.data() + s, n);
    } else {
      g.dlogp = std::span<float>(ev.dlogp.data() + s, n);
      if (want_ent) g.dentropy = std::span<float>(ev.dentropy.data() + s, n);
    }
    route.grads(block(s, e), g);
  }
  ev.loss = obj->loss();
  return ev;
}

struct Case {
  std::string name;
  Batch batch;
  Factory make;
  std::vector<Input> inputs;
  std::function<bool(int64_t t, const std::vector<float>& in)> near_kink;  // skip FD there
  // "Old log-probs = the current ones, detached": the loss VALUE does not move with logp, only
  // its gradient is defined; differentiate instead the objective whose old log-probs are the
  // evaluation point's, held constant.
  std::function<std::unique_ptr<Objective>(const std::vector<float>& at)> make_fd;
};

struct Data {
  std::vector<float> logp, ent, val, old_logp, ref_logp, old_val, ret, adv_rows, adv_seq;
};

// Random per-row inputs for a batch; rows without a target get logp 0 as the engine gives.
Data make_data(const Batch& b, uint64_t seed) {
  Rng rng(seed, "objective-data");
  const SequenceRows rows(b);
  Data d;
  for (int64_t t = 0; t < rows.num_rows(); ++t) {
    const bool tgt = b.targets()[static_cast<size_t>(t)] >= 0;
    const float lp = tgt ? -0.2f - 3.0f * static_cast<float>(rng.uniform()) : 0.0f;
    d.logp.push_back(lp);
    d.ent.push_back(0.5f + 2.0f * static_cast<float>(rng.uniform()));
    d.val.push_back(rng.normal());
    d.old_logp.push_back(lp + 0.3f * rng.normal());
    d.ref_logp.push_back(lp + 0.5f * rng.normal());
    d.old_val.push_back(d.val.back() + 0.3f * rng.normal());
    d.ret.push_back(rng.normal());
    d.adv_rows.push_back(rng.normal());
  }
  for (int64_t s = 0; s < rows.num_sequences(); ++s) d.adv_seq.push_back(rng.normal());
  return d;
}

Batch batch_for(ObjectiveKind kind, int64_t T, int64_t segments, uint64_t seed) {
  return cli::random_objective_batch(kind, 3, 50, T, segments, seed);
}

bool ratio_near(double lp, double old, double lo, double hi) {
  const double r = std::exp(lp - old);
  return std::fabs(r - lo) < 3e-3 || std::fabs(r - hi) < 3e-3;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const uint64_t seed = 5;
  // DPO, each loss type (and label smoothing).
  for (auto [loss, ls] : {std::pair{DpoLoss::sigmoid, 0.0}, std::pair{DpoLoss::sigmoid, 0.2},
                          std::pair{DpoLoss::hinge, 0.0}, std::pair{DpoLoss::ipo, 0.0}}) {
    Case c;
    c.name = std::string("dpo_") + dpo_loss_name(loss) + (ls > 0 ? "_ls" : "");
    c.batch = batch_for(ObjectiveKind::dpo, 37, 4, seed);
    const Data d = make_data(c.batch, seed);
    DpoConfig cfg;
    cfg.loss_type = loss;
    cfg.label_smoothing = ls;
    cfg.beta = loss == DpoLoss::hinge ? 0.05 : 0.3;  // hinge: stay on the active side
    const Batch b = c.batch;
    c.make = [b, d, cfg] { return std::make_unique<DpoObjective>(b, d.ref_logp, cfg, 3.0); };
    c.inputs = {Input::logp};
    out.push_back(c);
  }
  // ORPO: the chosen rows' NLL plus the odds term, with the step's normalisers.
  for (double beta : {0.1, 2.0}) {
    Case c;
    c.name = beta > 1.0 ? "orpo_beta2" : "orpo";
    c.batch = batch_for(ObjectiveKind::orpo, 37, 4, seed);
    OrpoConfig cfg;
    cfg.beta = beta;
    const Batch b = c.batch;
    c.make = [b, cfg] { return std::make_unique<OrpoObjective>(b, cfg, 3.0, 40.0); };
    c.inputs = {Input::logp};
    out.push_back(c);
  }
  // SimPO: the length-normalised margin, with and without label smoothing and the CPO NLL.
  for (const SimpoConfig& cfg :
       {SimpoConfig{}, SimpoConfig{.beta = 2.0, .gamma = 1.0, .label_smoothing = 0.1,
                                   .cpo_alpha = 0.5}}) {
    Case c;
    c.name = cfg.cpo_alpha > 0.0 ? "simpo_cpo" : "simpo";
    c.batch = batch_for(ObjectiveKind::simpo, 37, 4, seed);
    const Batch b = c.batch;
    c.make = [b, cfg] { return std::make_unique<SimpoObjective>(b, cfg, 3.0, 40.0); };
    c.inputs = {Input::logp};
    out.push_back(c);
  }
  // KTO: desirable and undesirable sequences, with and without the KL estimate, weighted.
  for (double kl : {0.0, 0.7}) {
    Case c;
    c.name = kl > 0.0 ? "kto_kl_weighted" : "kto";
    c.batch = batch_for(ObjectiveKind::kto, 37, 5, seed);
    const Data d = make_data(c.batch, seed);
    KtoConfig cfg;
    cfg.beta = kl > 0.0 ? 0.5 : 0.1;
    cfg.desirable_weight = kl > 0.0 ? 1.33 : 1.0;
    cfg.undesirable_weight = kl > 0.0 ? 0.7 : 1.0;
    const std::vector<float> labels = {1, 0, 0, 1, 1};
    const Batch b = c.batch;
    c.make = [b, d, labels, kl, cfg] {
      return std::make_unique<KtoObjective>(b, d.ref_logp, labels, kl, cfg, 7.0);
    };
    c.inputs = {Input::logp};
    out.push_back(c);
  }
  // GRPO, each loss type, with and without the KL term, old log-probs and entropy bonus.
  for (GrpoLoss loss : {GrpoLoss::grpo, GrpoLoss::bnpo, GrpoLoss::dr_grpo, GrpoLoss::dapo}) {
    for (int variant = 0; variant < 2; ++variant) {
      Case c;
      c.name = std::string("grpo_") + grpo_loss_name(loss) + (variant ? "_kl_old_entropy" : "");
      c.batch = batch_for(ObjectiveKind::grpo, 40, 6, seed + 1);
      const Data d = make_data(c.batch, seed + 1);
      GrpoConfig cfg;
      cfg.loss_type = loss;
      cfg.epsilon_high = 0.28;
      cfg.grad_accum_steps = 2;
      cfg.max_completion_length = 16;
      cfg.num_items_in_batch = 90;
      cfg.num_processes = 2;
      cfg.beta = variant ? 0.04 : 0.0;
      cfg.entropy_coef = variant ? 0.01 : 0.0;
      const Batch b = c.batch;
      const bool with_old = variant == 1;
      c.make = [b, d, cfg, with_old] {
        return std::make_unique<GrpoObjective>(
            b, d.adv_seq, cfg,
            with_old ? std::span<const float>(d.old_logp) : std::span<const float>(), d.ref_logp);
      };
      c.inputs = variant ? std::vector<Input>{Input::logp, Input::entropy}
                         : std::vector<Input>{Input::logp};
      if (!with_old) {
        c.make_fd = [b, d, cfg](const std::vector<float>& at) {
          return std::make_unique<GrpoObjective>(b, d.adv_seq, cfg, at, d.ref_logp);
        };
      }
      c.near_kink = [d, with_old, cfg](int64_t t, const std::vector<float>& lp) {
        return with_old &&
               ratio_near(lp[static_cast<size_t>(t)], d.old_logp[static_cast<size_t>(t)],
                          1 - cfg.epsilon_low, 1 + cfg.epsilon_high);
      };
      out.push_back(c);
    }
  }
  // PPO policy (with entropy bonus) and value.
  {
    Case c;
    c.name = "ppo_policy";
    c.batch = batch_for(ObjectiveKind::ppo, 33, 3, seed + 2);
    const Data d = make_data(c.batch, seed + 2);
    PpoConfig cfg;
    cfg.entropy_coef = 0.02;
    cfg.grad_accum_steps = 3;
    const Batch b = c.batch;
    c.make = [b, d, cfg] {
      return std::make_unique<PpoPolicyObjective>(b, d.adv_rows, d.old_logp, cfg);
    };
    c.inputs = {Input::logp, Input::entropy};
    c.near_kink = [d, cfg](int64_t t, const std::vector<float>& lp) {
      return ratio_near(lp[static_cast<size_t>(t)], d.old_logp[static_cast<size_t>(t)],
                        1 - cfg.cliprange, 1 + cfg.cliprange);
    };
    out.push_back(c);
  }
  {
    Case c;
    c.name = "ppo_value";
    c.batch = batch_for(ObjectiveKind::ppo, 33, 3, seed + 3);
    const Data d = make_data(c.batch, seed + 3);
    PpoConfig cfg;
    const Batch b = c.batch;
    c.make = [b, d, cfg] { return std::make_unique<PpoValueObjective>(b, d.ret, d.old_val, cfg); };
    c.inputs = {Input::value};
    c.near_kink = [d, cfg](int64_t t, const std::vector<float>& v) {
      const double lo = d.old_val[static_cast<size_t>(t)] - cfg.cliprange_value;
      const double hi = d.old_val[static_cast<size_t>(t)] + cfg.cliprange_value;
      return std::fabs(v[static_cast<size_t>(t)] - lo) < 3e-3 ||
             std::fabs(v[static_cast<size_t>(t)] - hi) < 3e-3;
    };
    out.push_back(c);
  }
  return out;
}

class ObjectiveGrads : public ::testing::TestWithParam<size_t> {};

TEST_P(ObjectiveGrads, FiniteDifferencesPerToken) {
  const Case c = cases()[GetParam()];
  const Data d = make_data(c.batch, 99);  // the inputs being differentiated
  const std::vector<int32_t> targets = c.batch.targets();
  const int64_t T = c.batch.size();
  const Eval base = drive(c.make, d.logp, d.ent, d.val, 7);
  ASSERT_TRUE(std::isfinite(base.loss)) << c.name;
  // h = 2^-12: adding it to inputs of magnitude < 8 is exact in fp32, so the difference sees
  // exactly +-h and its only error is the O(h^2) truncation (the losses sum in double).
  const double h = 1.0 / 4096;
  const Factory fd_make = c.make_fd ? Factory([&] { return c.make_fd(d.logp); }) : c.make;
  int checked = 0;
  for (Input in : c.inputs) {
    std::vector<float> lp = d.logp, ent = d.ent, val = d.val;
    std::vector<float>& x = in == Input::logp ? lp : in == Input::entropy ? ent : val;
    const std::vector<float>& g = in == Input::logp      ? base.dlogp
                                  : in == Input::entropy ? base.dentropy
                                                         : base.dvalue;
    double gmax = 0;
    for (float v : g) gmax = std::max(gmax, std::fabs(static_cast<double>(v)));
    ASSERT_GT(gmax, 0.0) << c.name;
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(t);
      if (in == Input::logp && targets[i] < 0) {
        EXPECT_EQ(g[i], 0.0f) << c.name << " row " << t << " has no target";
        continue;
      }
      if (c.near_kink && c.near_kink(t, in == Input::value ? val : lp)) continue;
      const float saved = x[i];
      x[i] = saved + static_cast<float>(h);
      const double up = drive(fd_make, lp, ent, val, 7).loss;
      x[i] = saved - static_cast<float>(h);
      const double down = drive(fd_make, lp, ent, val, 7).loss;
      x[i] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(g[i], numeric, 1e-5 * gmax + 1e-9) << c.name << " row " << t;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10) << c.name;
}

TEST_P(ObjectiveGrads, IndependentOfBlockSplit) {
  const Case c = cases()[GetParam()];
  const Data d = make_data(c.batch, 98);
  const Eval ref = drive(c.make, d.logp, d.ent, d.val, c.batch.size());
  for (int64_t chunk : {1, 4, 13}) {
    const Eval e = drive(c.make, d.logp, d.ent, d.val, chunk);
    EXPECT_EQ(e.loss, ref.loss) << c.name << " chunk " << chunk;
    for (size_t t = 0; t < ref.dlogp.size(); ++t) {
      if (!std::isnan(ref.dlogp[t])) {
        EXPECT_EQ(e.dlogp[t], ref.dlogp[t]) << c.name << " " << t;
      }
      if (!std::isnan(ref.dvalue[t])) {
        EXPECT_EQ(e.dvalue[t], ref.dvalue[t]) << c.name << " " << t;
      }
      if (!std::isnan(ref.dentropy[t])) {
        EXPECT_EQ(e.dentropy[t], ref.dentropy[t]) << c.name;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Objectives, ObjectiveGrads, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           return cases()[i.param].name;
                         });

// GRPO's four normalisers, written out from their definitions (TRL v0.23.0) and compared with
// the objective's loss.
TEST(GrpoNormalisers, FollowTheirDefinitions) {
  const Batch b = batch_for(ObjectiveKind::grpo, 40, 6, 12);
  const Data d = make_data(b, 12);
  const SequenceRows rows(b);
  const int64_t S = rows.num_sequences();
  // Per-token loss l_t with beta = 0.04 and supplied old log-probs.
  std::vector<double> l(d.logp.size(), 0.0);
  for (size_t t = 0; t < l.size(); ++t) {
    if (rows.weight[t] == 0) continue;
    const double A = d.adv_seq[static_cast<size_t>(rows.segment[t])];
    l[t] = clipped_surrogate(d.logp[t], d.old_logp[t], A, 0.2, 0.2).value +
           0.04 * kl_k3(d.logp[t], d.ref_logp[t]).value;
  }
  double total = 0, tokens = 0, max_len = 0;
  std::vector<double> per_seq(static_cast<size_t>(S), 0.0);
  for (size_t t = 0; t < l.size(); ++t) {
    total += rows.weight[t] * l[t];
    tokens += rows.weight[t];
    per_seq[static_cast<size_t>(rows.segment[t])] += rows.weight[t] * l[t];
  }
  double mean_of_means = 0;
  for (int64_t s = 0; s < S; ++s) {
    mean_of_means += per_seq[static_cast<size_t>(s)] /
                     std::max(1.0, rows.weight_sum[static_cast<size_t>(s)]) /
                     static_cast<double>(S);
    max_len = std::max(max_len, rows.weight_sum[static_cast<size_t>(s)]);
  }
  const double ga = 3, items = 123, procs = 2;
  const std::map<GrpoLoss, double> expected = {
      {GrpoLoss::grpo, mean_of_means / ga},
      {GrpoLoss::bnpo, total / tokens / ga},
      {GrpoLoss::dr_grpo, total / (static_cast<double>(S) * 20) / ga},
      {GrpoLoss::dapo, total / (items / procs)}};
  for (const auto& [loss, want] : expected) {
    GrpoConfig cfg;
    cfg.loss_type = loss;
    cfg.beta = 0.04;
    cfg.grad_accum_steps = 3;
    cfg.max_completion_length = 20;
    cfg.num_items_in_batch = items;
    cfg.num_processes = 2;
    cfg.log_entropy = false;
    const Eval e = drive(
        [&] { return std::make_unique<GrpoObjective>(b, d.adv_seq, cfg, d.old_logp, d.ref_logp); },
        d.logp, d.ent, d.val, 9);
    // The objective holds each row's weight as a float (objective/policy_terms.h: the device's
    // constants, and TRL's float32), written here in double: 2^-24 relative per weight at most.
    EXPECT_NEAR(e.loss, want, 0x1p-23 * std::fabs(want)) << grpo_loss_name(loss);
  }
  // dr_grpo without max_completion_length: the longest completion of the batch.
  GrpoConfig cfg;
  cfg.loss_type = GrpoLoss::dr_grpo;
  cfg.beta = 0.04;
  cfg.log_entropy = false;
  const Eval e = drive(
      [&] { return std::make_unique<GrpoObjective>(b, d.adv_seq, cfg, d.old_logp, d.ref_logp); },
      d.logp, d.ent, d.val, 9);
  const double want = total / (static_cast<double>(S) * max_len);
  EXPECT_NEAR(e.loss, want, 0x1p-23 * std::fabs(want));  // float row weights, as above
}

TEST(ObjectiveInputs, BadShapesAreInputErrors) {
  const Batch dpo = batch_for(ObjectiveKind::dpo, 20, 2, 1);
  std::vector<float> short_ref(3, 0.0f);
  EXPECT_THROW(DpoObjective(dpo, short_ref, DpoConfig{}), InputError);
  Batch odd = batch_for(ObjectiveKind::ppo, 21, 3, 1);
  EXPECT_THROW(DpoObjective(odd, std::vector<float>(21, 0.0f), DpoConfig{}), InputError);
  const Batch g = batch_for(ObjectiveKind::grpo, 24, 3, 1);
  GrpoConfig kl;
  kl.beta = 0.1;
  EXPECT_THROW(GrpoObjective(g, std::vector<float>(3, 0.0f), kl), InputError);  // no ref
  EXPECT_THROW(GrpoObjective(g, std::vector<float>(2, 0.0f), GrpoConfig{}), InputError);
  EXPECT_NO_THROW(GrpoObjective(g, std::vector<float>(3, 0.0f), GrpoConfig{}));  // beta 0: no ref
  EXPECT_THROW(parse_grpo_loss("ppo"), InputError);
  EXPECT_THROW(parse_dpo_loss("kto"), InputError);
  EXPECT_THROW(OrpoObjective(odd, OrpoConfig{}), InputError);
  OrpoConfig zero;
  zero.beta = 0.0;
  EXPECT_THROW(OrpoObjective(dpo, zero), InputError);
  const Batch k = batch_for(ObjectiveKind::kto, 20, 2, 1);
  const std::vector<float> ref(20, 0.0f), two = {1.0f, 0.0f};
  EXPECT_NO_THROW(KtoObjective(k, ref, two, 0.0, KtoConfig{}));
  EXPECT_THROW(KtoObjective(k, ref, std::vector<float>{1.0f}, 0.0, KtoConfig{}), InputError);
  EXPECT_THROW(KtoObjective(k, ref, std::vector<float>{1.0f, 0.5f}, 0.0, KtoConfig{}), InputError);
  EXPECT_THROW(KtoObjective(k, short_ref, two, 0.0, KtoConfig{}), InputError);
  EXPECT_THROW(KtoObjective(k, ref, two, -0.1, KtoConfig{}), InputError);  // KL is clamped at 0
}

}  // namespace
}  // namespace sbp

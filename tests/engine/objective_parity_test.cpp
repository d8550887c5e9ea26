// Parity with an independent PyTorch implementation of the objectives (the llm.c pattern):
// tools/objective_parity/make_fixtures.py writes tiny transformers models (policy, reference,
// value model) and, for DPO (sigmoid, smoothed sigmoid, hinge, ipo), ORPO, KTO, GRPO (each
// loss_type, the detached / no-KL form, an entropy bonus) and PPO, the loss, TRL's metrics,
// intermediate values (advantages, returns) and every parameter's gradient, computed by autograd
// from losses written the way TRL v0.23.0 writes them, on unpacked, right-padded sequences. Here
// the same inputs go through our packed batches, the reference model's real forward, the objectives
// and the streamed engine, in several modes.
//
// Tolerance: fp32 on both sides, different summation orders (see hf_parity_test.cpp): 1e-5 with
// the error measure max|a-b|/max|b| per tensor. Losses are compared on their natural scale,
// |a - b| <= 1e-5 max(1, |b|), because the GRPO/PPO losses are small differences of O(1) terms.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/checkpoint_io.h"
#include "model/safetensors.h"
#include "model/value_model_io.h"
#include "objective/dpo.h"
#include "objective/gae.h"
#include "objective/group_advantages.h"
#include "objective/grpo.h"
#include "objective/kto.h"
#include "objective/orpo.h"
#include "objective/ppo.h"
#include "objective/sequence_rows.h"
#include "objective/simpo.h"
#include "objective_kernels/objective_kernels.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using json = nlohmann::json;
constexpr double kTol = 1e-5;

std::string root() { return test::source_dir() + "/tests/fixtures/objectives"; }

struct Models {
  ModelConfig cfg = load_config(root() + "/models/policy");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool{ledger, be};
  ParameterSet policy, reference, value;
  Models() {
    policy = ParameterSet(cfg, pool, Category::weights, DType::F32, false);
    load_weights(root() + "/models/policy", cfg, policy);
    reference = ParameterSet(cfg, pool, Category::weights, DType::F32, false);
    load_weights(root() + "/models/reference", cfg, reference);
    const ModelConfig vcfg = load_config(root() + "/models/value");
    value = make_value_parameters(vcfg, pool, Category::weights, DType::F32, false);
    load_value_weights(root() + "/models/value", vcfg, value);
  }
};

Models& models() {
  static Models m;
  return m;
}

json read_case(const std::string& name) {
  return json::parse(test::read_text(root() + "/cases/" + name + ".json"));
}

std::vector<PromptCompletion> sequences(const json& j) {
  std::vector<PromptCompletion> out;
  for (const json& s : j.at("sequences"))
    out.push_back({s.at("prompt").get<std::vector<int32_t>>(),
                   s.at("completion").get<std::vector<int32_t>>()});
  return out;
}

// Per completion token (one list per sequence) -> per row of the packed batch: completion token
// j of a sequence with a p-token prompt is predicted by row begin + p - 1 + j.
std::vector<float> to_rows(const std::vector<PromptCompletion>& seqs, const json& per_token) {
  std::vector<float> rows;
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::vector<float> r(seqs[s].prompt.size() + seqs[s].completion.size(), 0.0f);
    const std::vector<float> v = per_token.at(s).get<std::vector<float>>();
    for (size_t j = 0; j < v.size(); ++j) r[seqs[s].prompt.size() - 1 + j] = v[j];
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return rows;
}

std::vector<ExecConfig> modes() {
  std::vector<ExecConfig> m = {parse_mode("base"), parse_mode("stream"),
                               parse_mode("recompute+chunked")};
  m[1].layer_chunk = 5;
  m[1].head_chunk = 3;
  m[2].head_chunk = 4;
  return m;
}

void expect_grads(const ParameterSet& g, const SafetensorsFile& want, const std::string& prefix,
                  const std::string& what) {
  for (size_t i = 0; i < g.size(); ++i) {
    const std::string name = prefix + g.name(i);
    const SafetensorsEntry* e = want.find(name);
    ASSERT_NE(e, nullptr) << what << ": no expected gradient for " << name;
    std::vector<float> ref(static_cast<size_t>(g.tensor(i).numel()));
    want.read_into(name, Tensor(ref.data(), DType::F32, g.tensor(i).shape));
    EXPECT_LT(test::rel_err(download_f32(g.tensor(i)).data(), ref.data(), g.tensor(i).numel()),
              kTol)
        << what << " " << name;
  }
}

void expect_loss(double got, double want, const std::string& what) {
  EXPECT_LE(std::fabs(got - want), kTol * std::max(1.0, std::fabs(want)))
      << what << ": " << got << " vs " << want;
}

void expect_metrics(const std::map<std::string, double>& got, const json& want,
                    const std::string& what) {
  for (const auto& [k, v] : want.items()) {
    ASSERT_EQ(got.count(k), 1u) << what << ": no metric " << k;
    EXPECT_NEAR(got.at(k), v.get<double>(), 1e-5 * std::max(1.0, std::fabs(v.get<double>())))
        << what << " " << k;
  }
}

class DpoParity : public ::testing::TestWithParam<const char*> {};

TEST_P(DpoParity, LossMetricsAndGradients) {
  Models& m = models();
  const json j = read_case(GetParam());
  std::vector<PreferencePair> pairs;
  for (const json& p : j.at("pairs"))
    pairs.push_back({p.at("prompt").get<std::vector<int32_t>>(),
                     p.at("chosen").get<std::vector<int32_t>>(),
                     p.at("rejected").get<std::vector<int32_t>>()});
  const Batch batch = preference_batch(pairs);
  DpoConfig cfg;
  cfg.loss_type = parse_dpo_loss(j.at("config").at("loss_type"));
  cfg.beta = j.at("config").at("beta");
  cfg.label_smoothing = j.at("config").at("label_smoothing");
  const SafetensorsFile grads(root() + "/cases/" + GetParam() + ".grads.safetensors");
  for (const ExecConfig& exec : modes()) {
    const std::string what = std::string(GetParam()) + " " + mode_name(exec);
    const std::vector<float> ref_logp =
        Engine(m.cfg, m.reference, m.be, m.pool, exec).score(batch).logp;
    DpoObjective obj(batch, ref_logp, cfg);
    ParameterSet g(m.cfg, m.pool, Category::grads, DType::F32, true);
    Engine(m.cfg, m.policy, m.be, m.pool, exec).forward_backward(batch, obj, g);
    expect_loss(obj.loss(), j.at("expected").at("loss"), what);
    expect_metrics(obj.metrics(), j.at("expected").at("metrics"), what);
    expect_grads(g, grads, "", what);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DpoParity,
                         ::testing::Values("dpo_sigmoid", "dpo_sigmoid_smoothing", "dpo_hinge",
                                           "dpo_ipo"));

std::vector<PreferencePair> preference_pairs(const json& j) {
  std::vector<PreferencePair> pairs;
  for (const json& p : j.at("pairs"))
    pairs.push_back({p.at("prompt").get<std::vector<int32_t>>(),
                     p.at("chosen").get<std::vector<int32_t>>(),
                     p.at("rejected").get<std::vector<int32_t>>()});
  return pairs;
}

// ORPO: the policy alone; the NLL over the chosen sequences' every row (prompt included) and the
// odds term from length-averaged completion log-probs, as TRL's ORPOTrainer computes them.
class OrpoParity : public ::testing::TestWithParam<const char*> {};

TEST_P(OrpoParity, LossMetricsAndGradients) {
  Models& m = models();
  const json j = read_case(GetParam());
  const Batch batch = preference_batch(preference_pairs(j));
  OrpoConfig cfg;
  cfg.beta = j.at("config").at("beta");
  const SafetensorsFile grads(root() + "/cases/" + GetParam() + ".grads.safetensors");
  for (const ExecConfig& exec : modes()) {
    const std::string what = std::string(GetParam()) + " " + mode_name(exec);
    OrpoObjective obj(batch, cfg);
    ParameterSet g(m.cfg, m.pool, Category::grads, DType::F32, true);
    Engine(m.cfg, m.policy, m.be, m.pool, exec).forward_backward(batch, obj, g);
    expect_loss(obj.loss(), j.at("expected").at("loss"), what);
    expect_metrics(obj.metrics(), j.at("expected").at("metrics"), what);
    expect_grads(g, grads, "", what);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OrpoParity, ::testing::Values("orpo", "orpo_beta2"));

// SimPO: the policy alone; length-averaged completion log-probs, the margin gamma / beta, and
// with cpo_alpha the chosen completion NLL, as TRL's CPOTrainer (loss_type "simpo") computes them.
class SimpoParity : public ::testing::TestWithParam<const char*> {};

TEST_P(SimpoParity, LossMetricsAndGradients) {
  Models& m = models();
  const json j = read_case(GetParam());
  const Batch batch = preference_batch(preference_pairs(j));
  const json& c = j.at("config");
  const SimpoConfig cfg = {.beta = c.at("beta"),
                           .gamma = c.at("simpo_gamma"),
                           .label_smoothing = c.at("label_smoothing"),
                           .cpo_alpha = c.at("cpo_alpha")};
  const SafetensorsFile grads(root() + "/cases/" + GetParam() + ".grads.safetensors");
  for (const ExecConfig& exec : modes()) {
    const std::string what = std::string(GetParam()) + " " + mode_name(exec);
    SimpoObjective obj(batch, cfg);
    ParameterSet g(m.cfg, m.pool, Category::grads, DType::F32, true);
    Engine(m.cfg, m.policy, m.be, m.pool, exec).forward_backward(batch, obj, g);
    expect_loss(obj.loss(), j.at("expected").at("loss"), what);
    expect_metrics(obj.metrics(), j.at("expected").at("metrics"), what);
    expect_grads(g, grads, "", what);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SimpoParity, ::testing::Values("simpo", "simpo_cpo"));

// Per-sequence sums of m_t logp_t over a batch's rows (the completion log-probs), written here
// independently of the step's kto_kl_part.
std::vector<double> completion_sums(const Batch& batch, std::span<const float> logp) {
  const SequenceRows rows(batch);
  std::vector<double> sum(static_cast<size_t>(rows.num_sequences()), 0.0);
  for (int64_t t = 0; t < rows.num_rows(); ++t) {
    const size_t u = static_cast<size_t>(t);
    sum[static_cast<size_t>(rows.segment[u])] += static_cast<double>(rows.weight[u]) * logp[u];
  }
  return sum;
}

// KTO: the KL estimate from the batch's mismatched pairs (kto_kl_batch: prompt i with completion
// i - 1, as TRL's _get_kl_dataset shifts a batch), scored by the policy and the reference model,
// then the loss against the reference's completion sums.
class KtoParity : public ::testing::TestWithParam<const char*> {};

TEST_P(KtoParity, KlLossMetricsAndGradients) {
  Models& m = models();
  const json j = read_case(GetParam());
  const Batch batch = prompt_completion_batch(sequences(j));
  std::vector<float> labels;
  for (const json& l : j.at("labels")) labels.push_back(l.get<bool>() ? 1.0f : 0.0f);
  KtoConfig cfg;
  cfg.beta = j.at("config").at("beta");
  cfg.desirable_weight = j.at("config").at("desirable_weight");
  cfg.undesirable_weight = j.at("config").at("undesirable_weight");
  const SafetensorsFile grads(root() + "/cases/" + GetParam() + ".grads.safetensors");
  const Batch kl_batch = kto_kl_batch(batch);
  ASSERT_EQ(kl_batch.size(), batch.size());
  for (const ExecConfig& exec : modes()) {
    const std::string what = std::string(GetParam()) + " " + mode_name(exec);
    const std::vector<double> pk =
        completion_sums(kl_batch, Engine(m.cfg, m.policy, m.be, m.pool, exec).score(kl_batch).logp);
    const std::vector<double> rk = completion_sums(
        kl_batch, Engine(m.cfg, m.reference, m.be, m.pool, exec).score(kl_batch).logp);
    double kl = 0.0;
    for (size_t s = 0; s < pk.size(); ++s) kl += (pk[s] - rk[s]) / static_cast<double>(pk.size());
    EXPECT_NEAR(kl, j.at("expected").at("kl_unclamped").get<double>(), 1e-5) << what;
    const std::vector<float> ref_logp =
        Engine(m.cfg, m.reference, m.be, m.pool, exec).score(batch).logp;
    KtoObjective obj(batch, ref_logp, labels, std::max(0.0, kl), cfg);
    ParameterSet g(m.cfg, m.pool, Category::grads, DType::F32, true);
    Engine(m.cfg, m.policy, m.be, m.pool, exec).forward_backward(batch, obj, g);
    expect_loss(obj.loss(), j.at("expected").at("loss"), what);
    expect_metrics(obj.metrics(), j.at("expected").at("metrics"), what);
    expect_grads(g, grads, "", what);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KtoParity, ::testing::Values("kto", "kto_weighted"));

class GrpoParity : public ::testing::TestWithParam<const char*> {};

TEST_P(GrpoParity, LossMetricsAdvantagesAndGradients) {
  Models& m = models();
  const json j = read_case(GetParam());
  const json& c = j.at("config");
  const std::vector<PromptCompletion> seqs = sequences(j);
  const Batch batch = prompt_completion_batch(seqs);
  GrpoConfig cfg;
  cfg.loss_type = parse_grpo_loss(c.at("loss_type"));
  cfg.beta = c.at("beta");
  cfg.epsilon_low = c.at("epsilon_low");
  cfg.epsilon_high = c.at("epsilon_high");
  cfg.grad_accum_steps = c.at("grad_accum_steps");
  cfg.max_completion_length = c.at("max_completion_length");
  cfg.num_items_in_batch = c.at("num_items_in_batch");
  cfg.num_processes = c.at("num_processes");
  cfg.entropy_coef = c.at("entropy_coef");
  const std::vector<float> rewards = j.at("rewards").get<std::vector<float>>();
  const std::vector<float> adv =
      group_advantages(rewards, c.at("group_size"), parse_scale_rewards(c.at("scale_rewards")));
  const std::vector<float> want_adv = j.at("expected").at("advantages").get<std::vector<float>>();
  EXPECT_LT(test::rel_err(adv.data(), want_adv.data(), static_cast<int64_t>(adv.size())), kTol);
  const std::vector<float> old =
      j.at("old_logps").is_null() ? std::vector<float>() : to_rows(seqs, j.at("old_logps"));
  const SafetensorsFile grads(root() + "/cases/" + GetParam() + ".grads.safetensors");
  for (const ExecConfig& exec : modes()) {
    const std::string what = std::string(GetParam()) + " " + mode_name(exec);
    std::vector<float> ref_logp;
    if (cfg.beta != 0.0)
      ref_logp = Engine(m.cfg, m.reference, m.be, m.pool, exec).score(batch).logp;
    GrpoObjective obj(batch, adv, cfg, old, ref_logp);
    ParameterSet g(m.cfg, m.pool, Category::grads, DType::F32, true);
    Engine(m.cfg, m.policy, m.be, m.pool, exec).forward_backward(batch, obj, g);
    expect_loss(obj.loss(), j.at("expected").at("loss"), what);
    expect_metrics(obj.metrics(), j.at("expected").at("metrics"), what);
    expect_grads(g, grads, "", what);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GrpoParity,
                         ::testing::Values("grpo_grpo", "grpo_bnpo", "grpo_dr_grpo", "grpo_dapo",
                                           "grpo_dapo_detached_nokl", "grpo_bnpo_entropy"));

TEST(PpoParity, RolloutLossesAndBothModelsGradients) {
  Models& m = models();
  const json j = read_case("ppo");
  const json& c = j.at("config");
  const std::vector<PromptCompletion> seqs = sequences(j);
  const Batch batch = prompt_completion_batch(seqs);
  const std::vector<float> old = to_rows(seqs, j.at("old_logps"));
  const std::vector<float> old_values = to_rows(seqs, j.at("old_values"));
  const std::vector<float> scores = j.at("scores").get<std::vector<float>>();
  PpoRolloutConfig rc;
  rc.kl_coef = c.at("kl_coef");
  rc.gamma = c.at("gamma");
  rc.lam = c.at("lam");
  PpoConfig pc;
  pc.cliprange = c.at("cliprange");
  pc.cliprange_value = c.at("cliprange_value");
  pc.vf_coef = c.at("vf_coef");
  const SafetensorsFile grads(root() + "/cases/ppo.grads.safetensors");
  const SequenceRows rows(batch);
  for (const ExecConfig& exec : modes()) {
    const std::string what = "ppo " + mode_name(exec);
    const std::vector<float> ref_logp =
        Engine(m.cfg, m.reference, m.be, m.pool, exec).score(batch).logp;
    const PpoAdvantages a = ppo_advantages(batch, scores, old, ref_logp, old_values, rc);
    const std::vector<float> want_adv = to_rows(seqs, j.at("expected").at("advantages"));
    const std::vector<float> want_ret = to_rows(seqs, j.at("expected").at("returns"));
    EXPECT_LT(test::rel_err(a.advantages.data(), want_adv.data(), batch.size()), kTol) << what;
    EXPECT_LT(test::rel_err(a.returns.data(), want_ret.data(), batch.size()), kTol) << what;
    EXPECT_NEAR(a.mean_kl, j.at("expected").at("metrics").at("objective/kl").get<double>(), 1e-5)
        << what;

    PpoPolicyObjective pol(batch, a.advantages, old, pc);
    PpoValueObjective val(batch, a.returns, old_values, pc);
    ParameterSet g(m.cfg, m.pool, Category::grads, DType::F32, true);
    ParameterSet vg = make_value_parameters(m.cfg, m.pool, Category::grads, DType::F32, true);
    Engine(m.cfg, m.policy, m.be, m.pool, exec).forward_backward(batch, pol, g);
    Engine(m.cfg, m.value, m.be, m.pool, exec).forward_backward(batch, val, vg);
    expect_loss(pol.loss() + val.loss(), j.at("expected").at("loss"), what);
    const json& mt = j.at("expected").at("metrics");
    EXPECT_NEAR(pol.metrics().at("loss/policy"), mt.at("loss/policy").get<double>(), 1e-5) << what;
    EXPECT_NEAR(val.metrics().at("loss/value"), mt.at("loss/value").get<double>(),
                1e-5 * std::max(1.0, mt.at("loss/value").get<double>()))
        << what;
    expect_grads(g, grads, "", what);
    expect_grads(vg, grads, "value_model.", what);

    // The same step with the rollout on the backend, as PPO's step computes it on one process
    // (objective_kernels.h's ppo_rollout_rows): the gradient passes read the rows there, the
    // objectives' host copies come from the same rows.
    const std::string on_device = what + " (rollout rows on the backend)";
    const int64_t T = batch.size(), S = static_cast<int64_t>(seqs.size());
    double n = 0;
    for (float x : rows.weight) n += x > 0.0f ? 1 : 0;
    std::vector<float> seq;  // (S, 3)
    for (float score : scores)
      seq.insert(seq.end(), {score, ppo_policy_weight(n, pc), ppo_value_weight(n, pc)});
    auto up = [&](std::span<const float> v, Shape shape) {
      Buffer b = m.pool.allocate(Category::other, DType::F32, shape);
      upload_f32(b.view(), v);
      return b;
    };
    const Buffer logp_d = up(old, {T}), ref_d = up(ref_logp, {T}), values_d = up(old_values, {T});
    const Buffer weight_d = up(rows.weight, {T}), seq_d = up(seq, {S, 3});
    const Buffer begin_d = m.pool.allocate(Category::other, DType::I32, {S + 1});
    upload_i32(begin_d.view(), offsets_i32(rows.begin));
    const Buffer moments = m.pool.allocate(Category::other, DType::F32, {16 * S});
    const Buffer policy_rows = m.pool.allocate(Category::other, DType::F32, {T, 4});
    const Buffer value_rows = m.pool.allocate(Category::other, DType::F32, {T, 3});
    ppo_rollout_rows(m.be, policy_rows.view(), value_rows.view(), moments.view(), logp_d.view(),
                     ref_d.view(), values_d.view(), weight_d.view(), begin_d.view(), seq_d.view(),
                     rc);
    auto columns = [T](const Tensor& rows_d, int width, int a, int b) {
      const std::vector<float> h = download_f32(rows_d);
      auto first = std::make_shared<std::vector<float>>();
      auto second = std::make_shared<std::vector<float>>();
      for (int64_t t = 0; t < T; ++t) {
        first->push_back(h[static_cast<size_t>(t * width + a)]);
        second->push_back(h[static_cast<size_t>(t * width + b)]);
      }
      return PpoRowConstants{first, second};
    };
    const Tensor pr = policy_rows.view(), vr = value_rows.view();
    PpoPolicyObjective dpol(
        batch, {.host = [&] { return columns(pr, 4, kAdvantage, kOldLogp); }, .device = pr}, pc);
    PpoValueObjective dval(
        batch, {.host = [&] { return columns(vr, 3, kReturn, kOldValue); }, .device = vr}, pc);
    ParameterSet dg(m.cfg, m.pool, Category::grads, DType::F32, true);
    ParameterSet dvg = make_value_parameters(m.cfg, m.pool, Category::grads, DType::F32, true);
    Engine(m.cfg, m.policy, m.be, m.pool, exec).forward_backward(batch, dpol, dg);
    Engine(m.cfg, m.value, m.be, m.pool, exec).forward_backward(batch, dval, dvg);
    expect_loss(dpol.loss() + dval.loss(), j.at("expected").at("loss"), on_device);
    EXPECT_NEAR(dpol.metrics().at("loss/policy"), mt.at("loss/policy").get<double>(), 1e-5)
        << on_device;
    expect_grads(dg, grads, "", on_device);
    expect_grads(dvg, grads, "value_model.", on_device);
  }
}

}  // namespace
}  // namespace sbp

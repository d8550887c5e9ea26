#pragma once
// The per-token terms of the policy-gradient objectives (GRPO, PPO's policy and value), each with
// its derivative, in double precision. They are SBP_HD functions: the objectives compute their
// losses and statistics with them on the host (objective/grpo.cpp, ppo.cpp), and the backends
// compute dL/dlogp with the very same functions on the device (objective_kernels.h's
// policy_token_grads, in the CPU backend and a CUDA kernel), so that the gradient pass needs no
// value on the host (docs/CUDA.md "no host wait in the head"). Finite-difference checks of each
// term: tests/objective/token_terms_test.cpp.
//
// Where PyTorch's autograd defines a derivative at a kink (torch.minimum/maximum of two equal
// values sends half the gradient to each side; clamp passes the gradient on its closed
// interval), the derivatives below follow it, so that gradients equal those TRL obtains from
// autograd even on those measure-zero sets.
#include <cmath>

#include "core/host_device.h"

namespace sbp {

struct Term {
  double value = 0.0;
  double d = 0.0;  // derivative with respect to the argument named in each function
};

// PPO/GRPO clipped surrogate for one token, as TRL writes it:
//   r = exp(logp - old_logp),  c = clamp(r, 1 - eps_low, 1 + eps_high)
//   value = -min(r * adv, c * adv)
// d = dvalue/dlogp: -adv * r where the unclipped branch is active (inside the clip range, or
// outside it when r * adv is the smaller), else 0. Inside [lo, hi] both branches are the same
// function of r (ties split the gradient half/half, and clamp passes it): the full -adv r.
// Outside, only a strictly smaller unclipped branch carries a gradient; the clamped branch is
// constant there.
SBP_HD Term clipped_surrogate(double logp, double old_logp, double adv, double eps_low,
                              double eps_high) {
  const double r = exp(logp - old_logp);
  const double lo = 1.0 - eps_low, hi = 1.0 + eps_high;
  const double c = r < lo ? lo : (r > hi ? hi : r);
  const double unclipped = r * adv, clipped = c * adv;
  const bool inside = r >= lo && r <= hi;
  Term t;
  t.value = -(unclipped < clipped ? unclipped : clipped);
  t.d = (inside || unclipped < clipped) ? -adv * r : 0.0;
  return t;
}

// Whether the token counts as clipped in TRL's statistics (GRPO clip_ratio/low, /high).
SBP_HD bool clipped_low(double logp, double old_logp, double adv, double eps_low) {
  return exp(logp - old_logp) < 1.0 - eps_low && adv < 0.0;
}
SBP_HD bool clipped_high(double logp, double old_logp, double adv, double eps_high) {
  return exp(logp - old_logp) > 1.0 + eps_high && adv > 0.0;
}

// k3 estimator of KL(pi || ref) per token (Schulman, "Approximating KL divergence"):
//   value = exp(ref - logp) - (ref - logp) - 1,   d = dvalue/dlogp = 1 - exp(ref - logp).
SBP_HD Term kl_k3(double logp, double ref_logp) {
  const double delta = ref_logp - logp;
  const double e = exp(delta);
  Term t;
  t.value = e - delta - 1.0;
  t.d = 1.0 - e;
  return t;
}

// The formula's scalars: the clip range, the k3 KL's weight (GRPO's beta; 0 without a
// reference) and the entropy bonus's coefficient. on_policy: the old log-probs are the current
// ones (GRPO with one pass over its rollouts: r = 1 exactly), and the rows' old_logp is unused.
struct PolicyTerms {
  double eps_low = 0.2, eps_high = 0.2;
  double beta = 0.0;
  double entropy_coef = 0.0;
  bool on_policy = false;
};

// One row's constants as the device holds them, (n, 4) F32 in this order.
enum PolicyRowField : int { kOldLogp = 0, kRefLogp = 1, kAdvantage = 2, kLossWeight = 3 };
inline constexpr int kPolicyRowWidth = 4;

struct PolicyGrad {
  float dlogp = 0.0f;
  float dentropy = 0.0f;
};

// A token's share of the loss, w (clipped_surrogate + beta kl_k3 - entropy_coef H), and its
// gradients: dL/dlogp = w (surrogate' + beta k3'), dL/dH = -entropy_coef w, each rounded to
// float once. A row with loss weight 0 (no target, or masked) gets zeros.
SBP_HD PolicyGrad policy_token_grad(float logp, const float* row, const PolicyTerms& p,
                                    const float* ref = nullptr) {
  PolicyGrad g;
  const double w = row[kLossWeight];
  if (w == 0.0) return g;
  const double lp = logp;
  const double old = p.on_policy ? lp : static_cast<double>(row[kOldLogp]);
  double d = clipped_surrogate(lp, old, row[kAdvantage], p.eps_low, p.eps_high).d;
  // The reference's log-prob from the row, or where it stayed on the device, from there.
  if (p.beta != 0.0) d += p.beta * kl_k3(lp, ref ? *ref : row[kRefLogp]).d;
  g.dlogp = static_cast<float>(w * d);
  g.dentropy = static_cast<float>(-p.entropy_coef * w);
  return g;
}

// PPO clipped value loss for one token (TRL PPOTrainer), before the 0.5 and vf_coef factors:
//   vc = clamp(v, v_old - eps, v_old + eps),  value = max((v - ret)^2, (vc - ret)^2)
// d = dvalue/dv; torch.maximum splits ties.
SBP_HD Term clipped_value_loss(double v, double v_old, double ret, double eps) {
  const double lo = v_old - eps, hi = v_old + eps;
  const double vc = v < lo ? lo : (v > hi ? hi : v);
  const double a = (v - ret) * (v - ret), b = (vc - ret) * (vc - ret);
  Term t;
  t.value = a < b ? b : a;
  const double da = 2.0 * (v - ret);
  const double db = (v >= lo && v <= hi) ? 2.0 * (vc - ret) : 0.0;
  t.d = a > b ? da : (b > a ? db : 0.5 * (da + db));
  return t;
}

// The value head's formula (PPO's value model): the clip range around the old values.
struct ValueTerms {
  double clip = 0.2;
};

// One row's constants of the value formula, (n, 3) F32 in this order.
enum ValueRowField : int { kOldValue = 0, kReturn = 1, kValueWeight = 2 };
inline constexpr int kValueRowWidth = 3;

// A token's share of the value loss, w clipped_value_loss, and its gradient dL/dv = w
// clipped_value_loss', rounded to float once; 0 for a row with weight 0.
SBP_HD float value_token_grad(float v, const float* row, const ValueTerms& p) {
  const double w = row[kValueWeight];
  if (w == 0.0) return 0.0f;
  return static_cast<float>(w * clipped_value_loss(v, row[kOldValue], row[kReturn], p.clip).d);
}

}  // namespace sbp

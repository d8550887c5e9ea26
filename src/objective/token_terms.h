#pragma once
// The scalar formulas the policy-gradient and preference objectives are built from, each with
// its derivative, in double precision. They are pure functions so that finite-difference tests
// can check them one by one (tests/objective/token_terms_test.cpp).
//
// Where PyTorch's autograd defines a derivative at a kink (torch.minimum/maximum of two equal
// values sends half the gradient to each side; clamp passes the gradient on its closed
// interval; relu has derivative 0 at 0), the derivatives below follow it, so that gradients
// equal those TRL obtains from autograd even on those measure-zero sets.
namespace sbp {

struct Term {
  double value = 0.0;
  double d = 0.0;  // derivative with respect to the argument named in each function
};

// PPO/GRPO clipped surrogate for one token, as TRL writes it:
//   r = exp(logp - old_logp),  c = clamp(r, 1 - eps_low, 1 + eps_high)
//   value = -min(r * adv, c * adv)
// d = dvalue/dlogp: -adv * r where the unclipped branch is active (inside the clip range, or
// outside it when r * adv is the smaller), else 0.
Term clipped_surrogate(double logp, double old_logp, double adv, double eps_low, double eps_high);
// Whether the token counts as clipped in TRL's statistics (GRPO clip_ratio/low, /high).
bool clipped_low(double logp, double old_logp, double adv, double eps_low);
bool clipped_high(double logp, double old_logp, double adv, double eps_high);

// k3 estimator of KL(pi || ref) per token (Schulman, "Approximating KL divergence"):
//   value = exp(ref - logp) - (ref - logp) - 1,   d = dvalue/dlogp = 1 - exp(ref - logp).
Term kl_k3(double logp, double ref_logp);
// k1 estimator: value = logp - ref, d = 1.
Term kl_k1(double logp, double ref_logp);

// PPO clipped value loss for one token (TRL PPOTrainer), before the 0.5 and vf_coef factors:
//   vc = clamp(v, v_old - eps, v_old + eps),  value = max((v - ret)^2, (vc - ret)^2)
// d = dvalue/dv.
Term clipped_value_loss(double v, double v_old, double ret, double eps);

// DPO pair losses of z = (logpi_c - logpi_r) - (logref_c - logref_r) (TRL's `logits`);
// d = dloss/dz.
//   sigmoid: -(1 - ls) log sigmoid(beta z) - ls log sigmoid(-beta z)
//   hinge:   relu(1 - beta z)
//   ipo:     (z - 1 / (2 beta))^2       (z built from length-averaged log-probs, see dpo.h)
enum class DpoLoss { sigmoid, hinge, ipo };
Term dpo_pair_loss(double z, DpoLoss type, double beta, double label_smoothing);

// log(sigmoid(x)) without overflow for large |x|.
double log_sigmoid(double x);

}  // namespace sbp

#pragma once
// The sequence-level preference objectives' formulas (DPO and its ipo / hinge variants, ORPO,
// KTO, SimPO), each with its derivative, in double precision. Their loss is a function of per-sequence
// sums of m_t logp_t, so dL/dlogp_t = coef[sequence] * m_t (ORPO: plus its NLL's constant on a
// chosen sequence's rows). They are SBP_HD functions: the objectives compute their losses,
// statistics and coefficients with them on the host (objective/dpo.cpp, orpo.cpp, kto.cpp), and
// the backends compute the same coefficients and gradients from the sums on the device
// (objective_kernels.h's sequence_token_grads), so that a pre-pass's log-probs need not come to the
// host before the gradient pass (docs/CUDA.md "no host wait in the head"). Finite-difference
// checks: tests/objective/token_terms_test.cpp and the op suite's SequenceTokenGrads cases.
#include <cstdint>

#include "core/host_device.h"
#include "objective/policy_terms.h"

namespace sbp {

// log(sigmoid(x)) without overflow for large |x|: -log1p(e^-x) for x >= 0, x - log1p(e^x)
// otherwise.
SBP_HD double log_sigmoid(double x) { return x >= 0.0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }

SBP_HD double sigmoid(double x) {
  return x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

// DPO pair losses of z = (logpi_c - logpi_r) - (logref_c - logref_r) (TRL's `logits`);
// d = dloss/dz.
//   sigmoid: -(1 - ls) log sigmoid(beta z) - ls log sigmoid(-beta z)
//   hinge:   relu(1 - beta z)               (relu'(0) = 0, as in PyTorch)
//   ipo:     (z - 1 / (2 beta))^2           (z built from length-averaged log-probs, see dpo.h)
enum class DpoLoss { sigmoid, hinge, ipo };
SBP_HD Term dpo_pair_loss(double z, DpoLoss type, double beta, double ls) {
  Term t;
  switch (type) {
    case DpoLoss::sigmoid: {
      const double x = beta * z;
      t.value = -(1.0 - ls) * log_sigmoid(x) - ls * log_sigmoid(-x);
      // d/dx -log sigmoid(x) = -sigmoid(-x);  d/dx -log sigmoid(-x) = sigmoid(x)
      t.d = beta * (-(1.0 - ls) * sigmoid(-x) + ls * sigmoid(x));
      break;
    }
    case DpoLoss::hinge: {
      const double m = 1.0 - beta * z;
      t.value = m < 0.0 ? 0.0 : m;  // std::max(m, 0.0)
      t.d = m > 0.0 ? -beta : 0.0;
      break;
    }
    case DpoLoss::ipo: {
      const double u = z - 1.0 / (2.0 * beta);
      t.value = u * u;
      t.d = 2.0 * u;
      break;
    }
  }
  return t;
}

// ORPO's log odds ratio of the length-averaged log-probs a_c, a_r (each < 0):
//   z = log(odds_c / odds_r), odds(a) = e^a / (1 - e^a),
// with dz/da_c and dz/da_r. log(1 - e^a) as log(-expm1(a)): exact near a = 0 (a probability
// near 1), where TRL's log1p(-exp(a)) loses digits; the two agree to rounding elsewhere.
struct OrpoLogOdds {
  double z = 0.0;
  double dz_dchosen = 0.0, dz_drejected = 0.0;
};
SBP_HD OrpoLogOdds orpo_log_odds(double a_c, double a_r) {
  OrpoLogOdds o;
  o.z = (a_c - a_r) - (log(-expm1(a_c)) - log(-expm1(a_r)));
  o.dz_dchosen = -1.0 / expm1(a_c);
  o.dz_drejected = 1.0 / expm1(a_r);
  return o;
}

// Which objective's formula, and its scalars. A unit is the sequences one formula reads: a
// (chosen, rejected) pair of consecutive segments for DPO, ORPO and SimPO, one sequence for KTO.
enum class SequenceFormula : int32_t { dpo, orpo, kto, simpo };
struct SequenceTerms {
  SequenceFormula formula = SequenceFormula::dpo;
  DpoLoss dpo_loss = DpoLoss::sigmoid;
  double beta = 0.1;
  double label_smoothing = 0.0;   // DPO sigmoid, SimPO
  double units_in_step = 1.0;     // the loss's mean is over the step's pairs (KTO: sequences)
  // ORPO: the NLL's mean is over the step's chosen rows; SimPO: over the step's chosen
  // completion tokens (the sum of their m_t)
  double nll_rows_in_step = 1.0;
  double gamma = 0.5;      // SimPO: the target margin (TRL's simpo_gamma)
  double cpo_alpha = 0.0;  // SimPO: the chosen NLL's coefficient (TRL's cpo_alpha; 0: SimPO)
  double kl = 0.0;                // KTO: the step's KL estimate, clamped at 0
  // KTO with the KL estimate's parts on the device (objective_kernels.h's sequence_token_grads'
  // kl_parts): the step's sequences, the estimate's denominator (kto_kl_estimate); kl is then
  // unused.
  double kl_sequences = 0.0;
  double desirable_weight = 1.0, undesirable_weight = 1.0;  // KTO
};

SBP_HD int sequences_per_unit(const SequenceTerms& t) {
  return t.formula == SequenceFormula::kto ? 1 : 2;
}

// Whether the formula scores against a reference model's log-probs (DPO, KTO) or the policy
// alone (ORPO, SimPO).
SBP_HD bool reads_reference(const SequenceTerms& t) {
  return t.formula == SequenceFormula::dpo || t.formula == SequenceFormula::kto;
}

// One unit's sums (index k < sequences_per_unit): policy[k] = sum m_t logp_t, ref[k] the
// reference's (DPO, KTO), weight[k] = sum m_t; label (KTO) 1 desirable, 0 undesirable.
struct UnitSums {
  double policy[2] = {0.0, 0.0};
  double ref[2] = {0.0, 0.0};
  double weight[2] = {0.0, 0.0};
  float label = 0.0f;
};

// What the formula makes of them: the unit's loss term as the objective sums it (DPO: the pair
// loss; ORPO: log sigmoid of the log odds; KTO: the weighted sequence loss), its z (DPO: TRL's
// logits; ORPO: the log odds; KTO: beta times the signed margin) and dL/dlogp_t / m_t of each of
// its sequences' rows (the loss divided by units_in_step).
struct UnitTerms {
  double value = 0.0, z = 0.0, dvalue_dz = 0.0;
  double coef[2] = {0.0, 0.0};
};

SBP_HD UnitTerms sequence_unit(const SequenceTerms& t, const UnitSums& s) {
  UnitTerms u;
  const double P = t.units_in_step;
  switch (t.formula) {
    case SequenceFormula::dpo: {
      // ipo scores length-averaged log-probs (TRL: all_logps / loss_mask.sum(-1)).
      const bool ipo = t.dpo_loss == DpoLoss::ipo;
      const double nc = ipo ? s.weight[0] : 1.0, nr = ipo ? s.weight[1] : 1.0;
      u.z = (s.policy[0] / nc - s.policy[1] / nr) - (s.ref[0] / nc - s.ref[1] / nr);
      const Term term = dpo_pair_loss(u.z, t.dpo_loss, t.beta, t.label_smoothing);
      u.value = term.value;
      u.dvalue_dz = term.d;
      // dz/dlogp_t = +m_t / nc on chosen rows, -m_t / nr on rejected rows.
      u.coef[0] = term.d / (P * nc);
      u.coef[1] = -term.d / (P * nr);
      break;
    }
    case SequenceFormula::orpo: {
      const double nc = s.weight[0], nr = s.weight[1];
      const OrpoLogOdds o = orpo_log_odds(s.policy[0] / nc, s.policy[1] / nr);
      u.z = o.z;
      u.value = log_sigmoid(o.z);
      // d(-beta log sigmoid(z))/dz = -beta sigmoid(-z); da/dlogp_t = m_t / n.
      u.dvalue_dz = -t.beta / (1.0 + exp(o.z)) / P;
      u.coef[0] = u.dvalue_dz * o.dz_dchosen / nc;
      u.coef[1] = u.dvalue_dz * o.dz_drejected / nr;
      break;
    }
    case SequenceFormula::simpo: {
      // TRL's CPOTrainer with loss_type "simpo": logits = a_c - a_r - gamma / beta of the
      // length-averaged log-probs, the sigmoid pair loss of beta * logits (label smoothing as
      // DPO's); with cpo_alpha the chosen NLL, -cpo_alpha sum m_t logp_t / N, adds its
      // constant to the chosen rows' coefficient (N: nll_rows_in_step).
      const double nc = s.weight[0], nr = s.weight[1];
      u.z = (s.policy[0] / nc - s.policy[1] / nr) - t.gamma / t.beta;
      const Term term = dpo_pair_loss(u.z, DpoLoss::sigmoid, t.beta, t.label_smoothing);
      u.value = term.value;
      u.dvalue_dz = term.d;
      u.coef[0] = term.d / (P * nc) - t.cpo_alpha / t.nll_rows_in_step;
      u.coef[1] = -term.d / (P * nr);
      break;
    }
    case SequenceFormula::kto: {
      const double ratio = s.policy[0] - s.ref[0];
      // desirable: w (1 - sigmoid(x)), x = beta (ratio - KL), dx/dratio = beta;
      // undesirable: w (1 - sigmoid(x)), x = beta (KL - ratio), dx/dratio = -beta.
      const bool good = s.label == 1.0f;
      const double x = good ? t.beta * (ratio - t.kl) : t.beta * (t.kl - ratio);
      const double w = good ? t.desirable_weight : t.undesirable_weight;
      const double sig = 1.0 / (1.0 + exp(-x));
      u.z = x;
      u.value = w * (1.0 - sig);
      u.dvalue_dz = -w * sig * (1.0 - sig);
      u.coef[0] = u.dvalue_dz * (good ? t.beta : -t.beta) / P;
      break;
    }
  }
  return u;
}

// KTO's KL estimate (objective/kto.h) in two steps, so that its sums can stay on the device:
// one micro-batch's part, the sum over its S sequences (the KL pairs, kto_kl_batch) of the
// policy's minus the reference's completion sum (sum m_t logp_t over the sequence's rows
// [begin[s], begin[s + 1]) in row order); then the step's estimate from its P parts added in
// order, max(0, sum / sequences), 0 without sequences. The step (step/kto_step.cpp) and the
// backends (objective_kernels.h's kto_kl_part, sequence_token_grads) call these same functions.
// Offsets are clamped into [0, T] as in sequence_unit_grads.
SBP_HD double kto_kl_part(const float* logp, const float* ref, const float* weight,
                          const int32_t* begin, int64_t S, int64_t T) {
  double sum = 0.0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t a = begin[s] < 0 ? 0 : (begin[s] > T ? T : begin[s]);
    const int64_t b = begin[s + 1] > T ? T : begin[s + 1];
    double policy = 0.0, reference = 0.0;
    for (int64_t r = a; r < b; ++r) {
      policy += static_cast<double>(weight[r]) * logp[r];
      reference += static_cast<double>(weight[r]) * ref[r];
    }
    sum += policy - reference;
  }
  return sum;
}

SBP_HD double kto_kl_estimate(const double* parts, int64_t P, double sequences) {
  double sum = 0.0;
  for (int64_t p = 0; p < P; ++p) sum += parts[p];
  if (!(sequences > 0.0)) return 0.0;
  const double kl = sum / sequences;
  return kl > 0.0 ? kl : 0.0;  // std::max(0.0, kl)
}

// A row's dL/dlogp given its sequence's coefficient: float(coef m_t), plus ORPO's NLL constant
// on a chosen sequence's rows but its last (which has no target).
SBP_HD float sequence_row_grad(const SequenceTerms& t, double coef, float weight, bool nll_row) {
  if (nll_row) return static_cast<float>(coef * weight + -1.0 / t.nll_rows_in_step);
  return static_cast<float>(coef * weight);
}

// One unit's rows, for objective_kernels.h's sequence_token_grads (the CPU backend's loop over
// units and the CUDA kernel's thread run this same function): each of its sequences' sums over rows
// [begin[seq], begin[seq + 1]) in row order, as the objectives' pre-passes add them, the formula,
// then every one of those rows' dL/dlogp. ref and label may be null (ORPO; DPO). An offset
// outside [0, T] is clamped into it, so that a bad offset cannot reach outside the vectors.
// kl_parts (KTO, or null): the KL estimate's P parts, which replace terms.kl by
// kto_kl_estimate(kl_parts, P, terms.kl_sequences).
SBP_HD void sequence_unit_grads(const SequenceTerms& terms, int64_t unit, const float* logp,
                                const float* ref, const float* weight, const int32_t* begin,
                                const float* label, int64_t T, const double* kl_parts, int64_t P,
                                float* dlogp) {
  SequenceTerms t = terms;
  if (kl_parts) t.kl = kto_kl_estimate(kl_parts, P, terms.kl_sequences);
  const int per = sequences_per_unit(t);
  UnitSums s;
  int64_t lo[2] = {0, 0}, hi[2] = {0, 0};
  for (int k = 0; k < per; ++k) {
    const int64_t seq = unit * per + k;
    const int64_t a = begin[seq] < 0 ? 0 : (begin[seq] > T ? T : begin[seq]);
    const int64_t b = begin[seq + 1] < a ? a : (begin[seq + 1] > T ? T : begin[seq + 1]);
    lo[k] = a;
    hi[k] = b;
    for (int64_t r = a; r < b; ++r) {
      s.policy[k] += static_cast<double>(weight[r]) * logp[r];
      if (ref) s.ref[k] += static_cast<double>(weight[r]) * ref[r];
      s.weight[k] += weight[r];
    }
  }
  if (label) s.label = label[unit];
  const UnitTerms u = sequence_unit(t, s);
  for (int k = 0; k < per; ++k) {
    // ORPO's NLL: the chosen sequence's rows but its last, which has no target.
    const bool nll_seq = t.formula == SequenceFormula::orpo && k == 0;
    for (int64_t r = lo[k]; r < hi[k]; ++r)
      dlogp[r] = sequence_row_grad(t, u.coef[k], weight[r], nll_seq && r + 1 < hi[k]);
  }
}

}  // namespace sbp

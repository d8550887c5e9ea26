// The objectives' kernels' public calls (objective_kernels.h): each checks its call against the
// contract written above it there, exactly as it did as a Backend method (same checks, same
// order, same messages), then runs the kernel of the backend's kind as one of the backend's ops
// (Backend::run_extension: ownership, Access, the op profile's family and byte estimate).
#include "objective_kernels/objective_kernels.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend_checks.h"
#include "core/error.h"
#include "objective_kernels/kernel_table.h"

namespace sbp {

using namespace contract;

namespace {

constexpr ObjectiveKernels kCpuKernels{
    .policy_token_grads = cpu_policy_token_grads,
    .value_token_grads = cpu_value_token_grads,
    .sequence_token_grads = cpu_sequence_token_grads,
    .kto_kl_part = cpu_kto_kl_part,
    .ppo_rollout_rows = cpu_ppo_rollout_rows,
};
#if defined(STREAMBP_HAVE_CUDA)
constexpr ObjectiveKernels kCudaKernels{
    .policy_token_grads = cuda_policy_token_grads,
    .value_token_grads = cuda_value_token_grads,
    .sequence_token_grads = cuda_sequence_token_grads,
    .kto_kl_part = cuda_kto_kl_part,
    .ppo_rollout_rows = cuda_ppo_rollout_rows,
};
#endif

// The kernels of be's kind; none for the shape-only backend, whose ops compute nothing (a plan
// runs the checks and the ledger's allocations around them, not the kernels).
const ObjectiveKernels* kernels_for(const Backend& be) {
  switch (be.kind()) {
    case Backend::Kind::cpu: return &kCpuKernels;
    case Backend::Kind::cuda:
#if defined(STREAMBP_HAVE_CUDA)
      return &kCudaKernels;
#else
      break;  // no CUDA backend in this build
#endif
    case Backend::Kind::shape_only: return nullptr;
  }
  SBP_CHECK(false, be.name() + ": no objective kernels for this backend in this build");
  return nullptr;
}

}  // namespace

void policy_token_grads(Backend& be, const Tensor& dlogp, const Tensor& dentropy,
                        const Tensor& logp, const Tensor& rows, const PolicyTerms& terms,
                        const Tensor& ref) {
  const char* op = "policy_token_grads";
  const int64_t n = logp.numel();
  check_rows_vector(op, "logp", logp, DType::F32, n);
  check_rows_vector(op, "dlogp", dlogp, DType::F32, n);
  if (dentropy.defined()) check_rows_vector(op, "dentropy", dentropy, DType::F32, n);
  if (ref.defined()) check_rows_vector(op, "ref", ref, DType::F32, n);
  check_rows_table(op, "rows", rows, n, kPolicyRowWidth);
  SBP_CHECK(std::isfinite(terms.eps_low) && std::isfinite(terms.eps_high) &&
                std::isfinite(terms.beta) && std::isfinite(terms.entropy_coef),
            std::string(op) + ": the terms' scalars must be finite");
  std::vector<const Tensor*> tensors{&dlogp, &logp, &rows};
  if (dentropy.defined()) tensors.push_back(&dentropy);
  if (ref.defined()) tensors.push_back(&ref);
  const int64_t bytes = nb(dlogp) + nb(logp) + nb(rows) + (dentropy.defined() ? nb(dentropy) : 0) +
                        (ref.defined() ? nb(ref) : 0);
  const ObjectiveKernels* k = kernels_for(be);
  be.run_extension(op, OpFamily::elementwise, tensors, bytes, [&] {
    if (k) k->policy_token_grads(be, dlogp, dentropy, logp, rows, terms, ref);
  });
}

void value_token_grads(Backend& be, const Tensor& dvalue, const Tensor& value, const Tensor& rows,
                       const ValueTerms& terms) {
  const char* op = "value_token_grads";
  const int64_t n = value.numel();
  check_rows_vector(op, "value", value, DType::F32, n);
  check_rows_vector(op, "dvalue", dvalue, DType::F32, n);
  check_rows_table(op, "rows", rows, n, kValueRowWidth);
  SBP_CHECK(std::isfinite(terms.clip) && terms.clip >= 0.0,
            std::string(op) + ": the clip range must be finite and >= 0");
  std::vector<const Tensor*> tensors{&dvalue, &value, &rows};
  const int64_t bytes = nb(dvalue) + nb(value) + nb(rows);
  const ObjectiveKernels* k = kernels_for(be);
  be.run_extension(op, OpFamily::elementwise, tensors, bytes, [&] {
    if (k) k->value_token_grads(be, dvalue, value, rows, terms);
  });
}

void sequence_token_grads(Backend& be, const Tensor& dlogp, const Tensor& logp, const Tensor& ref,
                          const Tensor& weight, const Tensor& begin, const Tensor& label,
                          const SequenceTerms& terms, const Tensor& kl_parts) {
  const char* op = "sequence_token_grads";
  const int64_t T = logp.numel();
  check_rows_vector(op, "logp", logp, DType::F32, T);
  check_rows_vector(op, "dlogp", dlogp, DType::F32, T);
  check_rows_vector(op, "weight", weight, DType::F32, T);
  check_dtype(op, "begin", begin, DType::I32);
  const int64_t S = begin.numel() - 1, per = sequences_per_unit(terms);
  SBP_CHECK(S >= 0 && S % per == 0, arg(op, "begin", begin) +
                                        " must hold S + 1 offsets with S a "
                                        "multiple of " +
                                        num(per) + " sequences");
  const bool kto = terms.formula == SequenceFormula::kto;
  const bool wants_ref = reads_reference(terms);
  SBP_CHECK(ref.defined() == wants_ref, std::string(op) + ": ref must be " +
                                            (wants_ref ? "given" : "undefined") +
                                            " for this formula");
  if (wants_ref) check_rows_vector(op, "ref", ref, DType::F32, T);
  SBP_CHECK(label.defined() == kto,
            std::string(op) + ": label must be " + (kto ? "given (KTO)" : "undefined"));
  if (kto) check_rows_vector(op, "label", label, DType::F32, S);
  SBP_CHECK(std::isfinite(terms.beta) && std::isfinite(terms.label_smoothing) &&
                std::isfinite(terms.kl) && std::isfinite(terms.desirable_weight) &&
                std::isfinite(terms.undesirable_weight) && std::isfinite(terms.units_in_step) &&
                terms.units_in_step > 0.0 && std::isfinite(terms.nll_rows_in_step) &&
                terms.nll_rows_in_step > 0.0 && std::isfinite(terms.kl_sequences) &&
                std::isfinite(terms.gamma) && std::isfinite(terms.cpo_alpha),
            std::string(op) + ": the terms' scalars must be finite, the step's counts > 0");
  if (kl_parts.defined()) {
    SBP_CHECK(kto, std::string(op) + ": kl_parts is for the KTO formula only");
    check_double_parts(op, "kl_parts", kl_parts);
  }
  std::vector<const Tensor*> tensors{&dlogp, &logp, &weight, &begin};
  if (wants_ref) tensors.push_back(&ref);
  if (kto) tensors.push_back(&label);
  if (kl_parts.defined()) tensors.push_back(&kl_parts);
  const int64_t bytes = nb(dlogp) + nb(logp) + nb(weight) + nb(begin) + (wants_ref ? nb(ref) : 0) +
                        (kto ? nb(label) : 0) + (kl_parts.defined() ? nb(kl_parts) : 0);
  const ObjectiveKernels* k = kernels_for(be);
  be.run_extension(op, OpFamily::elementwise, tensors, bytes, [&] {
    if (k) k->sequence_token_grads(be, dlogp, logp, ref, weight, begin, label, terms, kl_parts);
  });
}

void kto_kl_part(Backend& be, const Tensor& part, const Tensor& logp, const Tensor& ref,
                 const Tensor& weight, const Tensor& begin) {
  const char* op = "kto_kl_part";
  const int64_t T = logp.numel();
  check_rows_vector(op, "logp", logp, DType::F32, T);
  check_rows_vector(op, "ref", ref, DType::F32, T);
  check_rows_vector(op, "weight", weight, DType::F32, T);
  check_dtype(op, "begin", begin, DType::I32);
  SBP_CHECK(begin.numel() >= 1, arg(op, "begin", begin) + " must hold S + 1 offsets");
  check_double_parts(op, "part", part);
  SBP_CHECK(part.numel() == 2, arg(op, "part", part) + " must hold one double (2 F32)");
  std::vector<const Tensor*> tensors{&part, &logp, &ref, &weight, &begin};
  const int64_t bytes = nb(part) + nb(logp) + nb(ref) + nb(weight) + nb(begin);
  const ObjectiveKernels* k = kernels_for(be);
  be.run_extension(op, OpFamily::elementwise, tensors, bytes, [&] {
    if (k) k->kto_kl_part(be, part, logp, ref, weight, begin);
  });
}

void ppo_rollout_rows(Backend& be, const Tensor& policy_rows, const Tensor& value_rows,
                      const Tensor& moments, const Tensor& logp, const Tensor& ref,
                      const Tensor& values, const Tensor& weight, const Tensor& begin,
                      const Tensor& seq, const PpoRolloutConfig& cfg) {
  const char* op = "ppo_rollout_rows";
  const int64_t T = logp.numel();
  check_rows_vector(op, "logp", logp, DType::F32, T);
  check_rows_vector(op, "ref", ref, DType::F32, T);
  check_rows_vector(op, "values", values, DType::F32, T);
  check_rows_vector(op, "weight", weight, DType::F32, T);
  check_dtype(op, "begin", begin, DType::I32);
  const int64_t S = begin.numel() - 1;
  SBP_CHECK(S >= 1, arg(op, "begin", begin) + " must hold S + 1 offsets, S >= 1");
  check_rows_table(op, "seq", seq, S, kPpoSequenceWidth);
  check_rows_table(op, "policy_rows", policy_rows, T, kPolicyRowWidth);
  check_rows_table(op, "value_rows", value_rows, T, kValueRowWidth);
  check_double_parts(op, "moments", moments);
  SBP_CHECK(moments.numel() == 16 * S,
            arg(op, "moments", moments) + " must hold 8 S doubles (16 S F32), S = " + num(S));
  SBP_CHECK(std::isfinite(cfg.kl_coef) && cfg.kl_coef >= 0.0 && cfg.gamma >= 0.0 &&
                cfg.gamma <= 1.0 && cfg.lam >= 0.0 && cfg.lam <= 1.0,
            std::string(op) + ": kl_coef must be finite and >= 0, gamma and lam in [0, 1]");
  std::vector<const Tensor*> tensors{&policy_rows, &value_rows, &moments, &logp, &ref,
                                     &values,      &weight,     &begin,   &seq};
  const int64_t bytes = nb(policy_rows) + nb(value_rows) + nb(moments) + nb(logp) + nb(ref) +
                        nb(values) + nb(weight) + nb(begin) + nb(seq);
  const ObjectiveKernels* k = kernels_for(be);
  be.run_extension(op, OpFamily::elementwise, tensors, bytes, [&] {
    if (k)
      k->ppo_rollout_rows(be, policy_rows, value_rows, moments, logp, ref, values, weight, begin,
                          seq, cfg);
  });
}

}  // namespace sbp

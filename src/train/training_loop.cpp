#include "train/training_loop.h"

#include <cmath>

#include "optim/lora_adamw.h"

namespace sbp {

int64_t TrainingLoop::run(int64_t first, int64_t last, StepHooks& hooks) {
  int64_t done = first;
  while (done < last) {
    const StepRecord s = step(done + 1, hooks);
    done = s.step;
    if (!hooks.after_step(s)) break;
  }
  return done;
}

StepRecord TrainingLoop::step(int64_t step, StepHooks& hooks) {
  StepRecord s;
  s.step = step;
  s.started = std::chrono::steady_clock::now();
  const StepBatches batches = hooks.next_batches(step);
  s.micro_batches = batches.step_micro_batches;
  s.lr = schedule_.at(step);
  // The step's work is queued, then read once (docs/CUDA.md "Synchronisations"): the gradient
  // norms wait for the device, and what the step left on it (SFT's log-probs) is read after
  // that wait and before the clipping queues more work, so that the read finds it idle.
  s.result = runner_.start(batches);
  measure_norms(s);
  runner_.finish(s.result);
  clip(s);
  s.updated = hooks.accept(s);
  if (s.updated) {
    const auto t0 = std::chrono::steady_clock::now();
    update(s.lr);
    s.update_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return s;
}

void TrainingLoop::measure_norms(StepRecord& s) {
  if (!models_.has_value()) {
    s.grad_norm = models_.has_lora() ? lora_grad_norm(models_.lora_grads(), be_)
                                     : models_.policy().grad_norm();
    s.value_grad_norm = 0.0;
    return;
  }
  // PPO: the value model is clipped and stepped on its own, its norm measured with the
  // policy's in one wait: the sums of squares of both sets, each summed in order (the bits of
  // the one-set calls). With offload: optimizer the sums are the host's, each model's alone
  // (the same bits: each set is summed in its own order either way).
  if (models_.value().grads_on_host()) {
    const double policy_ss =
        models_.has_lora() ? be_.sum_squares(lora_parts()) : models_.policy().local_sum_squares();
    s.grad_norm = models_.has_lora() ? std::sqrt(policy_ss) : models_.policy().norm_of(policy_ss);
    s.value_grad_norm = models_.value().norm_of(models_.value().local_sum_squares());
    return;
  }
  std::vector<Tensor> parts;
  if (models_.has_lora())
    parts = lora_parts();
  else
    parts = models_.policy().norm_parts();
  const size_t policy_parts = parts.size();
  for (const Tensor& t : models_.value().norm_parts()) parts.push_back(t);
  std::vector<double> each(parts.size());
  be_.sum_squares_each(parts, each);
  double policy_ss = 0.0, value_ss = 0.0;
  for (size_t i = 0; i < each.size(); ++i) (i < policy_parts ? policy_ss : value_ss) += each[i];
  s.grad_norm = models_.has_lora() ? std::sqrt(policy_ss) : models_.policy().norm_of(policy_ss);
  s.value_grad_norm = models_.value().norm_of(value_ss);
}

std::vector<Tensor> TrainingLoop::lora_parts() {
  std::vector<Tensor> parts;
  for (size_t i = 0; i < models_.lora_grads().size(); ++i)
    parts.push_back(models_.lora_grads().tensor(i));
  return parts;
}

void TrainingLoop::clip(const StepRecord& s) {
  if (models_.has_lora())
    scale_lora_grads(models_.lora_grads(), be_, max_norm_, s.grad_norm);
  else
    models_.policy().clip_to(max_norm_, s.grad_norm);
  if (models_.has_value()) models_.value().clip_to(max_norm_, s.value_grad_norm);
}

std::string first_nonfinite_weight(ModelSet& models, Backend& be) {
  auto scan = [&](const auto& set) -> std::string {
    for (size_t i = 0; i < set.size(); ++i)
      if (!std::isfinite(be.sum_squares(set.tensor(i)))) return set.name(i);
    return "";
  };
  std::string bad;
  if (models.has_lora()) {
    bad = scan(models.lora_weights());
  } else if (models.policy().weight_hook()) {
    // ZeRO-3: this rank's slices (a tensor is named by the rank that holds its bad part).
    const std::vector<Tensor> slices = models.policy().weight_slices();
    for (size_t i = 0; i < slices.size() && bad.empty(); ++i)
      if (slices[i].numel() > 0 && !std::isfinite(be.sum_squares(slices[i])))
        bad = models.policy_weights().name(i);
  } else {
    bad = scan(models.policy_weights());
  }
  if (bad.empty() && models.has_value()) bad = scan(models.value_weights());
  return bad;
}

void TrainingLoop::update(double lr) {
  const auto rate = static_cast<float>(lr);
  if (models_.has_lora())
    models_.lora_optimizer()->step(models_.lora_weights(), models_.lora_grads(), be_, rate);
  else
    models_.policy().update(models_.policy_weights(), rate);
  if (models_.has_value()) models_.value().update(models_.value_weights(), rate);
}

}  // namespace sbp

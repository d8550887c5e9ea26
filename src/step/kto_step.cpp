// KTO on the step runner (step_runner.h): first, for every micro-batch and before any backward,
// the KL estimate's sums (the policy, no grad, and the reference on the micro-batch's mismatched
// pairs, kto_kl_batch); the step's KL is their mean over every sequence of the step, clamped at
// 0. Then per micro-batch the reference's log-probs and the policy's backward. The loss is the
// mean over the step's sequences; the held-out loss is the same over the held-out sequences,
// with the held-out set's KL.
//
// One process without a context group keeps the estimate on the device: each micro-batch's part
// (objective_kernels.h's kto_kl_part) goes into a device vector that the gradient passes read
// (objective_kernels.h's sequence_token_grads' kl_parts), and the host computes the same value from
// the same log-probs at the step's end, so the step waits once, at its end. With several ranks the
// parts of every rank are summed on the host first (Communicator::sum): one wait before the
// gradient passes, for all the micro-batches' forwards at once.
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "objective/kto.h"
#include "objective/sequence_rows.h"
#include "objective/sequence_terms.h"
#include "objective_kernels/objective_kernels.h"
#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_context.h"
#include "step/step_runner.h"

namespace sbp {

namespace {

// A micro-batch's KL pairs scored by the policy (no grad) and by the reference; their
// log-probs reach the host with the backend's next wait.
struct KlScored {
  Batch kl;
  ReferenceLogp policy, reference;  // (T) each
};

// The micro-batch's part of the KL estimate on the host: kto_kl_part, the backends' function,
// on the host copies (after the wait).
double host_part(const KlScored& s) {
  const SequenceRows rows(s.kl);
  const std::vector<int32_t> begin = offsets_i32(rows.begin);  // (S + 1)
  return kto_kl_part(s.policy.host->data(), s.reference.host->data(), rows.weight.data(),
                     begin.data(), rows.num_sequences(), rows.num_rows());
}

// Queues the two forwards of every batch's KL pairs (no wait). With `parts` (2 P) defined,
// also each batch's part of the estimate into its double there, on the device.
std::vector<KlScored> score_kl(StepContext& ctx, const std::vector<const Batch*>& batches,
                               const Tensor& parts) {
  Backend& be = ctx.backend();
  std::vector<KlScored> scored;
  for (size_t i = 0; i < batches.size(); ++i) {
    KlScored& s = scored.emplace_back();
    s.kl = kto_kl_batch(*batches[i]);
    MicroBatchPrep prep(s.kl, be, ctx.pool());
    Engine policy = ctx.policy_engine(), reference = ctx.reference_engine();
    const bool device = parts.defined();
    Buffer policy_logp, reference_logp;  // (T) each, with `parts`
    s.policy = ctx.logp_at_next_wait(policy, prep.for_model(*ctx.models().policy.model.cfg),
                                        device ? &policy_logp : nullptr);
    s.reference = ctx.logp_at_next_wait(reference, prep.for_model(ctx.reference_config()),
                                           device ? &reference_logp : nullptr);
    if (!device) continue;
    const SequenceRows rows(s.kl);
    const int64_t T = rows.num_rows(), S = rows.num_sequences();
    const Buffer weight = ctx.pool().allocate(Category::other, DType::F32, {T});     // (T)
    const Buffer begin = ctx.pool().allocate(Category::other, DType::I32, {S + 1});  // (S + 1)
    if (be.computes()) {
      upload_f32(weight.view(), rows.weight);
      upload_i32(begin.view(), offsets_i32(rows.begin));
    }
    const int64_t at = 2 * static_cast<int64_t>(i);
    kto_kl_part(be, parts.slice_rows(at, at + 2), policy_logp.view(), reference_logp.view(),
                weight.view(), begin.view());
  }
  return scored;
}

// The estimate over every rank, on the host: one wait for every batch's forwards and one sum
// over the ranks, which also gives the sequences of every rank's batches (each batch's KL pairs
// are as many as its sequences, kto_kl_batch).
struct KlOnHost {
  double estimate = 0.0;
  double sequences = 0.0;  // every rank's
};
KlOnHost kl_on_host(StepContext& ctx, const std::vector<const Batch*>& batches) {
  const std::vector<KlScored> scored = score_kl(ctx, batches, Tensor());
  ctx.backend().finish_reads();  // the one wait
  double kl[2] = {0.0, 0.0};        // sum of the parts, sequences
  for (const KlScored& s : scored) {
    kl[0] += host_part(s);
    kl[1] += static_cast<double>(s.kl.seq_lens.size());
  }
  ctx.comm().sum(kl);
  return {.estimate = kto_kl_estimate(&kl[0], 1, kl[1]), .sequences = kl[1]};
}

void run_kto(StepContext& ctx, const StepBatches& step, StepResult& r) {
  Communicator& comm = ctx.comm();
  std::vector<const Batch*> batches;
  double sequences = 0.0;  // the step's, every rank's
  for (const MicroBatch& mb : step.micro) {
    batches.push_back(&mb.batch);
    sequences += static_cast<double>(mb.batch.seq_lens.size());
  }
  KtoKl kl;
  Buffer parts;  // (2 P) the estimate's parts on the device, read by every gradient pass below
  if (comm.size() == 1 && !ctx.context_parallel() && !batches.empty()) {
    const int64_t P = static_cast<int64_t>(batches.size());
    parts = ctx.pool().allocate(Category::other, DType::F32, {2 * P});
    auto scored =
        std::make_shared<const std::vector<KlScored>>(score_kl(ctx, batches, parts.view()));
    auto value = std::make_shared<std::optional<double>>();
    kl = {.parts = parts.view(),
          .sequences = sequences,
          .host = [scored, value, &be = ctx.backend(), sequences] {
            if (!*value) {
              be.finish_reads();  // already done at the step's end: no wait then
              std::vector<double> part;
              for (const KlScored& s : *scored) part.push_back(host_part(s));
              *value = kto_kl_estimate(part.data(), static_cast<int64_t>(part.size()), sequences);
            }
            return **value;
          }};
  } else {
    const KlOnHost k = kl_on_host(ctx, batches);
    kl.value = k.estimate;
    sequences = k.sequences;
  }
  // The objectives are kept to the step's end: the host sees the reference's and the pre-pass's
  // log-probs there, with the step's one wait (objective.h sequence_terms).
  ctx.for_each_slot(step, [&](size_t i, int64_t slot) {
    const MicroBatch& mb = step.micro[i];
    MicroBatchPrep prep(mb.batch, ctx.backend(), ctx.pool());
    Engine reference = ctx.reference_engine();
    Buffer ref_device;  // (T) the reference's log-probs, read on the device by the policy's pass
    ReferenceLogp ref =
        ctx.logp_at_next_wait(reference, prep.for_model(ctx.reference_config()), &ref_device);
    KtoObjective& objective =
        ctx.keep(std::make_unique<KtoObjective>(mb.batch, std::move(ref), mb.rewards, kl,
                                                  ctx.objective().kto, sequences),
                   static_cast<double>(mb.batch.seq_lens.size()));
    ctx.backward_slot(ctx.models().policy, prep, objective, slot, ctx.logp_slot(r, i));
  });
}

double evaluate_kto(StepContext& ctx, std::span<const MicroBatch> eval) {
  Communicator& comm = ctx.comm();
  const KtoConfig& cfg = ctx.objective().kto;
  const std::vector<const MicroBatch*> share = ctx.eval_share(eval);
  std::vector<const Batch*> mine;  // this rank's held-out batches
  for (const MicroBatch* mb : share) mine.push_back(&mb->batch);
  const double eval_kl = kl_on_host(ctx, mine).estimate;
  double sums[2] = {0.0, 0.0};  // loss, sequences
  for (const MicroBatch* m : share) {
    const MicroBatch& mb = *m;
    MicroBatchPrep prep(mb.batch, ctx.backend(), ctx.pool());
    const std::vector<float> pol =
        ctx.policy_engine().score(prep.for_model(*ctx.models().policy.model.cfg)).logp;
    const std::vector<float> ref =
        ctx.reference_engine().score(prep.for_model(ctx.reference_config())).logp;
    // KtoObjective's formulas, forward only: its pre-pass on the whole batch as one block.
    KtoObjective objective(mb.batch, ref, mb.rewards, eval_kl, cfg, 1.0);
    TokenChunk all;
    all.logp = pol;
    objective.prepass(0, all);
    objective.finish_prepass(0);
    sums[0] += objective.loss();
    sums[1] += static_cast<double>(mb.batch.seq_lens.size());
  }
  comm.sum(sums);
  return sums[1] > 0.0 ? sums[0] / sums[1] : 0.0;
}

}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_steps.cpp registers it.
extern const ObjectiveStep kKtoStep = {ObjectiveKind::kto, run_kto, evaluate_kto};

}  // namespace sbp

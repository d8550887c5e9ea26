// The sequence-level route (head_route.h SequenceRoute: DPO, ORPO, KTO). On one process the
// pre-pass's log-probs stay on the device, the backend computes every row's gradient from them
// (objective_kernels.h's sequence_token_grads), and the host sees the pre-pass only at `later` (now
// without). With a context group the per-sequence sums span the ranks, which the host sums: the
// route's host version runs instead.
#include <algorithm>

#include "core/error.h"
#include "engine/chunk_loops.h"
#include "engine/head_routes.h"
#include "objective/sequence_rows.h"
#include "objective_kernels/objective_kernels.h"

namespace sbp {

namespace {

// The route's constants on the device, uploaded without a wait: (T) row weights, (S + 1)
// sequence offsets, (S) labels (KTO), and the reference's (T) log-probs where they are only on
// the host (a reference scored with a context group, or an objective built from host values).
struct SequenceUploads {
  Buffer weight, begin, label, ref_upload;
  Tensor ref;  // (T) F32 or undefined

  SequenceUploads(const HeadPass& pass, const SequenceInputs& in) {
    const int64_t T = pass.step.size();
    const int64_t S = static_cast<int64_t>(in.begin.size()) - 1;
    SBP_CHECK(static_cast<int64_t>(in.weight.size()) == T && S >= 0 && in.begin.back() == T &&
                  T <= INT32_MAX,
              "sequence objective: its rows do not match the batch");
    weight = pass.pool.allocate(Category::other, DType::F32, {T});                        // (T)
    begin = pass.pool.allocate(Category::other, DType::I32, {S + 1});                     // (S + 1)
    if (!in.label.empty()) label = pass.pool.allocate(Category::other, DType::F32, {S});  // (S)
    if (in.reference && in.reference->device.defined()) {
      ref = in.reference->device;
    } else if (in.reference) {
      ref_upload = pass.pool.allocate(Category::other, DType::F32, {T});  // (T)
      ref = ref_upload.view();
    }
    if (!pass.be.computes()) return;
    upload_f32(weight.view(), in.weight);
    upload_i32(begin.view(), offsets_i32(in.begin));
    if (label.defined()) upload_f32(label.view(), in.label);
    if (ref_upload.defined()) upload_f32(ref_upload.view(), *in.reference->host);
  }
  void release() {
    weight.reset();
    begin.reset();
    label.reset();
    ref_upload.reset();
  }
};

}  // namespace

void run_head_route(const HeadPass& pass, const SequenceRoute& route) {
  if (pass.cs.split()) return run_head_route(pass, host_chunks(route));
  const int64_t T = pass.step.size(), hc = pass.hc;
  const RowPiece whole{.begin = 0, .end = T, .local = 0, .owner = 0};  // one process: every row
  SequenceUploads up(pass, route.inputs);
  HeadPassRows pre(pass.be, pass.pool, HeadKind::lm, false, T);  // (T) the pre-pass's log-probs
  Buffer dlogp;                                                  // (T) every row's dL/dlogp
  HeadPassRows::Host host;
  // Once the pre-pass's blocks are all kept: the gradients from them, then the pre-pass's one
  // read (at the step's end, given `later`).
  auto gradients = [&] {
    dlogp = pass.pool.allocate(Category::other, DType::F32, {T});
    sequence_token_grads(pass.be, dlogp.view(), pre.logp(), up.ref, up.weight.view(),
                         up.begin.view(), up.label.defined() ? up.label.view() : Tensor(),
                         route.terms, route.inputs.kl_parts);
    host = pre.read(/*at_next_wait=*/pass.later != nullptr);
    up.release();
  };
  const ChunkRange range(T, hc, pass.be);
  // With a single block the gradient pass reuses the pre-pass's block.
  const bool one_block = hc >= T;
  if (!one_block) {
    for_chunks(range, [&](int64_t s, int64_t e) {
      pre.keep(pass.block(whole, s, e, false, /*to_host=*/false), s);
    });
    gradients();
  }
  for_chunks(range, [&](int64_t s, int64_t e) {
    HeadBlock b = pass.block(whole, s, e, false, /*to_host=*/false);
    if (one_block) {
      pre.keep(b, s);
      gradients();
    }
    b.grads_from(dlogp.view().slice_rows(s, e));
    pass.backward(b, whole, s, e);
  });
  dlogp.reset();
  if (!pass.be.computes()) return;
  // The host's pre-pass, for the loss and statistics: the blocks' rows in row order, as the
  // host route shows them, so the same sums.
  auto read = [host, add = route.add_prepass, finish = route.finish, T, hc] {
    for (int64_t s = 0; s < T; s += hc) add(host.chunk(s, std::min(T, s + hc) - s, s));
    finish();
  };
  if (pass.later)
    pass.later->add(read);
  else
    read();
}

}  // namespace sbp

// Misuse of every Backend op (wrong shapes, wrong dtypes, bad scalars) against EVERY backend,
// the shape-only planner included: each case must throw ShapeError with a message that names
// the op and the argument. So a plan rejects what a run would reject. (The converse, that every
// backend accepts every valid call, is what the ops_*_test suites show: they run on all of
// them.) Misuse that only shows in index contents (token id >= V, ...) needs the data and is
// tested per op, on the backends that compute.
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "backend/backend_suite.h"

namespace sbp {
namespace {

class BackendMisuse : public test::BackendOps {
 protected:
  // A tensor of zeros, kept alive by the fixture.
  Tensor t(Shape s, DType dt = DType::F32) {
    keep_.push_back(up(test::Vec(static_cast<size_t>(s.numel()), 0.0), s, dt));
    return keep_.back().view();
  }

 private:
  std::deque<Buffer> keep_;
};

struct Misuse {
  std::string op;        // the Backend method; the message starts with "<op>: "
  std::string fragment;  // and names the culprit
  std::function<void()> call;
};

constexpr DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16, I32 = DType::I32;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST_P(BackendMisuse, RejectsEveryCase) {
  // Valid operands, each case spoils one thing.
  const int64_t n = 4, d = 8, V = 11, H = 4, G = 2, h = 4, Hh = H * h, Gh = G * h, Tk = 6;
  const AttentionDims dims{H, G, h, 0.5f};
  const Tensor x = t({n, d}), y = t({n, d}), g = t({d}), dx = t({n, d}), dg = t({d});
  const Tensor A = t({n, 3}), B = t({3, 5}), C = t({n, 5});
  const Tensor table = t({10, h}), pos = t({n}, I32), qx = t({n, Hh});
  const Tensor q = t({n, Hh}), k = t({Tk, Gh}), v = t({Tk, Gh}), out = t({n, Hh});
  const Tensor lse_a = t({n, H}), seg = t({Tk}, I32);
  const Tensor dq = t({n, Hh}), dk = t({Tk, Gh}), dv = t({Tk, Gh}), dout = t({n, Hh});
  const Tensor emb = t({V, d}), tok = t({n}, I32);
  const Tensor logits = t({n, V}), lse = t({n}), logp = t({n}), tgt = t({n}, I32);
  const Tensor dlogp = t({n}), ent = t({n}), dent = t({n}), amax = t({n}, I32);
  const Tensor p = t({n, d}), gr = t({n, d}), m = t({n, d}), vv = t({n, d});
  const std::vector<float> inv = {1.0f, 0.5f};  // h/2 entries
  const AdamWStep ok{.lr = 1e-3f};
  auto adamw_with = [&](auto edit) {  // adamw_step with valid operands and one edit of `ok`
    AdamWStep s = ok;
    edit(s);
    be.adamw_step(p, gr, m, vv, s);
  };
  // k and v of 2^31 rows: past the I32 segment starts. Views only; nothing reads them.
  const Tensor huge_k(nullptr, F32, {int64_t{1} << 31, Gh}), huge_v = huge_k;

  const std::vector<Misuse> cases = {
      // ---- gemm ----
      {"gemm", "op(A) must be (M, K)",
       [&] {
         be.gemm(C, A, false, t({4, 5}), false, 1, 0);
       }},
      {"gemm", "C F32(5, 4)",
       [&] {
         be.gemm(t({5, 4}), A, false, B, false, 1, 0);
       }},
      {"gemm", "op(A)", [&] { be.gemm(C, A, true, B, false, 1, 0); }},
      {"gemm", "A I32",
       [&] {
         be.gemm(C, t({n, 3}, I32), false, B, false, 1, 0);
       }},
      {"gemm", "alpha = nan", [&] { be.gemm(C, A, false, B, false, kNaN, 0); }},
      {"gemm", "beta = inf", [&] { be.gemm(C, A, false, B, false, 1, kInf); }},
      // ---- elementwise ----
      {"fill", "x I32", [&] { be.fill(t({3}, I32), 0); }},
      {"fill", "x F32()", [&] { be.fill(Tensor(), 0); }},
      {"fill_normal", "x I32", [&] { be.fill_normal(t({3}, I32), 0, 1, 1, 2); }},
      {"fill_normal", "std -1", [&] { be.fill_normal(x, 0, -1, 1, 2); }},
      {"fill_normal", "mean nan", [&] { be.fill_normal(x, kNaN, 1, 1, 2); }},
      {"fill_normal", "std inf", [&] { be.fill_normal(x, 0, kInf, 1, 2); }},
      {"copy", "numel",
       [&] {
         be.copy(t({12}), t({4, 5}));
       }},
      {"copy", "dtypes", [&] { be.copy(t({4}), t({4}, I32)); }},
      {"copy", "dtypes", [&] { be.copy(t({4}), t({4}, F16)); }},
      {"add_inplace", "x F32(3)", [&] { be.add_inplace(t({4}), t({3})); }},
      {"add_inplace", "y I32", [&] { be.add_inplace(t({4}, I32), t({4}, I32)); }},
      {"scale_inplace", "x I32", [&] { be.scale_inplace(t({4}, I32), 2); }},
      {"sum_squares", "x F16", [&] { be.sum_squares(t({4}, F16)); }},
      {"add_bias", "b F32(7)", [&] { be.add_bias(x, t({d - 1})); }},
      {"add_bias", "b I32", [&] { be.add_bias(x, t({d}, I32)); }},
      {"bias_backward", "db F32(9)", [&] { be.bias_backward(t({d + 1}), x); }},
      {"bias_backward", "dy I32",
       [&] {
         be.bias_backward(g, t({n, d}, I32));
       }},
      // ---- rmsnorm ----
      {"rmsnorm_forward", "whole number of rows", [&] { be.rmsnorm_forward(y, x, t({3}), 1e-6f); }},
      {"rmsnorm_forward", "whole number of rows", [&] { be.rmsnorm_forward(y, x, t({0}), 1e-6f); }},
      {"rmsnorm_forward", "y F32(4, 7)",
       [&] {
         be.rmsnorm_forward(t({n, d - 1}), x, g, 1e-6f);
       }},
      {"rmsnorm_forward", "eps = -1", [&] { be.rmsnorm_forward(y, x, g, -1.0f); }},
      {"rmsnorm_forward", "eps = nan", [&] { be.rmsnorm_forward(y, x, g, kNaN); }},
      {"rmsnorm_forward", "x I32",
       [&] {
         be.rmsnorm_forward(y, t({n, d}, I32), g, 1e-6f);
       }},
      {"rmsnorm_backward", "dg F32(7)", [&] { be.rmsnorm_backward(dx, t({d - 1}), y, x, g, 0); }},
      {"rmsnorm_backward", "dx F32(3, 8)",
       [&] {
         be.rmsnorm_backward(t({3, d}), dg, y, x, g, 0);
       }},
      {"rmsnorm_backward", "eps = inf", [&] { be.rmsnorm_backward(dx, dg, y, x, g, kInf); }},
      {"rmsnorm_backward", "dy I32",
       [&] {
         be.rmsnorm_backward(dx, dg, t({n, d}, I32), x, g, 0);
       }},
      // ---- rope ----
      {"rope_table", "h even",
       [&] {
         be.rope_table(t({10, 5}), inv);
       }},
      {"rope_table", "h/2 = 2", [&] { be.rope_table(table, std::vector<float>{1.0f}); }},
      {"rope_table", "table BF16",
       [&] {
         be.rope_table(t({10, h}, BF16), inv);
       }},
      {"rope_table", "inv_freq[1] = nan",
       [&] {
         be.rope_table(table, std::vector<float>{1.0f, kNaN});
       }},
      {"rope_table", "table F32(10, 2, 2)",
       [&] {
         be.rope_table(t({10, 2, 2}), inv);
       }},
      {"rope_forward", "positions F32", [&] { be.rope_forward(qx, t({n}), table); }},
      {"rope_forward", "positions I32(3)", [&] { be.rope_forward(qx, t({3}, I32), table); }},
      {"rope_forward", "x F32(4, 6)",
       [&] {
         be.rope_forward(t({n, 6}), pos, table);
       }},
      {"rope_forward", "h even",
       [&] {
         be.rope_forward(t({n, 15}), pos, t({10, 5}));
       }},
      {"rope_forward", "x I32",
       [&] {
         be.rope_forward(t({n, Hh}, I32), pos, table);
       }},
      {"rope_backward", "positions I32(5)", [&] { be.rope_backward(qx, t({5}, I32), table); }},
      {"rope_backward", "table BF16",
       [&] {
         be.rope_backward(qx, pos, t({10, h}, BF16));
       }},
      // ---- swiglu ----
      {"swiglu_forward", "up F32(4, 7)",
       [&] {
         be.swiglu_forward(x, y, t({n, d - 1}));
       }},
      {"swiglu_forward", "out I32",
       [&] {
         be.swiglu_forward(t({n, d}, I32), x, y);
       }},
      {"swiglu_backward", "dgate F32(8)", [&] { be.swiglu_backward(t({d}), dx, x, y, x); }},
      {"swiglu_backward", "dup F32(4, 9)",
       [&] {
         be.swiglu_backward(dx, t({n, d + 1}), x, y, x);
       }},
      {"swiglu_backward", "gate I32",
       [&] {
         be.swiglu_backward(dx, dx, x, t({n, d}, I32), x);
       }},
      // ---- geglu (Gemma) ----
      {"geglu_forward", "up F32(4, 7)",
       [&] {
         be.geglu_forward(x, y, t({n, d - 1}));
       }},
      {"geglu_forward", "out I32",
       [&] {
         be.geglu_forward(t({n, d}, I32), x, y);
       }},
      {"geglu_backward", "dgate F32(8)", [&] { be.geglu_backward(t({d}), dx, x, y, x); }},
      {"geglu_backward", "gate I32",
       [&] {
         be.geglu_backward(dx, dx, x, t({n, d}, I32), x);
       }},
      // ---- softcap (Gemma) ----
      {"softcap_forward", "cap = 0", [&] { be.softcap_forward(y, 0.0f); }},
      {"softcap_forward", "cap = nan", [&] { be.softcap_forward(y, kNaN); }},
      {"softcap_forward", "x I32", [&] { be.softcap_forward(t({4}, I32), 1.0f); }},
      {"softcap_backward", "dx F32(3)", [&] { be.softcap_backward(t({3}), y, 1.0f); }},
      {"softcap_backward", "cap = -1", [&] { be.softcap_backward(dx, y, -1.0f); }},
      {"rmsnorm_forward", "weight_offset = inf",
       [&] {
         be.rmsnorm_forward(y, x, g, 1e-6f, kInf);
       }},
      {"rmsnorm_backward", "weight_offset = nan",
       [&] {
         be.rmsnorm_backward(dx, dg, y, x, g, 1e-6f, kNaN);
       }},
      // ---- attention ----
      {"attention_forward", "not a multiple of G=3",
       [&] {
         be.attention_forward(out, lse_a, q, k, v, seg, 0, {H, 3, h, 0.5f});
       }},
      {"attention_forward", "softmax scale nan",
       [&] {
         be.attention_forward(out, lse_a, q, k, v, seg, 0, {H, G, h, kNaN});
       }},
      {"attention_forward", "must be positive",
       [&] {
         be.attention_forward(out, lse_a, q, k, v, seg, 0, {H, G, 0, 0.5f});
       }},
      {"attention_forward", "sliding window -1 must be >= 0",
       [&] {
         be.attention_forward(out, lse_a, q, k, v, seg, 0, {H, G, h, 0.5f, -1});
       }},
      {"attention_forward", "queries [3, 7)",
       [&] { be.attention_forward(out, lse_a, q, k, v, seg, 3, dims); }},
      {"attention_forward", "queries [-1, 3)",
       [&] { be.attention_forward(out, lse_a, q, k, v, seg, -1, dims); }},
      {"attention_forward", "key offset 1 needs a sliding window",
       [&] {
         be.attention_forward(out, lse_a, q, k.slice_rows(1, k.rows()), v.slice_rows(1, v.rows()),
                              seg, 2, {H, G, h, 0.5f, 0, 1});
       }},
      {"attention_forward", "key offset 2 needs a sliding window with k0 <= q_offset - window + 1",
       [&] {
         be.attention_forward(out.slice_rows(0, 1), lse_a.slice_rows(0, 1), q.slice_rows(0, 1),
                              k.slice_rows(2, k.rows()), v.slice_rows(2, v.rows()), seg, 3,
                              {H, G, h, 0.5f, 3, 2});
       }},
      {"attention_forward", "key offset -1 must be in [0, 2^31)",
       [&] {
         be.attention_forward(out, lse_a, q, k, v, seg, 0, {H, G, h, 0.5f, 2, -1});
       }},
      {"attention_forward", "lse F32(4, 2)",
       [&] {
         be.attention_forward(out, t({n, 2}), q, k, v, seg, 0, dims);
       }},
      {"attention_forward", "lse BF16",
       [&] {
         be.attention_forward(out, t({n, H}, BF16), q, k, v, seg, 0, dims);
       }},
      {"attention_forward", "seg_start F32",
       [&] { be.attention_forward(out, lse_a, q, k, v, t({Tk}), 0, dims); }},
      {"attention_forward", "seg_start I32(5)",
       [&] { be.attention_forward(out, lse_a, q, k, v, t({5}, I32), 2, dims); }},
      {"attention_forward", "q F32(4, 12)",
       [&] {
         be.attention_forward(t({n, 12}), lse_a, t({n, 12}), k, v, seg, 0, dims);
       }},
      {"attention_forward", "k F32(6, 8) and v F32(5, 8)",
       [&] {
         be.attention_forward(out, lse_a, q, k, t({5, Gh}), seg, 0, dims);
       }},
      {"attention_forward", "out F32(4, 15)",
       [&] {
         be.attention_forward(t({n, Hh - 1}), lse_a, q, k, v, seg, 0, dims);
       }},
      {"attention_forward", "do not fit the I32 segment starts",
       [&] { be.attention_forward(out, lse_a, q, huge_k, huge_v, seg, 0, dims); }},
      {"attention_forward", "q I32",
       [&] {
         be.attention_forward(out, lse_a, t({n, Hh}, I32), k, v, seg, 0, dims);
       }},
      {"attention_backward", "dk F32(5, 8)",
       [&] {
         be.attention_backward(dq, t({5, Gh}), dv, dout, q, k, v, out, lse_a, seg, 0, dims);
       }},
      {"attention_backward", "dq F32(3, 16)",
       [&] {
         be.attention_backward(t({3, Hh}), dk, dv, dout, q, k, v, out, lse_a, seg, 0, dims);
       }},
      {"attention_backward", "dout F32(4, 8)",
       [&] {
         be.attention_backward(dq, dk, dv, t({n, 8}), q, k, v, out, lse_a, seg, 0, dims);
       }},
      {"attention_backward", "dv I32",
       [&] {
         be.attention_backward(dq, dk, t({Tk, Gh}, I32), dout, q, k, v, out, lse_a, seg, 0, dims);
       }},
      {"attention_backward", "not a multiple of G=3",
       [&] {
         be.attention_backward(dq, dk, dv, dout, q, k, v, out, lse_a, seg, 0, {H, 3, h, 0.5f});
       }},
      {"attention_backward", "sliding window -2 must be >= 0",
       [&] {
         be.attention_backward(dq, dk, dv, dout, q, k, v, out, lse_a, seg, 0, {H, G, h, 0.5f, -2});
       }},
      {"attention_backward", "lse F32(4)",
       [&] { be.attention_backward(dq, dk, dv, dout, q, k, v, out, t({n}), seg, 0, dims); }},
      // ---- embedding ----
      {"embedding_forward", "ids F32", [&] { be.embedding_forward(x, t({n}), emb); }},
      {"embedding_forward", "ids I32(5)", [&] { be.embedding_forward(x, t({5}, I32), emb); }},
      {"embedding_forward", "table F32(11, 7)",
       [&] {
         be.embedding_forward(x, tok, t({V, d - 1}));
       }},
      {"embedding_backward", "dtable F32(11, 9)",
       [&] {
         be.embedding_backward(t({V, d + 1}), dx, tok);
       }},
      {"embedding_backward", "ids I32(3)", [&] { be.embedding_backward(emb, dx, t({3}, I32)); }},
      {"embedding_backward", "dx I32",
       [&] {
         be.embedding_backward(emb, t({n, d}, I32), tok);
       }},
      // ---- LM head ----
      {"logsoftmax_target", "lse F32(5)", [&] { be.logsoftmax_target(t({5}), logp, logits, tgt); }},
      {"logsoftmax_target", "targets F32",
       [&] { be.logsoftmax_target(lse, logp, logits, t({n})); }},
      {"logsoftmax_target", "logp BF16",
       [&] { be.logsoftmax_target(lse, t({n}, BF16), logits, tgt); }},
      {"logsoftmax_target", "V > 0",
       [&] {
         be.logsoftmax_target(lse, logp, t({n, 0}), tgt);
       }},
      {"logsoftmax_target", "logits I32",
       [&] {
         be.logsoftmax_target(lse, logp, t({n, V}, I32), tgt);
       }},
      {"dlogits_inplace", "dlogp F32(3)", [&] { be.dlogits_inplace(logits, lse, tgt, t({3})); }},
      {"dlogits_inplace", "targets I32(5)",
       [&] { be.dlogits_inplace(logits, lse, t({5}, I32), dlogp); }},
      {"dlogits_inplace", "lse BF16",
       [&] { be.dlogits_inplace(logits, t({n}, BF16), tgt, dlogp); }},
      {"argmax_rows", "out F32", [&] { be.argmax_rows(t({n}), logits); }},
      {"argmax_rows", "out I32(3)", [&] { be.argmax_rows(t({3}, I32), logits); }},
      {"argmax_rows", "V > 0",
       [&] {
         be.argmax_rows(amax, t({n, 0}));
       }},
      {"softmax_entropy", "entropy BF16", [&] { be.softmax_entropy(t({n}, BF16), logits, lse); }},
      {"softmax_entropy", "lse F32(2)", [&] { be.softmax_entropy(ent, logits, t({2})); }},
      {"dlogits_entropy_inplace", "dentropy F32(5)",
       [&] { be.dlogits_entropy_inplace(logits, lse, tgt, dlogp, ent, t({5})); }},
      {"dlogits_entropy_inplace", "entropy BF16",
       [&] { be.dlogits_entropy_inplace(logits, lse, tgt, dlogp, t({n}, BF16), dent); }},
      {"dlogits_entropy_inplace", "targets F32",
       [&] { be.dlogits_entropy_inplace(logits, lse, t({n}), dlogp, ent, dent); }},
      // ---- optimizer ----
      {"adamw_step", "m BF16",
       [&] {
         be.adamw_step(p, gr, t({n, d}, BF16), vv, ok);
       }},
      {"adamw_step", "v F32(4, 7)",
       [&] {
         be.adamw_step(p, gr, m, t({n, d - 1}), ok);
       }},
      {"adamw_step", "grad F32(3, 8)",
       [&] {
         be.adamw_step(p, t({3, d}), m, vv, ok);
       }},
      {"adamw_step", "param I32",
       [&] {
         be.adamw_step(t({n, d}, I32), gr, m, vv, ok);
       }},
      {"adamw_step", "betas (1, ", [&] { adamw_with([](AdamWStep& s) { s.beta1 = 1.0f; }); }},
      {"adamw_step", "betas (0.9, -0.1)",
       [&] { adamw_with([](AdamWStep& s) { s.beta2 = -0.1f; }); }},
      {"adamw_step", "eps = 0", [&] { adamw_with([](AdamWStep& s) { s.eps = 0.0f; }); }},
      {"adamw_step", "lr = nan", [&] { adamw_with([](AdamWStep& s) { s.lr = kNaN; }); }},
      {"adamw_step", "lr = -0.1", [&] { adamw_with([](AdamWStep& s) { s.lr = -0.1f; }); }},
      {"adamw_step", "step = 0", [&] { adamw_with([](AdamWStep& s) { s.step = 0; }); }},
      {"adamw_step", "weight_decay = inf",
       [&] { adamw_with([](AdamWStep& s) { s.weight_decay = kInf; }); }},
  };

  std::set<std::string> ops;
  for (const Misuse& c : cases) {
    SCOPED_TRACE(c.op + " / " + c.fragment);
    ops.insert(c.op);
    try {
      c.call();
      ADD_FAILURE() << "accepted";
    } catch (const ShapeError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.op + ": "), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.fragment), std::string::npos) << msg;
    }
  }
  // At least one case for every op of the Backend interface.
  const std::set<std::string> all = {"gemm",
                                     "fill",
                                     "fill_normal",
                                     "copy",
                                     "add_inplace",
                                     "scale_inplace",
                                     "sum_squares",
                                     "add_bias",
                                     "bias_backward",
                                     "rmsnorm_forward",
                                     "rmsnorm_backward",
                                     "rope_table",
                                     "rope_forward",
                                     "rope_backward",
                                     "swiglu_forward",
                                     "swiglu_backward",
                                     "geglu_forward",
                                     "geglu_backward",
                                     "softcap_forward",
                                     "softcap_backward",
                                     "attention_forward",
                                     "attention_backward",
                                     "embedding_forward",
                                     "embedding_backward",
                                     "logsoftmax_target",
                                     "dlogits_inplace",
                                     "argmax_rows",
                                     "softmax_entropy",
                                     "dlogits_entropy_inplace",
                                     "adamw_step"};
  EXPECT_EQ(ops, all);
  // The valid operands themselves pass (so each case above fails for its one spoiled argument).
  EXPECT_NO_THROW(be.gemm(C, A, false, B, false, 1, 0));
  EXPECT_NO_THROW(be.fill(x, 0));
  EXPECT_NO_THROW(be.fill_normal(x, 0, 1, 1, 2, 5));
  EXPECT_NO_THROW(be.copy(y, x));
  EXPECT_NO_THROW(be.add_inplace(y, x));
  EXPECT_NO_THROW(be.scale_inplace(y, 2));
  EXPECT_NO_THROW(be.sum_squares(y));
  EXPECT_NO_THROW(be.add_bias(y, g));
  EXPECT_NO_THROW(be.bias_backward(dg, y));
  EXPECT_NO_THROW(be.rmsnorm_forward(y, x, g, 1e-6f));
  EXPECT_NO_THROW(be.rmsnorm_backward(dx, dg, y, x, g, 1e-6f));
  EXPECT_NO_THROW(be.rope_table(table, inv));
  EXPECT_NO_THROW(be.rope_forward(qx, pos, table));
  EXPECT_NO_THROW(be.rope_backward(qx, pos, table));
  EXPECT_NO_THROW(be.swiglu_forward(y, x, x));
  EXPECT_NO_THROW(be.swiglu_backward(dx, dx, y, x, x));
  EXPECT_NO_THROW(be.geglu_forward(y, x, x));
  EXPECT_NO_THROW(be.geglu_backward(dx, dx, y, x, x));
  EXPECT_NO_THROW(be.softcap_forward(y, 30.0f));
  EXPECT_NO_THROW(be.softcap_backward(dx, y, 30.0f));
  EXPECT_NO_THROW(be.rmsnorm_forward(y, x, g, 1e-6f, 1.0f));
  EXPECT_NO_THROW(be.attention_forward(out, lse_a, q, k, v, seg, 0, dims));
  EXPECT_NO_THROW(be.attention_backward(dq, dk, dv, dout, q, k, v, out, lse_a, seg, 2, dims));
  EXPECT_NO_THROW(be.embedding_forward(x, tok, emb));
  EXPECT_NO_THROW(be.embedding_backward(emb, dx, tok));
  EXPECT_NO_THROW(be.logsoftmax_target(lse, logp, logits, tgt));
  EXPECT_NO_THROW(be.softmax_entropy(ent, logits, lse));
  EXPECT_NO_THROW(be.dlogits_entropy_inplace(logits, lse, tgt, dlogp, ent, dent));
  EXPECT_NO_THROW(be.dlogits_inplace(logits, lse, tgt, dlogp));
  EXPECT_NO_THROW(be.argmax_rows(amax, logits));
  EXPECT_NO_THROW(adamw_with([](AdamWStep&) {}));
}

// The contract admits BF16 for float tensors: the planner runs bf16 activations, weights and
// weight gradients through the meta backend, and the CPU computes with them (mixed precision).
// (A backend may compute in fewer dtypes than the contract allows; every backend of the suite
// accepts these calls.)
TEST_P(BackendMisuse, EveryBackendAcceptsBf16FloatTensors) {
  const int64_t n = 4, d = 8, V = 11, H = 2, G = 1, h = 4, F = 6;
  const AttentionDims dims{H, G, h, 0.5f};
  EXPECT_NO_THROW(be.gemm(t({n, V}, BF16), t({n, d}, BF16), false, t({V, d}, BF16), true, 1, 0));
  EXPECT_NO_THROW(be.gemm(t({V, d}, BF16), t({n, V}), true, t({n, d}, BF16), false, 1, 1));
  EXPECT_NO_THROW(be.copy(t({n, d}, BF16), t({n, d})));
  EXPECT_NO_THROW(be.rmsnorm_forward(t({n, d}, BF16), t({n, d}, BF16), t({d}, BF16), 1e-6f));
  EXPECT_NO_THROW(be.rmsnorm_backward(t({n, d}), t({d}, BF16), t({n, d}), t({n, d}, BF16),
                                      t({d}, BF16), 1e-6f));
  EXPECT_NO_THROW(be.rope_forward(t({n, H * h}, BF16), t({n}, I32), t({16, h})));
  EXPECT_NO_THROW(be.swiglu_forward(t({n, F}, BF16), t({n, F}, BF16), t({n, F}, BF16)));
  EXPECT_NO_THROW(be.attention_forward(t({n, H * h}, BF16), t({n, H}), t({n, H * h}, BF16),
                                       t({n, G * h}, BF16), t({n, G * h}, BF16), t({n}, I32), 0,
                                       dims));
  EXPECT_NO_THROW(be.embedding_forward(t({n, d}, BF16), t({n}, I32), t({V, d}, BF16)));
  EXPECT_NO_THROW(be.embedding_backward(t({V, d}, BF16), t({n, d}), t({n}, I32)));
  EXPECT_NO_THROW(be.logsoftmax_target(t({n}), t({n}), t({n, V}, BF16), t({n}, I32)));
  EXPECT_NO_THROW(be.bias_backward(t({d}, BF16), t({n, d})));
  EXPECT_NO_THROW(be.adamw_step(t({n, d}, BF16), t({n, d}, BF16), t({n, d}), t({n, d}),
                                AdamWStep{.lr = 1e-3f}));
}

INSTANTIATE_TEST_SUITE_P(All, BackendMisuse, ::testing::ValuesIn(test::all_backends()),
                         test::BackendCaseName{});

}  // namespace
}  // namespace sbp

// Sliding layers in stream mode hold only their window (engine/window_stream.h):
//  - one layer: the windowed forward and backward give the bits of the whole-T stream loop
//    (every K/V row of the sequence held, as engine.cpp does for full layers) for y, dL/dx and
//    every weight gradient, in fp32 and bf16, with and without packed segments, for chunks
//    shorter and longer than the window; and the layer workspace's peak is that loop's minus
//    exactly (T - r) rows of K, V, dK and dV, r = window_frame_rows(w, c) (at most c + w - 1 +
//    c - 1: the window's keys in whole chunks);
//  - the whole step: stream mode with windowed layers against base (fp32, 1e-5), and in bf16
//    against bf16 rounding (the rule of bf16_mode_equality_test.cpp), on Gemma 3, Mistral and a
//    Qwen2 sliding config, chunk sizes around the window.
#include <gtest/gtest.h>

#include <cstdio>

#include "check/gradcheck.h"
#include "check/random_batches.h"
#include "engine/prepared_batch.h"
#include "engine/window_stream.h"
#include "model/decoder_layer.h"
#include "support/test_support.h"

namespace sbp {
namespace {

// Gemma 3 with a window of 6 on layers 0 and 1 (layer 2 full), GQA.
ModelConfig gemma3_window6() {
  ModelConfig c = preset_config("tiny-gemma3");
  c.sliding_window = 6;
  c.num_hidden_layers = 3;
  c.layer_sliding = {true, true, false};
  c.validate("gemma3_window6");
  return c;
}

// Qwen2 with use_sliding_window: layer 0 full, layers 1 and 2 a window of 4.
ModelConfig qwen2_window() {
  ModelConfig c = preset_config("tiny-qwen2");
  c.num_hidden_layers = 3;
  c.sliding_window = 4;
  c.layer_sliding = {false, true, true};
  c.validate("qwen2_window");
  return c;
}

struct Arch {
  const char* name;
  ModelConfig cfg;
};

std::vector<Arch> archs() {
  return {{"gemma3", preset_config("tiny-gemma3")},  // window 5 on layer 0, softcap, qk-norm
          {"gemma3_window6", gemma3_window6()},
          {"mistral", preset_config("tiny-mistral")},  // every layer a window of 5
          {"qwen2_window", qwen2_window()}};
}

struct LayerRun {
  std::vector<unsigned char> y, gx;
  std::vector<std::vector<unsigned char>> grads;
  int64_t workspace_peak = 0;
};

// Forward then backward of layer `layer` alone over T rows in chunks of `chunk`, from a random
// input and output gradient: windowed (window_stream.h) or the whole-T stream loop.
LayerRun run_layer(const ModelConfig& cfg, int64_t layer, DType act, int64_t T, int64_t segments,
                   int64_t chunk, bool windowed) {
  Ledger ledger;
  const std::unique_ptr<Backend> be = test::backend();
  Pool pool(ledger, *be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 7, InitStyle::test, 0.2f);
  ParameterSet g(cfg, pool, Category::grads, DType::F32, true);
  const Batch batch = cli::random_batch(cfg.vocab_size, T, segments, 5, segments > 1);
  const PreparedBatch step(cfg, *be, pool, batch);
  const int64_t d = cfg.hidden_size;
  Rng rng(3, "window_stream_test");
  Buffer x32 = pool.allocate(Category::other, DType::F32, {T, d});
  test::fill_normal(x32.view(), rng);
  Buffer x = pool.allocate(Category::checkpoints, act, {T, d});  // (T, d) layer input
  be->copy(x.view(), x32.view());
  Buffer y = pool.allocate(Category::checkpoints, act, {T, d});           // (T, d)
  Buffer gy = pool.allocate(Category::grad_buffers, DType::F32, {T, d});  // (T, d)
  test::fill_normal(gy.view(), rng, 0.1f);

  DecoderLayerOps ops(cfg, *be, pool, step.tables(), act, layer);
  const LayerTensors& lw = w.views().layers[static_cast<size_t>(layer)];
  const LayerTensors& lg = g.views().layers[static_cast<size_t>(layer)];
  const int64_t window = cfg.layer_window(layer);
  EXPECT_TRUE(window_stream_applies(cfg, layer, T, chunk));
  ledger.reset_peak();
  if (windowed) {
    window_layer_forward(ops, *be, lw, x.view(), y.view(), window, chunk);
    window_layer_backward(ops, *be, pool, lw, lg, x.view(), gy.view(), window, chunk);
  } else {  // engine.cpp's stream loops for a full layer
    const Category ws = Category::layer_workspace;
    {
      LayerKV kv = ops.alloc_kv(T, ws, false);
      for (int64_t s = 0; s < T; s += chunk) {
        const int64_t e = std::min(T, s + chunk);
        ops.kv_forward(lw, x.rows(s, e), s, kv);
        ops.rows_forward(lw, x.rows(s, e), s, kv, y.rows(s, e), nullptr, ws);
      }
    }
    LayerKV kv = ops.alloc_kv(T, ws, false);
    for (int64_t s = 0; s < T; s += chunk)
      ops.kv_forward(lw, x.rows(s, std::min(T, s + chunk)), s, kv);
    const int64_t Gh = cfg.num_key_value_heads * cfg.head_dim;
    Buffer dK = pool.zeros(ws, DType::F32, {T, Gh});
    Buffer dV = pool.zeros(ws, DType::F32, {T, Gh});
    for (int64_t s = (T - 1) / chunk * chunk; s >= 0; s -= chunk) {
      const int64_t e = std::min(T, s + chunk);
      ChunkActs acts;
      ops.rows_forward(lw, x.rows(s, e), s, kv, Tensor(), &acts, ws);
      ops.rows_backward(lw, lg, x.rows(s, e), s, acts, kv, dK.view(), dV.view(),
                        gy.view().slice_rows(s, e));
    }
  }
  LayerRun r;
  r.workspace_peak = ledger.category_peak(Category::layer_workspace);
  r.y = test::bytes_of(y.view());
  r.gx = test::bytes_of(gy.view());
  for (size_t i = 0; i < g.size(); ++i) r.grads.push_back(test::bytes_of(g.tensor(i)));
  return r;
}

TEST(WindowStream, LayerGivesTheBitsOfTheWholeSequenceLoop) {
  const int64_t T = 40;
  for (const Arch& a : archs()) {
    const ModelConfig& cfg = a.cfg;
    const int64_t Gh = cfg.num_key_value_heads * cfg.head_dim;
    for (int64_t layer = 0; layer < cfg.num_hidden_layers; ++layer) {
      const int64_t w = cfg.layer_window(layer);
      if (w == 0) continue;
      for (DType act : {DType::F32, DType::BF16}) {
        for (int64_t segments : {1, 4}) {
          // shorter than, equal to and longer than the window; 1 row; not dividing T; 17 rows,
          // past the CPU's own few-row product (gemm_skinny.h), so that F32 too multiplies
          // through the BLAS, whose rows may depend on the product's row count
          for (int64_t chunk :
               {int64_t{1}, int64_t{2}, w - 1, w, w + 1, int64_t{7}, 2 * w + 3, int64_t{17}}) {
            SCOPED_TRACE(std::string(a.name) + " layer " + std::to_string(layer) + " " +
                         dtype_name(act) + " segments " + std::to_string(segments) + " chunk " +
                         std::to_string(chunk));
            const LayerRun whole = run_layer(cfg, layer, act, T, segments, chunk, false);
            const LayerRun win = run_layer(cfg, layer, act, T, segments, chunk, true);
            EXPECT_TRUE(win.y == whole.y);
            EXPECT_TRUE(win.gx == whole.gx);
            ASSERT_EQ(win.grads.size(), whole.grads.size());
            for (size_t i = 0; i < win.grads.size(); ++i)
              EXPECT_TRUE(win.grads[i] == whole.grads[i]) << "gradient " << i;
            // K, V (activation dtype) and dK, dV (F32) of the frame's rows instead of T.
            const int64_t rows_saved = T - window_frame_rows(w, chunk);
            EXPECT_EQ(whole.workspace_peak - win.workspace_peak,
                      rows_saved * Gh * (2 * static_cast<int64_t>(dtype_size(act)) + 2 * 4));
          }
        }
      }
    }
  }
}

// The window buffers do not grow with T: an all-sliding model's layer workspace peak is the
// same at T and 4T (the whole-T loop's grows by 3T rows of K, V, dK, dV per layer).
TEST(WindowStream, WorkspacePeakDoesNotGrowWithT) {
  const ModelConfig cfg = preset_config("tiny-mistral");
  const LayerRun a = run_layer(cfg, 0, DType::F32, 30, 1, 8, true);
  const LayerRun b = run_layer(cfg, 0, DType::F32, 120, 1, 8, true);
  EXPECT_EQ(a.workspace_peak, b.workspace_peak);
}

// The whole step: stream mode with windowed layers against base.
std::vector<ExecConfig> stream_modes(const std::vector<int64_t>& chunks) {
  std::vector<ExecConfig> modes;
  for (int64_t c : chunks) {
    ExecConfig s = parse_mode("stream");
    s.layer_chunk = c;
    s.head_chunk = 16;
    modes.push_back(s);
  }
  return modes;
}

TEST(WindowStream, StepMatchesBaseFp32) {
  const int64_t T = 57;
  for (const Arch& a : archs()) {
    Ledger ledger;
    const std::unique_ptr<Backend> be = test::backend();
    Pool pool(ledger, *be);
    ParameterSet w(a.cfg, pool, Category::weights, DType::F32, false);
    init_parameters(w, 7, InitStyle::test, 0.2f);
    for (int64_t segments : {1, 5}) {
      const Batch batch = cli::random_batch(a.cfg.vocab_size, T, segments, 21 + segments, true);
      cli::GradcheckOptions opts;
      opts.modes = stream_modes({1, 3, 4, 5, 6, 9, 16, 40});
      const cli::GradcheckResult r = cli::run_gradcheck(*be, a.cfg, w, batch, opts);
      for (const cli::ModeResult& m : r.modes) {
        EXPECT_LT(m.max_rel_err, 1e-5)
            << a.name << " segments=" << segments << " layer_chunk=" << m.layer_chunk;
      }
    }
  }
}

TEST(WindowStream, StepInBf16IsCloserToBaseThanBf16RoundingIs) {
  const int64_t T = 45;
  for (const Arch& a : archs()) {
    Ledger ledger;
    const std::unique_ptr<Backend> be = test::backend();
    Pool pool(ledger, *be);
    ParameterSet w(a.cfg, pool, Category::weights, DType::F32, false);
    init_parameters(w, 7, InitStyle::test, 0.2f);
    const Batch batch = cli::random_batch(a.cfg.vocab_size, T, 3, 9, true);
    cli::GradcheckOptions opts;
    opts.precision = Precision::bf16;
    opts.modes = stream_modes({2, 5, 11});
    const cli::GradcheckResult r = cli::run_gradcheck(*be, a.cfg, w, batch, opts);
    ASSERT_FALSE(r.rounding.empty());
    for (const cli::ModeResult& m : r.modes) {
      for (const auto& [name, err] : m.per_param)
        EXPECT_LE(err, r.rounding.at(name)) << a.name << " lc=" << m.layer_chunk << " " << name;
    }
  }
}

}  // namespace
}  // namespace sbp

// Engine::forward_backward's gradient hook (engine/grad_hook.h): each group's "begin" before its
// first write and "final" after its last, once per call whatever the chunk sizes and modes,
// in the engine's order (head, layers last to first, embedding; a tied LM head opens the
// embedding before the head); a hook does not change any gradient, and one that binds each
// group's gradient buffers only while the group is written (what ZeRO-2 does) gets the same
// gradients to the bit. dist/grad_groups.h's replay sends the same sequence.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "check/random_batches.h"
#include "dist/grad_groups.h"
#include "engine/engine.h"
#include "model/value_model_io.h"
#include "objective/ppo.h"
#include "objective/sft.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Recorder : GradHook {
  std::vector<std::string> events;
  void grads_begin(GradGroup g, int64_t l) override { events.push_back("begin " + name(g, l)); }
  void grads_final(GradGroup g, int64_t l) override { events.push_back("final " + name(g, l)); }
  static std::string name(GradGroup g, int64_t l) {
    return g == GradGroup::head        ? "head"
           : g == GradGroup::embedding ? "embedding"
                                       : "layer " + std::to_string(l);
  }
};

std::vector<std::string> expected_events(int64_t layers, bool tied) {
  Recorder r;
  replay_grad_events(r, layers, tied);
  return r.events;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && test::bytes_of(a) == test::bytes_of(b);
}

// Binds a group's gradient buffers at "begin" and, at "final", adds them into a persistent
// whole copy and releases them: each group's memory exists only while the engine writes it.
struct LazyBinder : GradHook {
  ParameterSet& grads;
  const ParameterSet& total;
  GradGroups groups;
  Pool& pool;
  Backend& be;
  int64_t max_bound = 0;  // most tensors bound at once
  LazyBinder(ParameterSet& g, const ParameterSet& t, Pool& p, Backend& b)
      : grads(g), total(t), groups(g), pool(p), be(b) {}
  void grads_begin(GradGroup g, int64_t l) override {
    for (size_t i : groups.of(g, l))
      grads.attach(i, pool.zeros(Category::grads, DType::F32, grads.shape(i)));
    int64_t bound = 0;
    for (size_t i = 0; i < grads.size(); ++i) bound += grads.attached(i) ? 1 : 0;
    max_bound = std::max(max_bound, bound);
  }
  void grads_final(GradGroup g, int64_t l) override {
    for (size_t i : groups.of(g, l)) {
      be.add_inplace(total.tensor(i), grads.tensor(i));
      grads.detach(i);
    }
  }
};

// One thread keeps the many small steps fast on a loaded machine.
class GradHookEvents : public ::testing::Test {
 protected:
  void SetUp() override { set_cpu_threads(1); }
};

TEST_F(GradHookEvents, EachGroupOpensAndClosesOncePerCallInEveryModeAndChunking) {
  for (const bool tied : {false, true}) {
    ModelConfig cfg = preset_config("tiny-qwen3");
    cfg.tie_word_embeddings = tied;
    cfg.num_hidden_layers = 3;
    Ledger ledger;
    const std::unique_ptr<Backend> backend_ = test::backend();
    Backend& be = *backend_;
    Pool pool(ledger, be);
    ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
    init_parameters(w, 3, InitStyle::test, 0.2f);
    const Batch b = cli::random_batch(cfg.vocab_size, 23, 3, 5, true);
    ParameterSet plain(cfg, pool, Category::grads, DType::F32, true);
    Engine(cfg, w, be, pool, parse_mode("base"))
        .forward_backward(b, *std::make_unique<SftObjective>(b, 9.0), plain);
    for (const char* mode : {"base", "checkpoint", "stream", "recompute+chunked"}) {
      for (int64_t chunk : {1, 7, 23}) {
        ExecConfig e = parse_mode(mode);
        e.layer_chunk = e.head_chunk = chunk;
        Recorder rec;
        ParameterSet g(cfg, pool, Category::grads, DType::F32, true);
        SftObjective obj(b, 9.0);
        Engine(cfg, w, be, pool, e).forward_backward(b, obj, g, &rec);
        EXPECT_EQ(rec.events, expected_events(3, tied))
            << mode << " chunk " << chunk << " tied " << tied;
        if (std::string(mode) == "base") {
          for (size_t i = 0; i < g.size(); ++i)
            EXPECT_TRUE(same_bits(g.tensor(i), plain.tensor(i))) << g.name(i);
        }
      }
    }
    // Buffers bound only while their group is written: the same gradients, never all at once.
    ParameterSet lazy = ParameterSet::unallocated(cfg, ModelHead::lm);
    ParameterSet total(cfg, pool, Category::grads, DType::F32, true);
    LazyBinder binder(lazy, total, pool, be);
    SftObjective obj(b, 9.0);
    Engine(cfg, w, be, pool, parse_mode("base")).forward_backward(b, obj, lazy, &binder);
    for (size_t i = 0; i < total.size(); ++i) {
      EXPECT_FALSE(lazy.attached(i));
      EXPECT_TRUE(same_bits(total.tensor(i), plain.tensor(i))) << total.name(i) << " tied " << tied;
    }
    // One layer (11 tensors) plus, tied, the embedding held open since the head.
    EXPECT_EQ(binder.max_bound, tied ? 12 : 11);
  }
}

TEST_F(GradHookEvents, ValueHeadsCloseTheEmbeddingAfterItsOwnBackward) {
  ModelConfig cfg = preset_config("tiny-qwen2");  // tied: a value model still has no LM head
  ASSERT_TRUE(cfg.tie_word_embeddings);
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool(ledger, be);
  ParameterSet vm = make_value_parameters(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(vm, 8, InitStyle::test, 0.2f);
  const Batch b = cli::random_objective_batch(ObjectiveKind::ppo, 0, cfg.vocab_size, 20, 2, 4);
  const std::vector<float> ret(static_cast<size_t>(b.size()), 1.0f),
      old(static_cast<size_t>(b.size()), 0.5f);
  PpoValueObjective obj(b, ret, old, PpoConfig{});
  ParameterSet g = make_value_parameters(cfg, pool, Category::grads, DType::F32, true);
  Recorder rec;
  Engine(cfg, vm, be, pool, parse_mode("stream")).forward_backward(b, obj, g, &rec);
  EXPECT_EQ(rec.events, expected_events(cfg.num_hidden_layers, false));
  const GradGroups groups(g);
  ASSERT_EQ(groups.of(GradGroup::head, -1).size(), 2u);  // model.norm.weight, score.weight
  EXPECT_EQ(g.name(groups.of(GradGroup::head, -1)[1]), "score.weight");
}

}  // namespace
}  // namespace sbp

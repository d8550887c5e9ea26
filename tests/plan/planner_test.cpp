// The planner's searches against brute force on small models: the peak is monotone in T and
// in each chunk size (what the searches rely on), the longest T and the auto chunk sizes are
// exactly what a linear scan finds, and a budget too small for one token says what fails.
#include "plan/planner.h"
#include "backend/meta/meta_backend.h"

#include <gtest/gtest.h>

#include "core/pool.h"
#include "model/parameters.h"
#include "plan/size_arg.h"

namespace sbp {
namespace {

std::vector<ModelConfig> models() {
  ModelConfig tied_qwen3 = preset_config("tiny-qwen3");
  tied_qwen3.tie_word_embeddings = true;
  tied_qwen3.attention_bias = true;
  return {preset_config("tiny-qwen3"), preset_config("tiny-qwen2"), preset_config("tiny-llama"),
          tied_qwen3};
}

std::vector<ExecConfig> modes() {
  return {parse_mode("base"), parse_mode("checkpoint"), parse_mode("stream"),
          parse_mode("recompute+chunked"), parse_mode("stream+full")};
}

ExecConfig chunked(ExecConfig m, int64_t layer, int64_t head) {
  m.layer_chunk = layer;
  m.head_chunk = head;
  return m;
}

PlanSetup setup_for(const ModelConfig& cfg, DType dt, bool adamw, int64_t budget) {
  PlanSetup s;
  s.cfg = cfg;
  s.param_dtype = s.act_dtype = s.grad_dtype = dt;  // the paper: bf16 weights and gradients
  s.adamw = adamw;
  s.budget = budget;
  return s;
}

TEST(ParseSize, UnitsAndErrors) {
  EXPECT_EQ(parse_size("80GiB", "--budget"), int64_t{80} << 30);
  EXPECT_EQ(parse_size("2.5GB", "--budget"), int64_t{2500000000});
  EXPECT_EQ(parse_size("512MiB", "--budget"), int64_t{512} << 20);
  EXPECT_EQ(parse_size("512mib", "--budget"), int64_t{512} << 20);
  EXPECT_EQ(parse_size("1000000", "--budget"), 1000000);
  EXPECT_EQ(parse_size("3KB", "--budget"), 3000);
  EXPECT_EQ(parse_size("1.5 TiB", "--budget"), int64_t{3} << 39);
  EXPECT_EQ(parse_size("100B", "--budget"), 100);
  for (const char* bad : {"", "GiB", "80 gigs", "-1GiB", "80XB", "nan", "1e30"}) {
    try {
      parse_size(bad, "--reserve");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--reserve"), std::string::npos) << e.what();
    }
  }
}

// Chunk sizes: `auto` is 0, a positive number is itself, anything else is refused (and named
// by the flag that gave it).
TEST(ParseChunkSize, AutoNumbersAndErrors) {
  EXPECT_EQ(parse_chunk_size("auto"), 0);
  EXPECT_EQ(parse_chunk_size("1"), 1);
  EXPECT_EQ(parse_chunk_size("2048"), 2048);
  for (const char* bad : {"", "0", "-3", "Auto", "12x", "1.5", "99999999999999999999"}) {
    EXPECT_FALSE(parse_chunk_size(bad).has_value()) << bad;
    try {
      parse_chunk_flag(bad, "--head-chunk");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("--head-chunk: '") + bad +
                                           "' is neither a positive number of rows nor auto");
    }
  }
}

// Every dtype's spellings parse back to it, and name it as before the table.
TEST(DTypeNames, EverySpellingParsesBack) {
  for (const DTypeNames& n : kDTypeNames) {
    for (const char* spelling : {n.safetensors, n.torch, n.flag}) {
      DType d{};
      ASSERT_TRUE(parse_dtype(spelling, &d)) << spelling;
      EXPECT_EQ(d, n.dtype) << spelling;
    }
    EXPECT_STREQ(dtype_name(n.dtype), n.safetensors);
    EXPECT_STREQ(torch_dtype_name(n.dtype), n.torch);
  }
  EXPECT_STREQ(torch_dtype_name(DType::BF16), "bfloat16");
  EXPECT_STREQ(dtype_name(DType::F16), "F16");
  DType d{};
  EXPECT_TRUE(parse_dtype("fp32", &d));
  EXPECT_EQ(d, DType::F32);
  EXPECT_FALSE(parse_dtype("fp8", &d));
}

// The searches assume the peak never shrinks when T or a chunk size grows.
TEST(Planner, PeakIsMonotoneInTAndChunkSizes) {
  for (const ModelConfig& cfg : models()) {
    const PlanSetup s = setup_for(cfg, DType::BF16, false, 0);
    for (const ExecConfig& base_mode : modes()) {
      for (auto [lc, hc] : {std::pair<int64_t, int64_t>{3, 5}, {16, 2}, {1000, 1000}}) {
        const ExecConfig m = chunked(base_mode, lc, hc);
        int64_t prev = 0;
        for (int64_t T = 1; T <= 80; ++T) {
          const int64_t p = plan_at(s, m, T).peak_bytes;
          ASSERT_GE(p, prev) << model_type_name(cfg.model_type) << " " << mode_name(m)
                             << " T=" << T;
          prev = p;
        }
      }
      const int64_t T = 70;
      int64_t prev_l = 0, prev_h = 0;
      for (int64_t c = 1; c <= T + 3; ++c) {
        const int64_t pl = plan_at(s, chunked(base_mode, c, 4), T).peak_bytes;
        const int64_t ph = plan_at(s, chunked(base_mode, 4, c), T).peak_bytes;
        ASSERT_GE(pl, prev_l) << mode_name(base_mode) << " layer chunk " << c;
        ASSERT_GE(ph, prev_h) << mode_name(base_mode) << " head chunk " << c;
        prev_l = pl;
        prev_h = ph;
      }
    }
  }
}

// Plain bisection: the last index in [0, n) whose step fits (index 0 must fit). Correct for a
// monotone peak, which the test above checks; the planner's own search is cleverer.
template <class Peak>
int64_t last_fitting(int64_t n, int64_t budget, Peak peak) {
  int64_t lo = 0, hi = n;  // lo fits, hi does not (or is past the end)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (peak(mid) <= budget ? lo : hi) = mid;
  }
  return lo;
}

TEST(Planner, LongestTAndAutoChunksMatchBruteForce) {
  const AutoChunkLimits limits{.min_layer = 8, .min_head = 3, .align = 4};
  const std::vector<ModelConfig> all = models();
  for (size_t mi = 0; mi < all.size(); ++mi) {
    const ModelConfig& cfg = all[mi];
    for (bool adamw : {false, true}) {
      if (adamw && mi > 0) continue;  // optimizer state only shifts the budget; once is enough
      for (const ExecConfig& mode : modes()) {
        const PlanSetup probe = setup_for(cfg, DType::BF16, adamw, 0);
        // Budgets that put the longest T at roughly 40 and 300 tokens.
        const ExecConfig smallest = chunked(mode, limits.min_layer, limits.min_head);
        for (int64_t target : {40, 300}) {
          PlanSetup s = probe;
          s.budget = plan_at(probe, smallest, target).peak_bytes + 37;
          const int64_t expect = 1 + last_fitting(4096, s.budget, [&](int64_t i) {
                                   return plan_at(s, smallest, i + 1).peak_bytes;
                                 });
          const MaxLenResult r = find_max_seq_len(s, mode, ChunkRequest{}, limits);
          ASSERT_TRUE(r.fits_at_all);
          EXPECT_FALSE(r.hit_limit);
          EXPECT_EQ(r.plan.seq_len, expect)
              << model_type_name(cfg.model_type) << " " << mode_name(mode);
          EXPECT_TRUE(r.plan.fits);
          EXPECT_LE(r.plan.step.peak_bytes, s.budget);
          EXPECT_LE(r.engine_runs, 24) << mode_name(mode);

          // The chosen chunks are the largest on the ladder (min, multiples of align, T) that
          // fit, the layer chunk first.
          const int64_t T = r.plan.seq_len;
          auto ladder = [&](int64_t min_c) {
            std::vector<int64_t> v = {std::min(min_c, T)};
            for (int64_t c = (v[0] / limits.align + 1) * limits.align; c < T; c += limits.align)
              v.push_back(c);
            if (v[0] < T) v.push_back(T);
            return v;
          };
          int64_t best_l = std::min(limits.min_layer, T), best_h = std::min(limits.min_head, T);
          if (mode.layers == LayerMode::stream) {
            const std::vector<int64_t> l = ladder(limits.min_layer);
            best_l = l[static_cast<size_t>(
                last_fitting(static_cast<int64_t>(l.size()), s.budget, [&](int64_t i) {
                  return plan_at(s, chunked(mode, l[static_cast<size_t>(i)], limits.min_head), T)
                      .peak_bytes;
                }))];
          }
          if (mode.head == HeadMode::chunked) {
            const std::vector<int64_t> h = ladder(limits.min_head);
            best_h = h[static_cast<size_t>(
                last_fitting(static_cast<int64_t>(h.size()), s.budget, [&](int64_t i) {
                  return plan_at(s, chunked(mode, best_l, h[static_cast<size_t>(i)]), T).peak_bytes;
                }))];
          }
          EXPECT_EQ(r.plan.layer_chunk, chunked(mode, best_l, 1).layer_chunk_for(T))
              << mode_name(mode);
          EXPECT_EQ(r.plan.head_chunk, chunked(mode, 1, best_h).head_chunk_for(T))
              << mode_name(mode);
        }
      }
    }
  }
}

TEST(Planner, FixedChunksAreKeptAndSearchStopsAtItsLimit) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  PlanSetup s = setup_for(cfg, DType::F32, false, 0);
  const ExecConfig stream = parse_mode("stream");
  s.budget = plan_at(s, chunked(stream, 5, 7), 200).peak_bytes;
  const MaxLenResult r = find_max_seq_len(s, stream, ChunkRequest{5, 7});
  EXPECT_EQ(r.plan.seq_len, 200);
  EXPECT_EQ(r.plan.layer_chunk, 5);
  EXPECT_EQ(r.plan.head_chunk, 7);

  const MaxLenResult capped = find_max_seq_len(s, stream, ChunkRequest{5, 7}, {}, 150);
  EXPECT_TRUE(capped.hit_limit);
  EXPECT_EQ(capped.plan.seq_len, 150);

  // With --seq-len and no budget, auto means the engine's defaults (clamped to T).
  s.budget = 0;
  const ChunkedPlan p = choose_chunks(s, stream, 3000, ChunkRequest{});
  EXPECT_EQ(p.layer_chunk, ExecConfig{}.layer_chunk);
  EXPECT_EQ(p.head_chunk, ExecConfig{}.head_chunk);
  EXPECT_TRUE(p.fits);
}

TEST(Planner, BudgetTooSmallForOneTokenSaysWhatFails) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  PlanSetup s = setup_for(cfg, DType::BF16, true, 0);
  const PlannedStep one = plan_at(s, parse_mode("stream"), 1);
  // Room for the weights but not for the gradients.
  s.budget = one.breakdown[Category::weights] + 10;
  const MaxLenResult r = find_max_seq_len(s, parse_mode("stream"), ChunkRequest{});
  EXPECT_FALSE(r.fits_at_all);
  const std::string msg = explain_too_small(s, parse_mode("stream"));
  EXPECT_NE(msg.find("of 'grads'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("weights"), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(one.peak_bytes)), std::string::npos) << msg;
}

TEST(Planner, Bf16AndOptimizerStateAreCountedInTheirCategories) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  const int64_t n = [&] {
    Ledger l;
    MetaBackend shape_only;
    Pool p(l, shape_only);
    return ParameterSet(cfg, p, Category::weights, DType::F32, false).numel();
  }();
  const ExecConfig m = parse_mode("stream");
  const PlannedStep bf = plan_at(setup_for(cfg, DType::BF16, false, 0), m, 33);
  EXPECT_EQ(bf.breakdown[Category::weights], 2 * n);
  EXPECT_EQ(bf.breakdown[Category::grads], 2 * n);
  EXPECT_EQ(bf.breakdown[Category::optimizer], 0);
  const PlannedStep bf_adam = plan_at(setup_for(cfg, DType::BF16, true, 0), m, 33);
  EXPECT_EQ(bf_adam.breakdown[Category::optimizer], 12 * n);  // m, v and fp32 master weights
  PlanSetup no_master = setup_for(cfg, DType::BF16, true, 0);
  no_master.master_weights = false;
  EXPECT_EQ(plan_at(no_master, m, 33).breakdown[Category::optimizer], 8 * n);
  const PlannedStep f32_adam = plan_at(setup_for(cfg, DType::F32, true, 0), m, 33);
  EXPECT_EQ(f32_adam.breakdown[Category::optimizer], 8 * n);  // the weights are the masters
  // bf16 activations: checkpoints are half of the fp32 ones.
  const PlannedStep f32 = plan_at(setup_for(cfg, DType::F32, false, 0), m, 33);
  EXPECT_EQ(2 * bf.breakdown[Category::checkpoints], f32.breakdown[Category::checkpoints]);
}

}  // namespace
}  // namespace sbp

namespace sbp {
namespace {

// Online GRPO's generation phase (StepMemoryOptions::generate_*): planned through
// Engine::generate before the step, its peak holds the KV cache of prompt + new tokens for every
// layer beside the persistent model state, and the step's peak covers it.
TEST(Planner, GenerationPhaseHoldsItsKvCache) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  ObjectiveSetup grpo;
  grpo.kind = ObjectiveKind::grpo;
  ExecConfig exec = parse_mode("stream");
  exec.layer_chunk = 64;
  exec.head_chunk = 32;
  const StepBatches step = planning_step(ObjectiveKind::grpo, 4, 256);
  StepMemoryOptions mem{.adamw = true};
  const PlannedStep without = plan_step(cfg, grpo, exec, step, mem);
  EXPECT_EQ(without.generation_peak, 0);
  mem.generate_prompt_tokens = 100;
  mem.generate_new_tokens = 3900;  // a long completion: generation is the larger phase
  const PlannedStep with = plan_step(cfg, grpo, exec, step, mem);
  const int64_t kv_rows = 100 + 3900;
  const int64_t kv_bytes = cfg.num_hidden_layers * 2 * kv_rows * cfg.num_key_value_heads *
                           cfg.head_dim * 4;
  EXPECT_GE(with.generation_peak, kv_bytes);
  EXPECT_GT(with.generation_peak, without.peak_bytes);
  EXPECT_EQ(with.peak_bytes, std::max(with.generation_peak, without.peak_bytes));
  EXPECT_EQ(with.breakdown.bytes[static_cast<size_t>(Category::kv_cache)], kv_bytes);
  // A group of 4 completions decodes together: 4 sequences' cache, and (4, V) logits.
  mem.generate_sequences = 4;
  const PlannedStep group = plan_step(cfg, grpo, exec, step, mem);
  EXPECT_EQ(group.breakdown.bytes[static_cast<size_t>(Category::kv_cache)], 4 * kv_bytes);
  EXPECT_GE(group.generation_peak, 4 * kv_bytes + 4 * cfg.vocab_size * 4);
}

}  // namespace
}  // namespace sbp

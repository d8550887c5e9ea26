// ZeRO's pieces without MPI: how a tensor is cut over ranks, AdamW on one rank's slices (bit for
// bit the full update's), and optimizer state saved whole or in per-rank shards, read back into
// any other layout (another rank count, one process) exactly; bad shard sets are one-line errors.
#include <gtest/gtest.h>

#include <cmath>

#include <cstring>
#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "model/safetensors.h"
#include "optim/optimizer_files.h"
#include "support/test_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && test::bytes_of(a) == test::bytes_of(b);
}

TEST(ShardRange, SlicesAreContiguousBalancedAndCoverTheTensor) {
  for (int64_t numel : {0, 1, 2, 5, 7, 64, 1001}) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
      int64_t at = 0, smallest = numel, largest = 0;
      const std::vector<int64_t> counts = shard_counts(numel, ranks);
      for (int r = 0; r < ranks; ++r) {
        const ShardRange s = shard_range(numel, ranks, r);
        EXPECT_EQ(s.offset, at) << numel << " over " << ranks;
        EXPECT_EQ(s.count, counts[static_cast<size_t>(r)]);
        at = s.end();
        smallest = std::min(smallest, s.count);
        largest = std::max(largest, s.count);
      }
      EXPECT_EQ(at, numel);
      EXPECT_LE(largest - smallest, 1);
    }
  }
}

struct Model {
  ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool{ledger, be};
};

void fill_random(const ParameterSet& p, uint64_t seed, float scale) {
  for (size_t i = 0; i < p.size(); ++i) {
    Rng rng(seed, p.name(i));
    test::fill_normal(p.tensor(i), rng, scale);
  }
}

TEST(ShardedAdamW, EachRankUpdatesItsSliceExactlyAsAdamWUpdatesTheWhole) {
  Model m;
  const AdamWConfig c{.beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.1f};
  ParameterSet w(m.cfg, m.pool, Category::weights, DType::F32, false),
      g(m.cfg, m.pool, Category::grads, DType::F32, false);
  fill_random(w, 1, 0.02f);
  ParameterSet whole(m.cfg, m.pool, Category::weights, DType::F32, false);
  for (size_t i = 0; i < w.size(); ++i) m.be.copy(whole.tensor(i), w.tensor(i));
  AdamW full(m.cfg, m.pool, c);
  const int ranks = 3;
  std::vector<std::unique_ptr<ShardedAdamW>> shards;
  std::vector<ParameterSet> copies;
  for (int r = 0; r < ranks; ++r) {
    shards.push_back(std::make_unique<ShardedAdamW>(m.cfg, ModelHead::lm, ranks, r, m.pool, c));
    copies.emplace_back(m.cfg, m.pool, Category::weights, DType::F32, false);
    for (size_t i = 0; i < w.size(); ++i) m.be.copy(copies.back().tensor(i), w.tensor(i));
  }
  // The optimizer's memory is divided: the ranks' moments add up to AdamW's.
  EXPECT_EQ(m.ledger.live_breakdown()[Category::optimizer], 2 * full.m().numel() * 4 * 2);
  for (int step = 0; step < 3; ++step) {
    fill_random(g, 10 + static_cast<uint64_t>(step), 1.0f);
    full.step(whole, g, m.be, 1e-2f);
    for (int r = 0; r < ranks; ++r) {
      std::vector<Tensor> slices;
      for (size_t i = 0; i < g.size(); ++i)
        slices.push_back(flat_slice(g.tensor(i), shards[static_cast<size_t>(r)]->range(i)));
      shards[static_cast<size_t>(r)]->step(copies[static_cast<size_t>(r)], slices, m.be, 1e-2f);
    }
  }
  for (int r = 0; r < ranks; ++r) {
    const ShardedAdamW& s = *shards[static_cast<size_t>(r)];
    EXPECT_EQ(s.steps(), 3);
    for (size_t i = 0; i < w.size(); ++i) {
      const ShardRange& range = s.range(i);
      EXPECT_TRUE(same_bits(flat_slice(copies[static_cast<size_t>(r)].tensor(i), range),
                            flat_slice(whole.tensor(i), range)))
          << "rank " << r << " " << w.name(i);
      EXPECT_TRUE(same_bits(s.m(i), flat_slice(full.m().tensor(i), range))) << w.name(i);
      EXPECT_TRUE(same_bits(s.v(i), flat_slice(full.v().tensor(i), range))) << w.name(i);
      // Outside its slice a rank's weights are untouched (the all-gather brings them).
      if (range.offset > 0) {
        EXPECT_TRUE(
            same_bits(flat_slice(copies[static_cast<size_t>(r)].tensor(i), {0, range.offset}),
                      flat_slice(w.tensor(i), {0, range.offset})));
      }
    }
  }
}

// A whole AdamW with random moments and a step count, and sharded copies of it. Second moments
// are |normal| (a file with a negative one is refused on reading).
struct SavedState {
  Model m;
  AdamW full{m.cfg, m.pool, AdamWConfig{}};
  SavedState() {
    fill_random(full.m(), 3, 1.0f);
    fill_random(full.v(), 4, 1.0f);
    for (size_t i = 0; i < full.v().size(); ++i) {
      std::vector<float> v = download_f32(full.v().tensor(i));
      for (float& x : v) x = std::fabs(x);
      upload_f32(full.v().tensor(i), v);
    }
    full.set_steps(7);
  }
  std::unique_ptr<ShardedAdamW> shard(int ranks, int rank) {
    return std::make_unique<ShardedAdamW>(m.cfg, ModelHead::lm, ranks, rank, m.pool, AdamWConfig{});
  }
  void expect_matches(const ShardedAdamW& s) {
    EXPECT_EQ(s.steps(), 7);
    for (size_t i = 0; i < s.size(); ++i) {
      EXPECT_TRUE(same_bits(s.m(i), flat_slice(full.m().tensor(i), s.range(i)))) << s.spec(i).name;
      EXPECT_TRUE(same_bits(s.v(i), flat_slice(full.v().tensor(i), s.range(i)))) << s.spec(i).name;
    }
  }
};

TEST(OptimizerFiles, WholeAndShardedStateReadBackIntoAnyLayout) {
  SavedState st;
  test::TempDir whole_dir, shard_dir;
  write_optimizer_file(whole_dir.path(), moment_slices(st.full), st.full.steps());
  // Whole -> 3 ranks.
  for (int r = 0; r < 3; ++r) {
    auto s = st.shard(3, r);
    s->set_steps(read_optimizer_state(whole_dir.path(), moment_slices(*s)));
    st.expect_matches(*s);
  }
  // Whole -> 2 ranks, saved as 2 shards -> 3 ranks, and -> one process.
  std::vector<std::unique_ptr<ShardedAdamW>> two;
  for (int r = 0; r < 2; ++r) {
    two.push_back(st.shard(2, r));
    two.back()->set_steps(read_optimizer_state(whole_dir.path(), moment_slices(*two.back())));
    write_optimizer_shard(shard_dir.path(), moment_slices(*two.back()), two.back()->steps(), r, 2);
  }
  EXPECT_TRUE(fs::exists(shard_dir.file("optimizer-rank00001-of-00002.safetensors")));
  EXPECT_FALSE(fs::exists(shard_dir.file("optimizer.safetensors")));
  for (int r = 0; r < 3; ++r) {
    auto s = st.shard(3, r);
    s->set_steps(read_optimizer_state(shard_dir.path(), moment_slices(*s)));
    st.expect_matches(*s);
  }
  AdamW back(st.m.cfg, st.m.pool, AdamWConfig{});
  back.set_steps(read_optimizer_state(shard_dir.path(), moment_slices(back)));
  EXPECT_EQ(back.steps(), 7);
  for (size_t i = 0; i < back.m().size(); ++i) {
    EXPECT_TRUE(same_bits(back.m().tensor(i), st.full.m().tensor(i))) << back.m().name(i);
    EXPECT_TRUE(same_bits(back.v().tensor(i), st.full.v().tensor(i))) << back.m().name(i);
  }
  // The single-process file is the format it always was: m.<name> in the parameter's shape.
  SafetensorsFile f(whole_dir.file("optimizer.safetensors"));
  EXPECT_EQ(f.find("m.model.embed_tokens.weight")->shape,
            st.full.m().get("model.embed_tokens.weight").shape);
  EXPECT_EQ(f.metadata().at("step"), "7");
}

std::string error_of(const std::string& dir, const std::vector<MomentSlice>& into) {
  try {
    read_optimizer_state(dir, into);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(OptimizerFiles, IncompleteOrMixedShardSetsAreOneLineErrors) {
  SavedState st;
  test::TempDir dir;
  auto s0 = st.shard(2, 0), s1 = st.shard(2, 1);
  AdamW into(st.m.cfg, st.m.pool, AdamWConfig{});
  EXPECT_NE(error_of(dir.path(), moment_slices(into))
                .find("optimizer.safetensors: missing (not a training checkpoint?)"),
            std::string::npos);
  write_optimizer_shard(dir.path(), moment_slices(*s0), 3, 0, 2);
  std::string err = error_of(dir.path(), moment_slices(into));
  EXPECT_NE(err.find("optimizer-rank00001-of-00002.safetensors: missing (the optimizer was saved "
                     "in 2 shards)"),
            std::string::npos)
      << err;
  write_optimizer_shard(dir.path(), moment_slices(*s1), 4, 1, 2);
  err = error_of(dir.path(), moment_slices(into));
  EXPECT_NE(err.find("optimizer-rank00001-of-00002.safetensors: step 4, but "
                     "optimizer-rank00000-of-00002.safetensors has 3"),
            std::string::npos)
      << err;
  write_optimizer_shard(dir.path(), moment_slices(*s1), 3, 1, 2);
  EXPECT_EQ(error_of(dir.path(), moment_slices(into)), "");
  auto t0 = st.shard(3, 0);
  write_optimizer_shard(dir.path(), moment_slices(*t0), 3, 0, 3);
  err = error_of(dir.path(), moment_slices(into));
  EXPECT_NE(err.find("optimizer shards of two runs"), std::string::npos) << err;
  // A shard whose slice does not fit this model (another shape): names the tensor.
  test::TempDir other;
  ModelConfig wider = st.m.cfg;
  wider.intermediate_size += 8;
  ShardedAdamW w0(wider, ModelHead::lm, 2, 0, st.m.pool, AdamWConfig{}),
      w1(wider, ModelHead::lm, 2, 1, st.m.pool, AdamWConfig{});
  write_optimizer_shard(other.path(), moment_slices(w0), 1, 0, 2);
  write_optimizer_shard(other.path(), moment_slices(w1), 1, 1, 2);
  err = error_of(other.path(), moment_slices(into));
  EXPECT_NE(err.find("tensor 'm.model.layers.0.mlp.gate_proj.weight' has"), std::string::npos)
      << err;
  EXPECT_EQ(err.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace sbp

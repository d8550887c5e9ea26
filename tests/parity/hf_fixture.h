// Shared by the Hugging Face parity tests (hf_parity_test.cpp: fp32; hf_parity_bf16_test.cpp:
// bf16): the fixtures under tests/fixtures/hf written by tools/hf_parity/make_fixtures.py, read
// through the normal loading path, and the small helpers that compare against them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "core/batch.h"
#include "core/memory.h"
#include "engine/exec_config.h"
#include "model/checkpoint_io.h"
#include "model/config.h"
#include "model/parameters.h"
#include "model/safetensors.h"
#include "objective/sft.h"
#include "support/test_support.h"

namespace sbp::parity {

using json = nlohmann::json;

inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names = {
      "qwen3_gqa_qknorm",       "qwen2_bias_tied",    "llama_rope_llama3",
      "qwen3_head_dim_24",      "qwen3_bf16",         "qwen2_sharded",
      "gemma3_sliding_softcap", "gemma3_mqa_pattern", "qwen2_sliding_window",
      "mistral_sliding_window", "gemma3_pad_tied",    "llama_pad_untied",
      // Long-context rope scalings (issue 52), at lengths beyond the original positions.
      "llama_rope_yarn",        "qwen3_rope_yarn_mscale", "qwen2_rope_yarn_attention_factor",
      "gemma3_rope_yarn",       "llama_rope_dynamic"};
  return names;
}

inline std::string fixture_dir(const std::string& name) {
  return test::source_dir() + "/tests/fixtures/hf/" + name;
}

inline json read_json(const std::string& path) { return json::parse(test::read_text(path)); }

// tokens.json (the `streambp score` input format) as one packed batch. The test's own minimal
// reader: the fixtures are well formed; the command's thorough validation is tested below.
inline Batch read_batch(const std::string& path) {
  const json j = read_json(path);
  Batch b;
  for (const json& s : j["sequences"]) {
    for (const json& id : s) b.tokens.push_back(id.get<int32_t>());
    b.seq_lens.push_back(static_cast<int64_t>(s.size()));
  }
  for (const json& m : j["loss_mask"])
    for (const json& v : m) b.loss_mask.push_back(v.get<float>());
  return b;
}

inline std::vector<int64_t> segment_offsets(const Batch& b) {
  std::vector<int64_t> off;
  int64_t row = 0;
  for (int64_t len : b.seq_lens) {
    off.push_back(row);
    row += len;
  }
  return off;
}

// Per-sequence target log-probs (row t of a segment predicts token t+1), concatenated.
inline std::vector<float> per_sequence_logp(const Batch& b, const std::vector<float>& row_logp) {
  std::vector<float> out;
  int64_t row = 0;
  for (int64_t len : b.seq_lens) {
    for (int64_t t = 0; t + 1 < len; ++t) out.push_back(row_logp[static_cast<size_t>(row + t)]);
    row += len;
  }
  return out;
}

inline std::vector<float> flatten_logprobs(const json& per_seq) {
  std::vector<float> out;
  for (const json& s : per_seq)
    for (const json& v : s) out.push_back(v.get<float>());
  return out;
}

inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return INFINITY;
  return test::rel_err(a.data(), b.data(), static_cast<int64_t>(a.size()));
}

inline double scalar_rel_err(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

// One fixture, loaded the way the CLI loads a model directory.
// `weights_dtype` BF16: the weights as a bf16 run holds them (an fp32 checkpoint rounded to
// nearest-even bf16 on load, as transformers' from_pretrained(dtype=bfloat16) does).
// A fixture directory given by its path rather than by its name under tests/fixtures/hf/.
struct FixturePath {
  std::string dir;
};

struct Fixture {
  explicit Fixture(const std::string& name, DType weights_dtype = DType::F32)
      : Fixture(FixturePath{fixture_dir(name)}, weights_dtype) {}
  explicit Fixture(FixturePath path, DType weights_dtype = DType::F32)
      : dir(std::move(path.dir)),
        cfg(load_config(dir + "/model")),
        weights(cfg, pool, Category::weights, weights_dtype, false),
        batch(read_batch(dir + "/tokens.json")),
        expected(read_json(dir + "/expected.json")) {
    // One thread: these models are tiny, so more threads only add OpenMP barriers (seconds on
    // a loaded 2-core machine) and the result must not depend on them anyway. The score
    // command test runs the multi-threaded kernels (--threads 2) against one fixture.
    set_cpu_threads(1);
    load_weights(dir + "/model", cfg, weights);
  }
  std::string dir;
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool{ledger, be};
  ModelConfig cfg;
  ParameterSet weights;
  Batch batch;
  json expected;
};

// Reference gradients: every tensor of expected_grads.safetensors, by HF name.
inline std::map<std::string, std::vector<float>> read_grads(const std::string& path) {
  SafetensorsFile f(path);
  std::map<std::string, std::vector<float>> out;
  for (const SafetensorsEntry& e : f.entries()) {
    std::vector<float> v(static_cast<size_t>(e.shape.numel()));
    f.read_into(e.name, Tensor(v.data(), DType::F32, e.shape));
    out[e.name] = std::move(v);
  }
  return out;
}

// SFT that also records the log-probs the LM head hands it (the training path's logp).
class RecordingSft final : public Objective {
 public:
  RecordingSft(const Batch& batch, double normalizer)
      : sft_(batch, normalizer), logp_(static_cast<size_t>(batch.size()), 0.0f) {}
  HeadRoute route() override {
    HostChunks h;
    h.grads = [this](const TokenChunk& in, const TokenChunkGrads& out) {
      std::copy(in.logp.begin(), in.logp.end(), logp_.begin() + in.row_begin);
      sft_.token_grads(in.row_begin, in.logp, out.dlogp);
    };
    return h;
  }
  double loss() const { return sft_.loss(); }
  const std::vector<float>& logp() const { return logp_; }

 private:
  SftObjective sft_;
  std::vector<float> logp_;
};

inline ExecConfig mode(const char* name, int64_t layer_chunk = 0, int64_t head_chunk = 0) {
  ExecConfig e = parse_mode(name);
  if (layer_chunk > 0) e.layer_chunk = layer_chunk;
  if (head_chunk > 0) e.head_chunk = head_chunk;
  return e;
}

// base, checkpoint, and stream with chunk sizes 1, 7 (does not divide T), ~T/3, 16/32 and T;
// recompute+chunked for the remaining combination of the two knobs.
inline std::vector<ExecConfig> modes_for(int64_t T) {
  return {mode("base"),
          mode("checkpoint"),
          mode("stream", 1, 1),
          mode("stream", 7, 5),
          mode("stream", T / 3, T / 3 + 1),
          mode("stream", 16, 32),
          mode("stream", T, T),
          mode("recompute+chunked", 0, 9)};
}

inline std::string describe(const ExecConfig& e) {
  return mode_name(e) + " layer_chunk=" + std::to_string(e.layer_chunk) +
         " head_chunk=" + std::to_string(e.head_chunk);
}

}  // namespace sbp::parity

// `streambp convert` (issue 34) on files written by others and by itself:
//  - tests/fixtures/gguf/tiny_llama.gguf, a tiny random llama written by the gguf Python package
//    (llama.cpp's library) with q/k rows permuted and tensors in Q8_0, Q4_0, Q4_1, Q4_K, Q6_K,
//    F16, BF16, F32, converts to exactly its Hugging Face twin tiny_llama_hf/ (written by
//    tools/gguf_fixtures.py from the package's own dequantization): every tensor to the bit,
//    the same `score`, and a tokenizer that encodes like the twin's;
//  - HF -> GGUF (f16, bf16, q8_0) -> HF for llama, qwen2, qwen3 and gemma3 directories changes
//    each tensor by its type's quantization and nothing else (names, q/k rows, Gemma's 1 + w
//    norms, config.json all come back).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/checkpoint_io.h"
#include "model/gguf_file.h"
#include "model/gguf_quant.h"
#include "model/safetensors.h"
#include "support/test_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string bin() { return test::streambp_binary(); }
std::string fixture(const std::string& name) {
  return test::source_dir() + "/tests/fixtures/gguf/" + name;
}

std::string run_ok(const std::string& args) {
  const auto r = test::run_command("OMP_NUM_THREADS=2 " + bin() + " " + args + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return r.output;
}

std::map<std::string, std::vector<float>> read_all(const std::string& dir) {
  const SafetensorsFile f(dir + "/model.safetensors");
  std::map<std::string, std::vector<float>> out;
  for (const SafetensorsEntry& e : f.entries()) {
    std::vector<float> v(static_cast<size_t>(e.shape.numel()));
    f.read_into(e.name, Tensor(v.data(), DType::F32, Shape{e.shape.numel()}));
    out[e.name] = std::move(v);
  }
  return out;
}

TEST(GgufConvert, TheGgufPackagesTinyLlamaIsItsTwinToTheBit) {
  test::TempDir tmp;
  const std::string out = tmp.file("hf");
  run_ok("convert " + fixture("tiny_llama.gguf") + " --out " + out);
  const auto got = read_all(out);
  const auto want = read_all(fixture("tiny_llama_hf"));
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count(name));
    const std::vector<float>& g = got.at(name);
    ASSERT_EQ(g.size(), w.size());
    size_t differ = 0;
    for (size_t i = 0; i < w.size(); ++i) differ += std::memcmp(&g[i], &w[i], 4) != 0;
    EXPECT_EQ(differ, 0u);
  }
  // config.json: what the twin says, as our loader reads it.
  const json a = load_config(out).to_json(), b = load_config(fixture("tiny_llama_hf")).to_json();
  for (const char* k : {"model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                        "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings"})
    EXPECT_EQ(a.value(k, json()), b.value(k, json())) << k;
  const json tc = json::parse(test::read_text(out + "/tokenizer_config.json"));
  EXPECT_EQ(tc["eos_token"], "<|im_end|>");
  EXPECT_EQ(tc["bos_token"], "<|im_start|>");
  EXPECT_EQ(tc["chat_template"],
            json::parse(test::read_text(fixture("tiny_llama_hf/tokenizer_config.json")))
                ["chat_template"]);
}

TEST(GgufConvert, ScoreOfTheConvertedModelEqualsTheTwin) {
  test::TempDir tmp;
  const std::string out = tmp.file("hf");
  run_ok("convert " + fixture("tiny_llama.gguf") + " --out " + out);
  const std::string tokens = tmp.file("tokens.json");
  test::write_text(tokens, R"({"sequences": [[287, 10, 40, 200, 5, 100, 288, 3, 7, 255, 256, 270],
                                              [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]]})");
  run_ok("score --model " + out + " --input " + tokens + " --json " + tmp.file("a.json"));
  run_ok("score --model " + fixture("tiny_llama_hf") + " --input " + tokens + " --json " +
         tmp.file("b.json"));
  const json a = json::parse(test::read_text(tmp.file("a.json")));
  const json b = json::parse(test::read_text(tmp.file("b.json")));
  ASSERT_TRUE(a["loss"].is_number());
  EXPECT_EQ(a["loss"].get<double>(), b["loss"].get<double>());
  EXPECT_EQ(a["logprobs"], b["logprobs"]);
}

TEST(GgufConvert, TheConvertedTokenizerEncodesLikeTheTwin) {
  test::TempDir tmp;
  const std::string out = tmp.file("hf");
  run_ok("convert " + fixture("tiny_llama.gguf") + " --out " + out);
  const std::string in = tmp.file("texts.jsonl");
  test::write_text(in,
                   "{\"text\": \"The capital of France is Paris.\"}\n"
                   "{\"text\": \"<|im_start|>user\\nThere are 365 days in 2026!<|im_end|>\\n\"}\n"
                   "{\"text\": \"She sells sea shells,  on the   sea shore \\u00e9\\u4e2d 12345\"}\n");
  const std::string a = run_ok("tokenize --tokenizer " + out + " --input " + in);
  const std::string b = run_ok("tokenize --tokenizer " + fixture("tiny_llama_hf") + " --input " + in);
  EXPECT_EQ(a, b);
  EXPECT_NE(a.find("\"ids\""), std::string::npos);
}

// A SentencePiece GGUF tokenizer (tokens + scores, no merges): the converted tokenizer.json
// encodes as transformers' own conversion of the same file does (tiny_spm_cases.jsonl, written
// by tools/gguf_spm_cases.py with AutoTokenizer.from_pretrained(..., gguf_file=...)).
TEST(GgufConvert, SentencePieceTokenizerEncodesLikeTransformers) {
  test::TempDir tmp;
  const std::string out = tmp.file("hf");
  run_ok("convert " + fixture("tiny_spm.gguf") + " --out " + out);
  std::vector<json> cases;
  std::string texts;
  std::istringstream in(test::read_text(fixture("tiny_spm_cases.jsonl")));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    cases.push_back(json::parse(line));
    texts += json{{"text", cases.back()["text"]}}.dump() + "\n";
  }
  ASSERT_GE(cases.size(), 8u);
  test::write_text(tmp.file("texts.jsonl"), texts);
  const auto r = test::run_command(bin() + " tokenize --tokenizer " + out + " --input " +
                                   tmp.file("texts.jsonl") + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream got(r.output);
  size_t i = 0;
  for (std::string line; std::getline(got, line) && i < cases.size(); ++i)
    EXPECT_EQ(json::parse(line)["ids"], cases[i]["ids"]) << cases[i]["text"];
  EXPECT_EQ(i, cases.size());
}

// Quantize then dequantize with the (separately checked) block routines: what a round trip
// through a GGUF file of `t` must give, and nothing else.
std::vector<float> through(GgmlType t, const std::vector<float>& x) {
  const auto info = ggml_type_info(static_cast<uint32_t>(t));
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<unsigned char> q(static_cast<size_t>(n / info->block_elems * info->block_bytes));
  quantize(t, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  dequantize(t, q.data(), y.data(), n);
  return y;
}

void round_trip(const std::string& model, const std::string& label) {
  test::TempDir tmp;
  const ModelConfig cfg = load_config(model);
  const auto orig = read_all(model);
  for (const char* type : {"f16", "bf16", "q8_0"}) {
    SCOPED_TRACE(label + " " + type);
    const std::string g = tmp.file(std::string(type) + ".gguf");
    const std::string back = tmp.file(std::string(type) + "_hf");
    run_ok("convert " + model + " --to gguf --type " + type + " --out " + g);
    run_ok("convert " + g + " --out " + back);
    const GgufFile gf(g);  // it reads back, with the metadata llama.cpp needs
    const std::string arch = gf.require_string("general.architecture");
    for (const char* k : {"context_length", "embedding_length", "block_count",
                          "feed_forward_length", "attention.head_count",
                          "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
                          "rope.freq_base"})
      EXPECT_NE(gf.find(arch + "." + k), nullptr) << k;
    const json a = load_config(back).to_json(), b = cfg.to_json();
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (it.key() != "torch_dtype" && it.key() != "dtype") {
        EXPECT_EQ(a.value(it.key(), json()), it.value()) << it.key();
      }
    }
    const auto got = read_all(back);
    ASSERT_EQ(got.size(), orig.size());
    const GgmlType t = std::string(type) == "f16"   ? GgmlType::F16
                       : std::string(type) == "bf16" ? GgmlType::BF16
                                                     : GgmlType::Q8_0;
    for (const auto& [name, x] : orig) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(got.count(name));
      const SafetensorsFile sf(model + "/model.safetensors");
      const Shape& shape = sf.find(name)->shape;
      std::vector<float> want;
      if (shape.ndim == 1) {
        want = x;  // kept in F32
        if (cfg.gemma() && name.find("norm.weight") != std::string::npos)
          for (float& v : want) v = (v + 1.0f) - 1.0f;  // stored as 1 + w
      } else {
        GgmlType tt = t;
        if (tt == GgmlType::Q8_0 && shape[shape.ndim - 1] % 32 != 0) tt = GgmlType::F16;
        want = through(tt, x);
      }
      const std::vector<float>& y = got.at(name);
      double max_err = 0.0;
      size_t differ = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        max_err = std::max(max_err, std::fabs(static_cast<double>(y[i]) - x[i]));
        differ += std::memcmp(&y[i], &want[i], 4) != 0;
      }
      EXPECT_EQ(differ, 0u);
      std::printf("round trip %-8s %-5s %-48s max |error| %.3g\n", label.c_str(), type,
                  name.c_str(), max_err);
    }
  }
}

TEST(GgufConvert, RoundTripLlamaWithTokenizer) { round_trip(fixture("tiny_llama_hf"), "llama"); }

TEST(GgufConvert, RoundTripQwen2Qwen3MistralLlama3RopeGemma3) {
  test::TempDir tmp;
  for (const char* preset : {"tiny-qwen3", "tiny-qwen2", "tiny-mistral", "tiny-llama"}) {
    const std::string dir = tmp.file(preset);
    run_ok(std::string("init --preset ") + preset + " --test-init --seed 3 --out " + dir);
    round_trip(dir, preset);
  }
  // Gemma 3 as llama.cpp runs it: every 6th layer full, no logit soft-capping, 1/sqrt(h) scale.
  const std::string cfg = tmp.file("gemma3.json");
  test::write_text(cfg, R"({"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 83, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "sliding_window": 5,
    "layer_types": ["sliding_attention", "sliding_attention"], "query_pre_attn_scalar": 16,
    "final_logit_softcapping": null, "hidden_activation": "gelu_pytorch_tanh",
    "tie_word_embeddings": true, "torch_dtype": "float32"})");
  const std::string dir = tmp.file("gemma3");
  run_ok("init --config " + cfg + " --test-init --seed 4 --out " + dir);
  round_trip(dir, "gemma3");
}

}  // namespace
}  // namespace sbp

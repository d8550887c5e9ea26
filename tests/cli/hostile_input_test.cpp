// The hostile-input suite (issue 17): the real `streambp` program on malformed safetensors,
// config.json, tokenizer files, JSONL data, YAML configs and overrides, command-line numbers and
// resume state. Every case must end in exactly one line `streambp: error: ...` naming the file
// and the key/field/line at fault, with exit code 1, no "internal error", within 30 s and (outside
// AddressSanitizer) 4 GB of address space, and without creating or changing any output.
//
// One TEST per input class, so that ctest runs the classes in parallel; each loops over a table.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "cli/hostile_support.h"
#include "support/test_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_command;

using namespace hostile;  // Case, expect_clean_error, the byte helpers

// ---------------------------------------------------------------------------------------------
// safetensors given as model weights: `score --model DIR` with a valid config.json.

TEST(Hostile, SafetensorsWeights) {
  test::TempDir tmp;
  const std::string base = tmp.file("base");
  ASSERT_EQ(run_command(bin() + " init --preset tiny-qwen3 --seed 1 --out " + base).exit_code, 0);
  const std::string tokens = tmp.file("tokens.json");
  test::write_text(tokens, R"({"sequences": [[1, 2, 3, 4]]})");
  const Safetensors st(base + "/model.safetensors");
  const std::string norm = "model.norm.weight";  // [hidden] F32, every preset has it
  ASSERT_TRUE(st.header.contains(norm));
  const uint64_t data_size = st.data.size();

  struct Bad {
    std::string name;
    std::string bytes;
    std::string says;
  };
  std::vector<Bad> bad;
  auto with = [&](const std::string& name, const std::function<void(json&)>& patch,
                  const std::string& says) {
    Safetensors s = st;
    patch(s.header);
    bad.push_back({name, s.bytes(), says});
  };
  const std::string h = st.header.dump();
  bad.push_back({"empty file", "", "model.safetensors"});
  bad.push_back({"shorter than the length prefix", "abc", "model.safetensors"});
  bad.push_back({"header length past the file",
                 safetensors_bytes(h.size() + data_size + 100, h, st.data), "model.safetensors"});
  bad.push_back({"header length 2^63", safetensors_bytes(uint64_t{1} << 63, h, st.data),
                 "model.safetensors"});
  bad.push_back({"header length 0", safetensors_bytes(0, "", st.data), "model.safetensors"});
  bad.push_back(
      {"header not JSON", safetensors_bytes(9, "not json{", st.data), "model.safetensors"});
  bad.push_back({"header an array", safetensors_bytes(5, "[1,2]", st.data), "model.safetensors"});
  bad.push_back({"header a number", safetensors_bytes(2, "42", st.data), "model.safetensors"});
  bad.push_back({"header with NUL", safetensors_bytes(3, std::string("{\0}", 3), st.data),
                 "model.safetensors"});
  bad.push_back(
      {"truncated data", st.bytes().substr(0, st.bytes().size() - 10), "model.safetensors"});
  with(
      "dtype unknown", [&](json& j) { j[norm]["dtype"] = "F99"; }, norm);
  with(
      "dtype not a string", [&](json& j) { j[norm]["dtype"] = 7; }, norm);
  with(
      "shape negative",
      [&](json& j) {
        j[norm]["shape"] = {-1, 32};
      },
      norm);
  with(
      "shape huge",
      [&](json& j) {
        j[norm]["shape"] = {int64_t{1} << 40, int64_t{1} << 40};
      },
      norm);
  with(
      "shape product past int64",
      [&](json& j) {
        j[norm]["shape"] = {int64_t{1} << 62, 4, 4};
      },
      norm);
  with(
      "shape not an array", [&](json& j) { j[norm]["shape"] = "32"; }, norm);
  with(
      "shape of floats", [&](json& j) { j[norm]["shape"] = {1.5}; }, norm);
  with(
      "offsets past the data",
      [&](json& j) {
        j[norm]["data_offsets"] = {data_size - 4, data_size + 124};
      },
      norm);
  with(
      "offsets reversed",
      [&](json& j) {
        const auto b = j[norm]["data_offsets"][0].get<uint64_t>(),
                   e = j[norm]["data_offsets"][1].get<uint64_t>();
        j[norm]["data_offsets"] = {e, b};
      },
      norm);
  with(
      "offsets not 2 numbers", [&](json& j) { j[norm]["data_offsets"] = {0}; }, norm);
  with(
      "offsets strings",
      [&](json& j) {
        j[norm]["data_offsets"] = {"0", "128"};
      },
      norm);
  with(
      "offsets negative",
      [&](json& j) {
        j[norm]["data_offsets"] = {-128, 0};
      },
      norm);
  with(
      "offsets missing", [&](json& j) { j[norm].erase("data_offsets"); }, norm);
  with(
      "entry not an object", [&](json& j) { j[norm] = 5; }, norm);
  with(
      "offsets overlapping another tensor",
      [&](json& j) {
        for (const auto& [k, v] : j.items())
          if (k != norm && k != "__metadata__" &&
              v["data_offsets"][1].get<uint64_t>() - v["data_offsets"][0].get<uint64_t>() ==
                  j[norm]["data_offsets"][1].get<uint64_t>() -
                      j[norm]["data_offsets"][0].get<uint64_t>()) {
            j[norm]["data_offsets"] = v["data_offsets"];
            return;
          }
      },
      "overlap");
  with(
      "metadata not an object", [&](json& j) { j["__metadata__"] = 3; }, "__metadata__");
  {
    // A hole: every tensor moved 16 bytes on, the first 16 bytes of the data unused.
    Safetensors s = st;
    for (auto& [k, v] : s.header.items())
      if (k != "__metadata__")
        v["data_offsets"] = {v["data_offsets"][0].get<uint64_t>() + 16,
                             v["data_offsets"][1].get<uint64_t>() + 16};
    s.data = std::string(16, '\0') + s.data;
    bad.push_back({"hole before the first tensor", s.bytes(), "model.safetensors"});
  }
  bad.push_back({"tensor missing", st.without(norm).bytes(), norm});
  for (const float x : {std::nanf(""), -INFINITY}) {
    Safetensors s = st;
    std::memcpy(s.data.data() + st.header[norm]["data_offsets"][0].get<size_t>() + 8, &x, 4);
    bad.push_back({std::isnan(x) ? "NaN weight" : "infinite weight", s.bytes(),
                   "tensor '" + norm + "' element 2 is " + (std::isnan(x) ? "nan" : "infinite")});
  }
  {
    Safetensors s = st.without(norm);
    json t = st.header[norm];
    const int64_t n = t["shape"][0].get<int64_t>() + 1;
    t["shape"] = {n};
    t["data_offsets"] = {s.data.size(), s.data.size() + 4 * n};
    s.data += std::string(static_cast<size_t>(4 * n), '\0');
    s.header[norm] = t;
    bad.push_back({"tensor with the wrong shape", s.bytes(), norm});
  }
  {
    Safetensors s = st.without(norm);
    json t = st.header[norm];
    t["dtype"] = "I64";
    t["shape"] = {t["shape"][0].get<int64_t>() / 2};
    s.data += st.data.substr(st.header[norm]["data_offsets"][0].get<size_t>(),
                             4 * t["shape"][0].get<size_t>() * 2);
    t["data_offsets"] = {s.data.size() - 8 * t["shape"][0].get<size_t>(), s.data.size()};
    s.header[norm] = t;
    bad.push_back({"integer tensor as weights", s.bytes(), norm});
  }

  int i = 0;
  for (const Bad& b : bad) {
    const std::string dir = tmp.file("case" + std::to_string(i++));
    fs::create_directories(dir);
    fs::copy_file(base + "/config.json", dir + "/config.json");
    write_bytes(dir + "/model.safetensors", b.bytes);
    const std::string out = tmp.file("out" + std::to_string(i) + ".json");
    // The message names the file, and the tensor or field where the table says one.
    expect_clean_error({b.name,
                        "score --model " + dir + " --input " + tokens + " --json " + out,
                        {dir + "/model.safetensors", b.says},
                        {out}},
                       tmp.path());
  }
}

// ---------------------------------------------------------------------------------------------
// config.json of a model directory: `score --model DIR` (the weights are valid for the original).

TEST(Hostile, ModelConfig) {
  test::TempDir tmp;
  const std::string base = tmp.file("base");
  ASSERT_EQ(run_command(bin() + " init --preset tiny-qwen3 --seed 1 --out " + base).exit_code, 0);
  const std::string tokens = tmp.file("tokens.json");
  test::write_text(tokens, R"({"sequences": [[1, 2, 3, 4]]})");
  const json cfg = json::parse(test::read_text(base + "/config.json"));
  struct Bad {
    std::string name, text, says;
  };
  std::vector<Bad> bad;
  auto patched = [&](const std::string& name, const std::string& patch, const std::string& says) {
    json j = cfg;
    j.update(json::parse(patch));
    bad.push_back({name, j.dump(), says});
  };
  auto without = [&](const std::string& key) {
    json j = cfg;
    j.erase(key);
    bad.push_back({"missing " + key, j.dump(), key});
  };
  patched("hidden_size a string", R"({"hidden_size": "64"})", "hidden_size");
  patched("hidden_size zero", R"({"hidden_size": 0})", "hidden_size");
  patched("hidden_size negative", R"({"hidden_size": -64})", "hidden_size");
  patched("hidden_size fractional", R"({"hidden_size": 64.5})", "hidden_size");
  patched("intermediate_size negative", R"({"intermediate_size": -1})", "intermediate_size");
  patched("num_hidden_layers zero", R"({"num_hidden_layers": 0})", "num_hidden_layers");
  patched("vocab_size huge", R"({"vocab_size": 4611686018427387904})", "vocab_size");
  patched("kv heads do not divide heads", R"({"num_key_value_heads": 3})", "num_key_value_heads");
  patched("kv heads above heads", R"({"num_key_value_heads": 8})", "num_key_value_heads");
  patched("head_dim odd (RoPE pairs)", R"({"head_dim": 23})", "head_dim");
  patched("unknown model_type", R"({"model_type": "mamba"})", "model_type");
  patched("model_type a number", R"({"model_type": 3})", "model_type");
  patched("rope_theta negative", R"({"rope_theta": -1.0})", "rope_theta");
  patched("rms_norm_eps zero", R"({"rms_norm_eps": 0})", "rms_norm_eps");
  patched("rope_scaling a string", R"({"rope_scaling": "yes"})", "rope_scaling");
  patched("rope_scaling unknown type", R"({"rope_scaling": {"rope_type": "warp", "factor": 2}})",
          "rope_scaling");
  patched("rope_scaling llama3 factor negative",
          R"({"rope_scaling": {"rope_type": "llama3", "factor": -8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})",
          "rope_scaling");
  patched("tie_word_embeddings a string", R"({"tie_word_embeddings": "yes"})",
          "tie_word_embeddings");
  patched("max_position_embeddings negative", R"({"max_position_embeddings": -1})",
          "max_position_embeddings");
  without("model_type");
  without("hidden_size");
  without("vocab_size");
  bad.push_back({"rope_theta 1e999",
                 cfg.dump().substr(0, cfg.dump().size() - 1) + ", \"rope_theta\": 1e999}",
                 "config.json"});
  bad.push_back({"truncated JSON", cfg.dump().substr(0, 40), "config.json"});
  bad.push_back({"an array", "[" + cfg.dump() + "]", "config.json"});
  bad.push_back({"empty", "", "config.json"});
  int i = 0;
  for (const Bad& b : bad) {
    const std::string dir = tmp.file("case" + std::to_string(i++));
    fs::create_directories(dir);
    fs::copy_file(base + "/model.safetensors", dir + "/model.safetensors");
    test::write_text(dir + "/config.json", b.text);
    const std::string out = tmp.file("out" + std::to_string(i) + ".json");
    expect_clean_error({b.name,
                        "score --model " + dir + " --input " + tokens + " --json " + out,
                        {dir + "/config.json", b.says},
                        {out}},
                       tmp.path());
  }
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json / tokenizer_config.json: `tokenize --tokenizer DIR` and `train` with `tokenizer=`.

TEST(Hostile, Tokenizer) {
  test::TempDir tmp;
  const std::string chat = src() + "/examples/tiny-chat";
  const json tok = json::parse(test::read_text(chat + "/tokenizer.json"));
  const json tcfg = json::parse(test::read_text(chat + "/tokenizer_config.json"));
  const std::string input = tmp.file("in.jsonl");
  test::write_text(input, "{\"text\": \"What is 2 plus 2?\"}\n");
  struct Bad {
    std::string name, tokenizer, config, says;  // says: beyond the file name
    std::string file = "tokenizer.json";        // the file the message must name
  };
  std::vector<Bad> bad;
  auto tok_with = [&](const std::string& name, const std::function<void(json&)>& patch,
                      const std::string& says) {
    json j = tok;
    patch(j);
    bad.push_back({name, j.dump(), tcfg.dump(), says});
  };
  auto cfg_with = [&](const std::string& name, const std::function<void(json&)>& patch,
                      const std::string& says) {
    json j = tcfg;
    patch(j);
    bad.push_back({name, tok.dump(), j.dump(), says, "tokenizer_config.json"});
  };
  tok_with(
      "merge of unknown tokens",
      [](json& j) {
        j["model"]["merges"].push_back({"\u00e9\u00e9", "qq"});
      },
      "merge");
  tok_with(
      "merge not a pair", [](json& j) { j["model"]["merges"].push_back({"a"}); }, "merge");
  tok_with(
      "duplicate id", [](json& j) { j["model"]["vocab"]["zzzz"] = 5; }, "5");
  tok_with(
      "negative id", [](json& j) { j["model"]["vocab"]["zzzz"] = -1; }, "-1");
  tok_with(
      "huge id", [](json& j) { j["model"]["vocab"]["zzzz"] = 67108863; }, "67108863");
  tok_with(
      "fractional id", [](json& j) { j["model"]["vocab"]["zzzz"] = 1.5; }, "zzzz");
  tok_with(
      "id a string", [](json& j) { j["model"]["vocab"]["zzzz"] = "7"; }, "zzzz");
  tok_with(
      "vocab an array", [](json& j) { j["model"]["vocab"] = json::array(); }, "vocab");
  tok_with(
      "unknown model type", [](json& j) { j["model"]["type"] = "WordPiece"; }, "WordPiece");
  tok_with(
      "unknown pre-tokenizer",
      [](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["type"] = "Fancy"; }, "Fancy");
  tok_with(
      "bad regex in Split",
      [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a|"; }, "regex");
  tok_with(
      "added_tokens not an array", [](json& j) { j["added_tokens"] = 5; }, "added_tokens");
  tok_with(
      "added token without content", [](json& j) { j["added_tokens"][0].erase("content"); },
      "added_tokens");
  tok_with(
      "added token id a string", [](json& j) { j["added_tokens"][0]["id"] = "x"; }, "added_tokens");
  tok_with(
      "added token id negative", [](json& j) { j["added_tokens"][0]["id"] = -5; }, "added_tokens");
  tok_with(
      "model missing", [](json& j) { j.erase("model"); }, "model");
  bad.push_back({"tokenizer.json not JSON", "{\"model\": ", tcfg.dump(), "JSON"});
  bad.push_back({"tokenizer.json an array", "[]", tcfg.dump(), "object"});
  cfg_with(
      "tokenizer_config not JSON", [](json&) {}, "JSON");
  bad.back().config = "{,";
  cfg_with(
      "eos_token a number", [](json& j) { j["eos_token"] = 12; }, "eos_token");
  int i = 0;
  for (const Bad& b : bad) {
    const std::string dir = tmp.file("tok" + std::to_string(i++));
    fs::create_directories(dir);
    test::write_text(dir + "/tokenizer.json", b.tokenizer);
    test::write_text(dir + "/tokenizer_config.json", b.config);
    const std::string out = tmp.file("out" + std::to_string(i));
    // `tokenize` reads tokenizer_config.json only for what it needs; train reads both.
    if (b.file == "tokenizer.json")
      expect_clean_error({b.name,
                          "tokenize --tokenizer " + dir + " --input " + input,
                          {dir + "/" + b.file, b.says}},
                         tmp.path());
    expect_clean_error({b.name + " (train)",
                        "train examples/tiny-chat/sft.yaml tokenizer=" + dir + " output_dir=" + out,
                        {dir + "/" + b.file, b.says},
                        {out}},
                       src());
  }
  // An eos_token outside the vocabulary matters (only) for plain-text data, which appends it.
  {
    const std::string dir = tmp.file("bad-eos"), text = tmp.file("text.jsonl");
    fs::create_directories(dir);
    json j = tcfg;
    j["eos_token"] = "<|nope|>";
    test::write_text(dir + "/tokenizer.json", tok.dump());
    test::write_text(dir + "/tokenizer_config.json", j.dump());
    test::write_text(text, "{\"text\": \"What is 2 plus 2?\"}\n");
    expect_clean_error({"eos_token not in the vocabulary, text data",
                        "train examples/tiny-chat/sft.yaml tokenizer=" + dir +
                            " data.train=" + text + " output_dir=" + tmp.file("out-eos"),
                        {"eos_token '<|nope|>' is not in the vocabulary"},
                        {tmp.file("out-eos")}},
                       src());
  }
  // A chat template of no known family: `auto` cannot pick one, so training messages data stops.
  const std::string dir = tmp.file("unknown-template");
  fs::create_directories(dir);
  json j = tcfg;
  j["chat_template"] = "{% for m in messages %}{{ m.content }}{% endfor %}";
  test::write_text(dir + "/tokenizer.json", tok.dump());
  test::write_text(dir + "/tokenizer_config.json", j.dump());
  expect_clean_error({"chat template of no known family",
                      "train examples/tiny-chat/sft.yaml tokenizer=" + dir +
                          " output_dir=" + tmp.file("out-template"),
                      {"chat_template"},
                      {tmp.file("out-template")}},
                     src());
}

// ---------------------------------------------------------------------------------------------
// JSONL training data: `train examples/tiny-chat/sft.yaml data.train=FILE` (from the source dir).

TEST(Hostile, TrainingData) {
  test::TempDir tmp;
  const std::string ok_msg =
      R"({"messages": [{"role": "user", "content": "What is 1 plus 1?"}, {"role": "assistant", "content": "2."}]})";
  struct Bad {
    std::string name, text, says;  // says: after "FILE"
    std::string extra = "";        // more overrides
  };
  const std::string grpo = " objective=grpo data.eval_fraction=0 grpo.reference=";
  const std::string ok_rollout =
      R"({"prompt": "What is 1 plus 1?", "completion": "2.", "reward": 1.0})";
  std::vector<Bad> bad = {
      {"not JSON", "hello\n", ":1"},
      {"JSON not an object", "[1, 2]\n", ":1"},
      {"a string", "\"text\"\n", ":1"},
      {"unknown schema", "{\"foo\": 1}\n", ":1"},
      {"mixed schemas", ok_msg + "\n{\"text\": \"hi\"}\n", ":2"},
      {"truncated record", ok_msg + "\n" + ok_msg.substr(0, 30) + "\n", ":2"},
      {"messages not a list", "{\"messages\": \"hi\"}\n", ":1"},
      {"content a number",
       R"({"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "x"}]})"
       "\n",
       ":1"},
      {"empty messages", "{\"messages\": []}\n", ":1"},
      {"unknown role",
       R"({"messages": [{"role": "wizard", "content": "hi"}, {"role": "assistant", "content": "x"}]})"
       "\n",
       ":1"},
      {"message without role",
       R"({"messages": [{"content": "hi"}]})"
       "\n",
       ":1"},
      {"number past double", "{\"text\": \"a\", \"x\": 1e999}\n", ":1"},
      {"record longer than max_seq_len", ok_msg + "\n", ":1", " data.max_seq_len=8"},
      {"empty file", "", ""},
      {"only blank lines", "\n\n   \n\n", ""},
      {"invalid UTF-8", "{\"text\": \"a\xff\xfe b\"}\n", ":1"},
      {"NUL byte", std::string("{\"text\": \"a\0b\"}\n", 15), ":1"},
      {"text not a string", "{\"text\": [1, 2]}\n", ":1"},
      {"prompt without completion", "{\"prompt\": \"a\"}\n", ":1"},
      {"reward past float",
       R"({"prompt": "What is 1 plus 1?", "completion": "2.", "reward": 1e39})"
       "\n" +
           ok_rollout + "\n",
       ":1", grpo},
      {"reward a string",
       R"({"prompt": "What is 1 plus 1?", "completion": "2.", "reward": "high"})"
       "\n",
       ":1", grpo},
      {"reward past float (ppo)",
       R"({"prompt": "What is 1 plus 1?", "completion": "2.", "reward": -1e39})"
       "\n" +
           ok_rollout + "\n",
       ":1", " objective=ppo data.eval_fraction=0"},
      {"preference without rejected",
       R"({"prompt": "a", "chosen": "b"})"
       "\n",
       ":1", " objective=dpo data.eval_fraction=0"},
      {"messages data for dpo", ok_msg + "\n", "", " objective=dpo data.eval_fraction=0"},
  };
  int i = 0;
  for (const Bad& b : bad) {
    const std::string file = tmp.file("data" + std::to_string(i++) + ".jsonl");
    test::write_text(file, b.text);
    const std::string out = tmp.file("out" + std::to_string(i));
    expect_clean_error(
        {b.name,
         "train examples/tiny-chat/sft.yaml data.train=" + file + " output_dir=" + out + b.extra,
         {file + b.says},
         {out}},
        src());
  }
}

// ---------------------------------------------------------------------------------------------
// YAML trainer configs and key=value overrides.

TEST(Hostile, TrainerConfig) {
  test::TempDir tmp;
  const std::string out = tmp.file("out");
  struct Bad {
    std::string name, overrides, says;
  };
  std::vector<Bad> bad = {
      {"unknown key", "optim.lrr=1", "optim.lrr"},
      {"unknown section", "nonexistent.nested=1", "nonexistent.nested"},
      {"lr not a number", "optim.lr=fast", "optim.lr"},
      {"lr negative", "optim.lr=-1", "optim.lr"},
      {"lr nan", "optim.lr=nan", "optim.lr"},
      {"lr inf", "optim.lr=inf", "optim.lr"},
      {"lr past double", "optim.lr=1e999", "optim.lr"},
      {"lr past float", "optim.lr=1e39", "optim.lr"},
      {"epochs zero", "epochs=0", "epochs"},
      {"epochs negative", "epochs=-1", "epochs"},
      {"epochs past int64", "epochs=99999999999999999999", "epochs"},
      {"max_steps negative", "max_steps=-1", "max_steps"},
      {"grad_accum zero", "grad_accum=0", "grad_accum"},
      {"max_tokens zero", "max_tokens=0", "max_tokens"},
      {"max_seq_len negative", "data.max_seq_len=-1", "data.max_seq_len"},
      {"save_every negative", "save_every=-1", "save_every"},
      {"keep_last negative", "keep_last=-1", "keep_last"},
      {"layer_chunk zero", "layer_chunk=0", "layer_chunk"},
      {"head_chunk negative", "head_chunk=-5", "head_chunk"},
      {"seed negative", "seed=-1", "seed"},
      {"seed not a number", "seed=abc", "seed"},
      {"eval_fraction above 1", "data.eval_fraction=1.5", "data.eval_fraction"},
      {"betas of one number", "optim.betas=[0.9]", "optim.betas"},
      {"beta above 1", "optim.betas=[0.9,2]", "optim.betas"},
      {"warmup_ratio negative", "schedule.warmup_ratio=-0.5", "schedule.warmup_ratio"},
      {"max_grad_norm nan", "optim.max_grad_norm=nan", "optim.max_grad_norm"},
      {"unknown objective", "objective=rlhf", "objective"},
      {"unknown mode", "mode=fast", "mode"},
      {"unknown schedule", "schedule.type=zigzag", "schedule.type"},
      {"unknown precision", "precision=fp8", "precision"},
      {"unknown truncation", "data.truncation=maybe", "data.truncation"},
      {"unknown chat template", "data.chat_template=gpt4", "data.chat_template"},
      {"unknown on_nonfinite", "on_nonfinite=ignore", "on_nonfinite"},
      {"boolean not a boolean", "data.shuffle=perhaps", "data.shuffle"},
      {"override without =", "epochs", "epochs"},
      {"override with empty key", "=3", "=3"},
      {"a section given a value", "optim=3", "optim"},
  };
  int n = 0;
  for (const Bad& b : bad) {
    // Each case its own output_dir: one that trained by mistake must not fail the next ones.
    const std::string o = out + std::to_string(n++);
    expect_clean_error({b.name,
                        "train examples/tiny-chat/sft.yaml output_dir=" + o + " " + b.overrides,
                        {b.says},
                        {o}},
                       src());
  }

  // Whole YAML files: each names the file.
  const std::string chat = src() + "/examples/tiny-chat";
  const std::string head = "model: " + chat + "/config.json\ntokenizer: " + chat +
                           "\noutput_dir: " + out + "\ndata:\n  train: " + chat + "/train.jsonl\n";
  struct BadYaml {
    std::string name, text, says;
  };
  std::vector<BadYaml> yamls = {
      {"a list", "- model: x\n- epochs: 1\n", ""},
      {"a scalar", "hello\n", ""},
      {"empty", "", ""},
      {"tab indentation", head + "optim:\n\tlr: 1e-3\n", ""},
      // yaml-cpp reads an unclosed quote as a scalar running to the end of the file, so the
      // message is about the value ("objective must be ..."), but it names the line.
      {"unclosed quote", head + "objective: \"sft\n", ":6"},
      {"unknown key with its line", head + "optim:\n  lrr: 1\n", ":7"},
      {"wrong type with its line", head + "epochs: [1, 2]\n", ":6"},
      {"missing model", "data:\n  train: " + chat + "/train.jsonl\n", ": model is required"},
      {"missing data.train", "model: " + chat + "/config.json\n", ": data.train is required"},
      {"duplicate key", head + "epochs: 1\nepochs: 2\n", ":7: duplicate key 'epochs'"},
  };
  int i = 0;
  for (const BadYaml& y : yamls) {
    const std::string file = tmp.file("cfg" + std::to_string(i++) + ".yaml");
    test::write_text(file, y.text);
    expect_clean_error({"YAML " + y.name, "train " + file, {file + y.says}, {out}}, tmp.path());
  }
}

// ---------------------------------------------------------------------------------------------
// Command-line numbers of bench, plan, gradcheck, score and init.

TEST(Hostile, CommandLineNumbers) {
  test::TempDir tmp;
  const std::string tokens = tmp.file("tokens.json"), made = tmp.file("made");
  test::write_text(tokens, R"({"sequences": [[1, 2, 3, 4]]})");
  const std::string m = " --model tiny-qwen3 ";
  const std::vector<Case> cases = {
      {"bench seq-len not a number", "bench" + m + "--seq-len abc", {"--seq-len", "abc"}},
      {"bench seq-len zero", "bench" + m + "--seq-len 0", {"--seq-len"}},
      {"bench seq-len negative", "bench" + m + "--seq-len -5", {"--seq-len"}},
      {"bench seq-len past int64", "bench" + m + "--seq-len 99999999999999999999", {"--seq-len"}},
      {"bench repeat zero", "bench" + m + "--seq-len 8 --repeat 0", {"--repeat", "from 1 to"}},
      {"bench warmup negative", "bench" + m + "--seq-len 8 --warmup -1", {"--warmup"}},
      {"bench warmup huge", "bench" + m + "--seq-len 8 --warmup 99999999999", {"--warmup"}},
      {"bench layers negative", "bench" + m + "--seq-len 8 --layers -3", {"--layers"}},
      {"bench layer-chunk negative",
       "bench" + m + "--seq-len 8 --layer-chunk -1",
       {"--layer-chunk"}},
      {"bench head-chunk zero", "bench" + m + "--seq-len 8 --head-chunk 0", {"--head-chunk"}},
      {"bench segments zero", "bench" + m + "--seq-len 8 --segments 0", {"--segments"}},
      {"bench threads negative", "bench" + m + "--seq-len 8 --threads -2", {"--threads"}},
      {"plan seq-len negative", "plan" + m + "--seq-len -64", {"--seq-len"}},
      {"plan layers zero", "plan" + m + "--seq-len 64 --layers 0", {"--layers"}},
      {"plan layer-chunk negative",
       "plan" + m + "--seq-len 64 --layer-chunk -1",
       {"--layer-chunk"}},
      {"plan head-chunk zero", "plan" + m + "--seq-len 64 --head-chunk 0", {"--head-chunk"}},
      {"plan ranks zero", "plan" + m + "--seq-len 64 --ranks 0", {"--ranks"}},
      {"plan ranks past int64",
       "plan" + m + "--seq-len 64 --ranks 99999999999999999999",
       {"--ranks"}},
      {"plan budget negative", "plan" + m + "--budget -5GiB", {"--budget"}},
      {"plan budget huge", "plan" + m + "--budget 1e30GiB", {"--budget"}},
      {"gradcheck seq-len 1", "gradcheck" + m + "--seq-len 1", {"--seq-len"}},
      {"gradcheck seq-len past int64",
       "gradcheck" + m + "--seq-len 99999999999999999999",
       {"--seq-len"}},
      {"gradcheck segments negative",
       "gradcheck" + m + "--seq-len 8 --segments -1",
       {"--segments"}},
      {"gradcheck segments past T/2",
       "gradcheck" + m + "--seq-len 8 --segments 100",
       {"--segments"}},
      {"gradcheck layers negative", "gradcheck" + m + "--seq-len 8 --layers -2", {"--layers"}},
      {"gradcheck layer-chunk negative",
       "gradcheck" + m + "--seq-len 8 --layer-chunk -1",
       {"--layer-chunk"}},
      {"gradcheck head-chunk negative",
       "gradcheck" + m + "--seq-len 8 --head-chunk -5",
       {"--head-chunk"}},
      {"score layer-chunk negative",
       "score" + m + "--input " + tokens + " --layer-chunk -1",
       {"--layer-chunk"}},
      {"score threads negative",
       "score" + m + "--input " + tokens + " --threads -3",
       {"--threads"}},
      {"score input missing", "score" + m, {"--input"}},
      {"init layers zero",
       "init --preset tiny-qwen3 --layers 0 --out " + made,
       {"--layers"},
       {made}},
      {"init layers negative",
       "init --preset tiny-qwen3 --layers -1 --out " + made,
       {"--layers"},
       {made}},
      {"init layers past the limit",
       "init --preset tiny-qwen3 --layers 99999 --out " + made,
       {"num_hidden_layers"},
       {made}},
      {"init std nan",
       "init --preset tiny-qwen3 --init-std nan --out " + made,
       {"--init-std"},
       {made}},
      {"init std negative",
       "init --preset tiny-qwen3 --init-std -1 --out " + made,
       {"--init-std"},
       {made}},
      {"init seed not a number",
       "init --preset tiny-qwen3 --seed abc --out " + made,
       {"--seed"},
       {made}},
  };
  for (const Case& c : cases) expect_clean_error(c, tmp.path());
}

// ---------------------------------------------------------------------------------------------
// Resume state: a real checkpoint of two steps, copied and corrupted, resumed with --resume.

// Every file under `dir` with its bytes.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[e.path().string()] = read_bytes(e.path().string());
  return files;
}

TEST(Hostile, ResumeState) {
  test::TempDir tmp;
  const std::string chat = src() + "/examples/tiny-chat";
  test::write_text(tmp.file("model.json"), test::kTinyChatModelJson);
  test::write_text(tmp.file("config.yaml"),
                   "model: " + tmp.file("model.json") + "\ntokenizer: " + chat +
                       "\noutput_dir: " + tmp.file("out") +
                       "\nthreads: 1\nlayer_chunk: 64\nhead_chunk: 32\nmax_tokens: 256\n"
                       "max_steps: 2\ndata:\n  train: " +
                       chat + "/train.jsonl\n");
  const auto r = run_command(bin() + " train " + tmp.file("config.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string good = tmp.file("out/checkpoint-2");
  ASSERT_TRUE(fs::exists(good + "/trainer_state.json")) << r.output;
  const auto good_files = snapshot(tmp.file("out"));
  const json state = json::parse(test::read_text(good + "/trainer_state.json"));
  const Safetensors opt(good + "/optimizer.safetensors");
  const std::string m_norm = "m.model.norm.weight", v_norm = "v.model.norm.weight";
  ASSERT_TRUE(opt.header.contains(m_norm) && opt.header.contains(v_norm));

  struct Bad {
    std::string name;
    std::string file;  // relative to the checkpoint
    std::string bytes;
    std::string says;        // besides the file's name
    std::string names = "";  // the file the message names, when not `file`
  };
  std::vector<Bad> bad;
  auto state_with = [&](const std::string& name, const std::function<void(json&)>& patch,
                        const std::string& says) {
    json j = state;
    patch(j);
    bad.push_back({name, "trainer_state.json", j.dump(2), says});
  };
  state_with(
      "step negative", [](json& j) { j["step"] = -1; }, "step");
  state_with(
      "step huge", [](json& j) { j["step"] = int64_t{1} << 62; }, "step");
  state_with(
      "step a string", [](json& j) { j["step"] = "2"; }, "step");
  state_with(
      "step missing", [](json& j) { j.erase("step"); }, "step");
  state_with(
      "step below skipped_steps", [](json& j) { j["skipped_steps"] = 3; }, "skipped_steps");
  state_with(
      "skipped_steps negative", [](json& j) { j["skipped_steps"] = -1; }, "skipped_steps");
  state_with(
      "total_steps zero", [](json& j) { j["total_steps"] = 0; }, "total_steps");
  state_with(
      "epoch negative", [](json& j) { j["epoch"] = -1; }, "epoch");
  state_with(
      "epoch huge", [](json& j) { j["epoch"] = int64_t{1} << 62; }, "epoch");
  state_with(
      "micro_batches_done negative", [](json& j) { j["micro_batches_done"] = -1; },
      "micro_batches_done");
  state_with(
      "micro_batches_done past the epoch", [](json& j) { j["micro_batches_done"] = 99999; },
      "micro_batches_done");
  state_with(
      "tokens_seen negative", [](json& j) { j["tokens_seen"] = -5; }, "tokens_seen");
  state_with(
      "rng state of 3 numbers",
      [](json& j) {
        j["epoch_rng_state"] = {1, 2, 3};
      },
      "epoch_rng_state");
  state_with(
      "rng state a string", [](json& j) { j["epoch_rng_state"] = "abc"; }, "epoch_rng_state");
  state_with(
      "rng state negative",
      [](json& j) {
        j["epoch_rng_state"] = {1, 2, 3, -4};
      },
      "epoch_rng_state");
  state_with(
      "rng state missing", [](json& j) { j.erase("epoch_rng_state"); }, "epoch_rng_state");
  state_with(
      "ranks zero", [](json& j) { j["ranks"] = 0; }, "ranks");
  state_with(
      "unknown format", [](json& j) { j["format"] = "something-else"; },
      "not a streambp trainer_state.json");
  state_with(
      "future version", [](json& j) { j["version"] = 99; }, "version");
  state_with(
      "data file hash changed",
      [](json& j) { j["data_files"]["train"]["fnv1a64"] = "0000000000000000"; },
      "the file changed since the checkpoint was written");
  bad.back().names = chat + "/train.jsonl";
  state_with(
      "config missing", [](json& j) { j.erase("config"); }, "config");
  bad.push_back({"trainer state not JSON", "trainer_state.json", "{\"step\": ", "JSON"});
  bad.push_back({"trainer state an array", "trainer_state.json", "[]", "object"});

  auto opt_with = [&](const std::string& name, const Safetensors& st, const std::string& says) {
    bad.push_back({name, "optimizer.safetensors", st.bytes(), says});
  };
  opt_with("moment missing", opt.without(m_norm), m_norm);
  {
    Safetensors st = opt.without(v_norm);
    json t = opt.header[v_norm];
    t["shape"] = {t["shape"][0].get<int64_t>() - 1};
    const size_t n = 4 * t["shape"][0].get<size_t>();
    t["data_offsets"] = {st.data.size(), st.data.size() + n};
    st.data += std::string(n, '\0');
    st.header[v_norm] = t;
    opt_with("moment of the wrong shape", st, v_norm);
  }
  auto set_float = [&](const std::string& tensor, float value) {
    Safetensors st = opt;
    const size_t at = st.header[tensor]["data_offsets"][0].get<size_t>();
    std::memcpy(st.data.data() + at, &value, 4);
    return st;
  };
  opt_with("NaN first moment", set_float(m_norm, std::nanf("")), m_norm);
  opt_with("infinite second moment", set_float(v_norm, INFINITY), v_norm);
  opt_with("negative second moment", set_float(v_norm, -1.0f), v_norm);
  {
    Safetensors st = opt;
    st.header["__metadata__"]["step"] = "5";
    opt_with("optimizer step not the trainer's", st, "the optimizer state has made 5 updates");
    bad.back().names = "trainer_state.json says 2";
    st.header["__metadata__"]["step"] = "minus one";
    opt_with("optimizer step not a number", st, "step");
    st.header["__metadata__"].erase("step");
    opt_with("optimizer step missing", st, "step");
  }
  bad.push_back({"optimizer file empty", "optimizer.safetensors", "", "optimizer.safetensors"});

  int i = 0;
  for (const Bad& b : bad) {
    const std::string ckpt = tmp.file("case" + std::to_string(i++));
    fs::copy(good, ckpt, fs::copy_options::recursive);
    write_bytes(ckpt + "/" + b.file, b.bytes);
    const auto before = snapshot(ckpt);
    const std::string out = tmp.file("resumed" + std::to_string(i));
    expect_clean_error({b.name,
                        "train --resume " + ckpt + " output_dir=" + out + " max_steps=4",
                        {b.names.empty() ? ckpt + "/" + b.file : b.names, b.says},
                        {out},
                        true},
                       tmp.path());
    EXPECT_TRUE(snapshot(ckpt) == before) << b.name << ": the resumed-from checkpoint changed";
  }
  // A checkpoint without its optimizer file, and the run they all came from: untouched.
  const std::string ckpt = tmp.file("no-optimizer");
  fs::copy(good, ckpt, fs::copy_options::recursive);
  fs::remove(ckpt + "/optimizer.safetensors");
  expect_clean_error(
      {"optimizer file missing",
       "train --resume " + ckpt + " output_dir=" + tmp.file("r-no-opt") + " max_steps=4",
       {ckpt, "optimizer"},
       {tmp.file("r-no-opt")},
       true},
      tmp.path());
  EXPECT_TRUE(snapshot(tmp.file("out")) == good_files) << "the original run changed";
}

// ---------------------------------------------------------------------------------------------
// Other inputs (score's token file, tokenize --decode, plot's metrics) and outputs that cannot be
// written: the image, JSON and gradient files must not appear (or change) after a failure.

TEST(Hostile, OtherInputsAndOutputs) {
  test::TempDir tmp;
  const std::string chat = src() + "/examples/tiny-chat";
  std::vector<Case> cases;
  int n = 0;
  auto file_with = [&](const std::string& text) {
    const std::string f = tmp.file("in" + std::to_string(n++) + ".json");
    test::write_text(f, text);
    return f;
  };
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"sequences": [[1, 99999]]})", "sequences[0][1]: token id 99999 is outside"},
           {R"({"sequences": [[-1, 2]]})", "sequences[0][0]: token id -1 is outside"},
           {R"({"sequences": [[1, 2147483648]]})", "sequences[0][1]"},
           {R"({"sequences": [[1.5, 2]]})", "sequences[0][0]: token id must be an integer"},
           {R"({"sequences": []})", "'sequences' is empty"},
           {R"({"sequences": "abc"})", "'sequences'"},
           {R"({"sequences": [[1, 2]], "loss_mask": [[1]]})", "loss_mask[0]"},
           {"[1, 2]", "expected an object"},
           {"nope", "invalid JSON"}}) {
    const std::string f = file_with(text), out = tmp.file("score" + std::to_string(n) + ".json");
    cases.push_back({"score input " + text,
                     "score --model tiny-qwen3 --input " + f + " --json " + out,
                     {f + ": " + says},
                     {out}});
  }
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"ids": [999999]})", ":1: tokenizer: token id 999999 is out of range"},
           {R"({"ids": [-1]})", ":1: tokenizer: token id -1 is out of range"},
           {R"({"ids": [1.5]})", ":1: ids[0] is not a token id"},
           {R"({"ids": "x"})", ":1: expected an object with a list field \"ids\""},
           {R"({"ids": [1e999]})", ":1: not valid JSON"}}) {
    const std::string f = file_with(text);
    cases.push_back(
        {"decode " + text, "tokenize --decode --tokenizer " + chat + " --input " + f, {f + says}});
  }
  {
    const std::string f = file_with("{\"text\": 5}\n");
    cases.push_back({"tokenize text a number",
                     "tokenize --tokenizer " + chat + " --input " + f,
                     {f + ":1: expected an object with a string field \"text\""}});
  }
  // plot: the image must not appear after a failure.
  const std::string png = tmp.file("plot.png");
  const std::string metrics = file_with("{\"step\": 1, \"loss\": 2.0, \"lr\": 0.1}\n");
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"not json\n", ":1: not a metrics line"},
           {"{\"step\": 1, \"loss\": 2}\n{\"loss\": 1}\n", ":2: not a metrics line"},
           {"{\"step\": \"one\", \"loss\": 2}\n", ":1: not a metrics line"},
           {"", ": no loss values to plot"},
           {"{\"step\": 1, \"lr\": 0.1}\n", ": no loss values to plot"}}) {
    const std::string f = file_with(text);
    cases.push_back({"plot metrics " + text, "plot " + f + " -o " + png, {f + says}, {png}});
  }
  cases.push_back({"plot to an unknown image type",
                   "plot " + metrics + " -o " + tmp.file("p.bmp"),
                   {"p.bmp: the image must be a .png or .svg file"},
                   {tmp.file("p.bmp")}});
  cases.push_back({"plot into a missing directory",
                   "plot " + metrics + " -o " + tmp.file("none/p.png"),
                   {"none is not a directory"},
                   {tmp.file("none")}});
  // Results that cannot be written: refused before the work (a bench of minutes used to run to
  // its end and only then fail to write its --json).
  const std::string tokens = file_with(R"({"sequences": [[1, 2, 3, 4]]})");
  const std::string missing = tmp.file("no-such-dir");
  for (const auto& [flag, args] : std::vector<std::pair<std::string, std::string>>{
           {"--json", "score --model tiny-qwen3 --input " + tokens + " --json "},
           {"--grads", "score --model tiny-qwen3 --input " + tokens + " --grads "},
           {"--json", "plan --model tiny-qwen3 --seq-len 64 --json "},
           {"--json", "gradcheck --model tiny-qwen3 --seq-len 8 --json "},
           {"--json", "bench --model tiny-qwen3 --seq-len 8 --repeat 1 --modes base --json "}}) {
    cases.push_back({args.substr(0, args.find(' ')) + " " + flag + " into a missing directory",
                     args + missing + "/out.json",
                     {flag + " " + missing + "/out.json: " + missing + " is not a directory"},
                     {missing}});
  }
  // init onto a file: refused, the file as it was.
  const std::string afile = tmp.file("a-file");
  test::write_text(afile, "precious\n");
  cases.push_back({"init --out onto a file",
                   "init --preset tiny-qwen3 --out " + afile,
                   {afile + ": exists and is not a directory"}});
  for (const Case& c : cases) expect_clean_error(c, tmp.path());
  EXPECT_EQ(test::read_text(afile), "precious\n");
}

// ---------------------------------------------------------------------------------------------
// ---- issue 35 class 2: data loss
// Outputs that would replace a device, a symlink, a directory streambp did not write, or an input
// of the same command. Everything happens under a scratch root with its own stand-ins (a FIFO for
// a device, symlinks to files in the root); no system path is touched. Besides the six promises,
// every case asserts that no file under the scratch root changed (a refusal writes nothing).

// Every entry under `root`: its type and, for a file its bytes, for a symlink its target.
std::map<std::string, std::string> tree_snapshot(const std::string& root) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string p = e.path().string();
    if (e.is_symlink()) m[p] = "link:" + fs::read_symlink(e.path()).string();
    else if (e.is_fifo()) m[p] = "fifo";
    else if (e.is_directory()) m[p] = "dir";
    else m[p] = "file:" + read_bytes(p);
  }
  return m;
}

void expect_unchanged(const std::map<std::string, std::string>& before, const std::string& root,
                      const std::string& what) {
  const auto after = tree_snapshot(root);
  for (const auto& [p, v] : before) {
    auto it = after.find(p);
    EXPECT_TRUE(it != after.end() && it->second == v) << what << ": " << p << " changed";
  }
  for (const auto& [p, v] : after)
    EXPECT_TRUE(before.count(p)) << what << ": " << p << " was created";
}

TEST(Hostile, DataLossOutputsRefused) {
  test::TempDir tmp;
  const std::string root = tmp.path();
  const std::string base = tmp.file("base");
  ASSERT_EQ(run_command(bin() + " init --preset tiny-qwen3 --seed 1 --out " + base).exit_code, 0);
  test::write_text(base + "/tokenizer.json", "{}");  // a model directory as published
  const std::string tokens = tmp.file("tokens.json");
  test::write_text(tokens, R"({"sequences": [[1, 2, 3, 4]]})");
  const std::string prompts = tmp.file("prompts.jsonl");
  test::write_text(prompts, "{\"prompt_ids\": [1, 2, 3]}\n");
  const std::string dangling = tmp.file("dangling.json");
  fs::create_symlink(tmp.file("nowhere/x.json"), dangling);
  const std::string to_tokens = tmp.file("link-to-tokens.json");
  fs::create_symlink(tokens, to_tokens);
  // A checkpoint: a model directory plus the optimizer state and trainer state a --resume needs.
  const std::string ckpt = tmp.file("run/checkpoint-2");
  ASSERT_EQ(run_command(bin() + " init --preset tiny-qwen3 --seed 2 --out " + ckpt).exit_code, 0);
  test::write_text(ckpt + "/optimizer.safetensors", "moments");
  test::write_text(ckpt + "/trainer_state.json", "{}");
  const std::string mine = tmp.file("mine");  // a model directory with the user's notes
  ASSERT_EQ(run_command(bin() + " init --preset tiny-qwen3 --seed 3 --out " + mine).exit_code, 0);
  test::write_text(mine + "/notes.txt", "precious\n");
  const std::string nested = tmp.file("nested");  // a model directory with a subdirectory
  ASSERT_EQ(run_command(bin() + " init --preset tiny-qwen3 --seed 4 --out " + nested).exit_code, 0);
  fs::create_directories(nested + "/eval");
  const std::string a_dir = tmp.file("a-dir");
  fs::create_directories(a_dir);

  const std::vector<Case> cases = {
      {"generate --output equal to --input",
       "generate --model " + base + " --input " + prompts + " --output " + prompts +
           " --max-new-tokens 2",
       {"--output " + prompts + " is --input " + prompts}},
      {"score --json equal to --input",
       "score --model " + base + " --input " + tokens + " --json " + tokens,
       {"--json " + tokens + " is --input " + tokens}},
      {"score --json a symlink to --input",
       "score --model " + base + " --input " + tokens + " --json " + to_tokens,
       {"--json " + to_tokens + " is --input " + tokens}},
      {"score --grads inside --model",
       "score --model " + base + " --input " + tokens + " --grads " + base + "/config.json",
       {"--grads " + base + "/config.json is inside --model " + base}},
      {"plan --json over the model's config",
       "plan --model " + base + " --seq-len 64 --json " + base + "/config.json",
       {"--json " + base + "/config.json is inside --model " + base}},
      {"score --json a dangling symlink",
       "score --model " + base + " --input " + tokens + " --json " + dangling,
       {"--json " + dangling + ": is a symlink to", "refusing"}},
      {"plan --json a directory",
       "plan --model tiny-qwen3 --seq-len 64 --json " + a_dir,
       {a_dir + ": is a directory"}},
      {"merge --out equal to --model",
       "merge --model " + base + " --adapter " + src() + "/tests/fixtures/lora/qwen3_all_linear --out " + base,
       {"--out " + base + " is --model " + base}},
      {"init --out onto a checkpoint",
       "init --preset tiny-qwen3 --out " + ckpt,
       {ckpt + ": holds optimizer.safetensors", "refusing to replace it"}},
      {"init --out onto a model directory with a user's file",
       "init --preset tiny-qwen3 --out " + mine,
       {mine + ": holds notes.txt", "refusing to replace it"}},
      {"init --out onto a model directory with a subdirectory",
       "init --preset tiny-qwen3 --out " + nested,
       {nested + ": holds eval", "refusing to replace it"}},
      {"init --out holding its --config",
       "init --config " + base + "/config.json --out " + base,
       {"--out " + base + " holds --config " + base + "/config.json"}},
  };
  for (const Case& c : cases) {
    const auto before = tree_snapshot(root);
    expect_clean_error(c, root);
    expect_unchanged(before, root, c.name);
  }
}

// overwrite_output_dir: true must not delete the run's own inputs (here the training data and
// the model, inside a previous run's checkpoint under output_dir).
TEST(Hostile, DataLossOverwriteOutputDirKeepsInputs) {
  test::TempDir tmp;
  const std::string root = tmp.path();
  const std::string out = tmp.file("out");
  const std::string ckpt = out + "/checkpoint-1";
  fs::create_directories(ckpt);
  fs::copy_file(src() + "/examples/tiny-chat/train.jsonl", ckpt + "/train.jsonl");
  fs::copy_file(src() + "/examples/tiny-chat/config.json", ckpt + "/config.json");
  test::write_text(ckpt + "/trainer_state.json", "{}");
  const std::string yaml = src() + "/examples/tiny-chat/sft.yaml";
  const std::vector<Case> cases = {
      {"overwrite_output_dir deleting data.train",
       "train " + yaml + " output_dir=" + out + " overwrite_output_dir=true data.train=" + ckpt +
           "/train.jsonl",
       {"overwrite_output_dir", "data.train " + ckpt + "/train.jsonl"},
       {},
       true},
      {"overwrite_output_dir deleting the model",
       "train " + yaml + " output_dir=" + out + " overwrite_output_dir=true model=" + ckpt +
           "/config.json",
       {"overwrite_output_dir", "model " + ckpt + "/config.json"},
       {},
       true},
  };
  for (const Case& c : cases) {
    const auto before = tree_snapshot(root);
    expect_clean_error(c, src());
    expect_unchanged(before, root, c.name);
  }
}

// The outputs that are written through, not replaced: a FIFO (a device's stand-in) stays a FIFO
// and receives the bytes; a symlink to a file stays a symlink and the file it leads to is
// replaced whole; nothing else under the scratch root changes.
TEST(Hostile, DataLossOutputsWrittenThrough) {
  test::TempDir tmp;
  const std::string root = tmp.path();
  const std::string fifo = tmp.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string got = tmp.file("got.json");
  auto r = run_command("cd " + root + " && { cat " + fifo + " > " + got + " & " + bin() +
                       " plan --model tiny-qwen3 --seq-len 64 --json " + fifo + "; wait; }");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_fifo(fifo)) << "the FIFO was replaced";
  EXPECT_TRUE(json::accept(read_bytes(got))) << read_bytes(got);
  const std::string file = tmp.file("results/plan.json"), link = tmp.file("plan-link.json");
  fs::create_directories(tmp.file("results"));
  test::write_text(file, "old\n");
  fs::create_symlink(file, link);
  auto before = tree_snapshot(root);
  r = run_command(bin() + " plan --model tiny-qwen3 --seq-len 64 --json " + link);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(link)) << "the symlink was replaced";
  EXPECT_EQ(fs::read_symlink(link).string(), file);
  EXPECT_TRUE(json::accept(read_bytes(file))) << read_bytes(file);
  before.erase(file);  // the one file that may change
  auto after = tree_snapshot(root);
  after.erase(file);
  EXPECT_EQ(before, after);
}

// ---- issue 35 class 1: strings into gnuplot scripts, deeply nested JSON ----------------------
// plot puts every string into its gnuplot script through one quoting function that refuses
// control characters (train/plot_metrics.cpp); every read of untrusted JSON goes through
// core/untrusted_json.h, which refuses nesting deeper than 256 levels before parsing.

// A title or file name that would run `touch MARK` if it reached gnuplot as script text. MARK
// lies in the test's scratch directory.
// `s` as one word for /bin/sh (dash has no $'...'): printf with every byte an octal escape. The
// command substitution drops trailing newlines, so every injection holds one inside as well.
std::string shell_bytes(const std::string& s) {
  std::string out = "\"$(printf '";
  char buf[8];
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof buf, "\\%03o", c);
    out += buf;
  }
  return out + "')\"";
}

std::vector<std::string> gnuplot_injections(const std::string& mark) {
  return {"x\nsystem \"touch " + mark + "\"\n",              // a newline ends the string
          "x\rsystem \"touch " + mark + "\"\r",              // so does CR for some readers
          "x'\nsystem \"touch " + mark + "\"\nset title '",  // closing quote, then newline
          std::string("x\0y", 3) + "\nsystem \"touch " + mark + "\""};
}

TEST(Hostile, Issue35PlotTitleInjection) {
  test::TempDir tmp;
  const std::string mark = tmp.file("PWNED");
  const std::string png = tmp.file("plot.png");
  const std::string metrics = tmp.file("metrics.jsonl");
  test::write_text(metrics,
                   "{\"step\": 1, \"loss\": 2.0, \"lr\": 0.1}\n"
                   "{\"step\": 2, \"loss\": 1.5, \"lr\": 0.1}\n");
  std::vector<Case> cases;
  for (const std::string& title : gnuplot_injections(mark)) {
    if (title.find('\0') != std::string::npos) continue;  // argv cannot hold a NUL
    cases.push_back({"plot --title with a control character",
                     "plot " + metrics + " -o " + png + " --title " + shell_bytes(title),
                     {"--title: contains a control character"},
                     {png, mark}});
  }
  // -o with a newline: refused before gnuplot runs, and the message stays on one line.
  const std::string bad_out = tmp.file("a\nsystem \"touch PWNED\"\nb.png");  // cwd: tmp
  cases.push_back({"plot -o with a newline",
                   "plot " + metrics + " -o " + shell_bytes(bad_out),
                   {"contains a control character"},
                   {bad_out, mark}});
  // A deeply nested metrics line is not a metrics line (and no stack overflow).
  const std::string deep_metrics = tmp.file("deep-metrics.jsonl");
  test::write_text(deep_metrics, "{\"step\": 1, \"loss\": 2, \"x\": " + std::string(200000, '[') +
                                     std::string(200000, ']') + "}\n");
  cases.push_back({"plot metrics line nested 200k deep",
                   "plot " + deep_metrics + " -o " + png,
                   {deep_metrics + ":1: not a metrics line"},
                   {png}});
  for (const Case& c : cases) expect_clean_error(c, tmp.path());
  EXPECT_FALSE(fs::exists(mark));

  // What gnuplot may be given is drawn, never run: a quote in the title and the default title
  // from a file name with newlines. These end in an image (exit 0), so they need gnuplot.
  if (run_command("command -v gnuplot").exit_code != 0) GTEST_SKIP() << "gnuplot not installed";
  const std::string quote_title = "x' ; system \"touch " + mark + "\" ; print '";
  auto r = run_command("cd " + tmp.path() + " && " + bin() + " plot " + metrics + " -o " + png +
                       " --title " + shell_bytes(quote_title));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(png)) << r.output;
  EXPECT_FALSE(fs::exists(mark)) << "a quote in --title ran a command";
  for (const std::string& name : gnuplot_injections(mark)) {
    if (name.find('\0') != std::string::npos) continue;  // a file name cannot hold it
    const std::string dir = tmp.file("named");
    fs::remove_all(dir);
    fs::create_directories(dir);
    // The file name must not hold '/': the injected command's path goes through a variable.
    const std::string file =
        dir + "/" + std::string(name).replace(name.find(mark), mark.size(), "$MARK") + ".jsonl";
    test::write_text(file, test::read_text(metrics));
    const std::string out = tmp.file("named.png");
    r = run_command("cd " + tmp.path() + " && MARK=" + mark + " " + bin() + " plot " +
                    shell_bytes(file) + " -o " + out);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(out)) << r.output;
    EXPECT_FALSE(fs::exists(mark)) << "the default title ran a command";
    fs::remove(out);
  }
}

// A value nested `depth` levels deep, as text (nlohmann would recurse to build or dump it).
std::string nested(size_t depth, bool objects = false) {
  if (!objects) return std::string(depth, '[') + std::string(depth, ']');
  std::string s;
  s.reserve(depth * 7);
  for (size_t i = 0; i < depth; ++i) s += "{\"a\": ";
  s += "1";
  s += std::string(depth, '}');
  return s;
}

// `text` (a JSON object) with one more field, "x": `value`.
std::string with_field(const std::string& text, const std::string& value) {
  const size_t close = text.rfind('}');
  return text.substr(0, close) + ", \"x\": " + value + "}" + text.substr(close + 1);
}

TEST(Hostile, Issue35DeepJson) {
  test::TempDir tmp;
  const std::string chat = src() + "/examples/tiny-chat";
  const std::string deep = nested(200000);  // 400 KB, the issue's case
  const std::string says = "JSON nested deeper than 256 levels";
  std::vector<Case> cases;
  int n = 0;
  auto file_with = [&](const std::string& name, const std::string& text) {
    const std::string f = tmp.file(std::to_string(n++) + "-" + name);
    test::write_text(f, text);
    return f;
  };

  // Prompt records: generate (plain and --accuracy) and online GRPO train.
  for (const auto& [what, value] : std::vector<std::pair<std::string, std::string>>{
           {"answer: a 200k-deep array", deep},
           {"answer: 200k-deep objects", nested(200000, true)},
           {"answer: 257 levels", nested(256)}}) {
    const std::string f = file_with("prompts.jsonl",
                                    "{\"prompt_ids\": [1, 2, 3], \"answer\": \"2\"}\n"
                                    "{\"prompt_ids\": [1, 2], \"answer\": " +
                                        value + "}\n");
    for (const std::string flag : {"", " --accuracy"}) {
      const std::string out = tmp.file("gen" + std::to_string(n++) + ".jsonl");
      cases.push_back({"generate" + flag + ", prompt record " + what,
                       "generate --model tiny-qwen3 --input " + f + " --output " + out +
                           " --max-new-tokens 2 --threads 1" + flag,
                       {f + ":2: " + says},
                       {out}});
    }
  }
  {
    const std::string f = file_with(
        "grpo.jsonl",
        "{\"prompt\": [{\"role\": \"user\", \"content\": \"What is 1 plus 1?\"}], \"answer\": "
        "\"2\"}\n"
        "{\"prompt\": [{\"role\": \"user\", \"content\": \"What is 2 plus 1?\"}], \"answer\": " +
            deep + "}\n");
    const std::string out = tmp.file("grpo-out");
    const std::string yaml =
        file_with("grpo.yaml", "model: " + chat + "/config.json\n" + "tokenizer: " + chat + "\n" +
                                   "output_dir: " + out + "\n" + "data: {train: " + f + "}\n" +
                                   "objective: grpo\n"
                                   "grpo: {num_generations: 2, "
                                   "prompts_per_step: 2, "
                                   "max_completion_length: 4}\n"
                                   "rewards:\n"
                                   "  - {type: accuracy, weight: 1.0}\n"
                                   "max_steps: 1\nthreads: 1\n");
    cases.push_back({"train online GRPO, prompt record nested 200k deep",
                     "train " + yaml,
                     {f + ":2: " + says},
                     {out}});
  }
  // A JSONL SFT record with the same field.
  {
    const std::string f =
        file_with("sft.jsonl", with_field(R"({"text": "What is 1 plus 1? 2."})", deep) + "\n");
    const std::string out = tmp.file("sft-out");
    expect_clean_error({"train SFT, record nested 200k deep",
                        "train examples/tiny-chat/sft.yaml data.train=" + f + " output_dir=" + out,
                        {f + ":1: " + says},
                        {out}},
                       src());
  }
  // Model and tokenizer files: config.json, tokenizer.json, tokenizer_config.json, the
  // safetensors header.
  auto model_dir = [&](const std::string& name) {
    const std::string d = tmp.file(name);
    fs::create_directories(d);
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(chat + "/" + f, d + "/" + f);
    return d;
  };
  const std::string tokens = file_with("tokens.json", R"({"sequences": [[1, 2, 3, 4]]})");
  const std::string line = file_with("in.jsonl", "{\"text\": \"What is 2 plus 2?\"}\n");
  {
    const std::string d = model_dir("deep-config");
    test::write_text(d + "/config.json", with_field(test::read_text(d + "/config.json"), deep));
    const std::string out = tmp.file("score-config.json");
    cases.push_back({"config.json nested 200k deep",
                     "score --model " + d + " --input " + tokens + " --json " + out,
                     {d + "/config.json: " + says},
                     {out}});
  }
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    const std::string d = model_dir(std::string("deep-") + file);
    const std::string p = d + "/" + file;
    test::write_text(p, with_field(test::read_text(p), deep));
    const std::string out = tmp.file(std::string("gen-") + file + "l");
    cases.push_back({std::string(file) + " nested 200k deep",
                     "generate --model tiny-qwen3 --tokenizer " + d + " --input " + line +
                         " --output " + out + " --max-new-tokens 2 --threads 1",
                     {p + ": " + says},
                     {out}});
  }
  {
    const std::string d = tmp.file("deep-safetensors");
    ASSERT_EQ(run_command(bin() + " init --preset tiny-qwen3 --seed 1 --out " + d).exit_code, 0);
    const std::string header = "{\"__metadata__\": {\"x\": " + deep + "}}";
    write_bytes(d + "/model.safetensors", safetensors_bytes(header.size(), header, ""));
    const std::string out = tmp.file("score-st.json");
    cases.push_back({"safetensors header nested 200k deep",
                     "score --model " + d + " --input " + tokens + " --json " + out,
                     {d + "/model.safetensors: " + says},
                     {out}});
  }
  // Inputs of score and tokenize.
  {
    const std::string f =
        file_with("tokens-deep.json", with_field(R"({"sequences": [[1, 2, 3, 4]]})", deep));
    const std::string out = tmp.file("score-in.json");
    cases.push_back({"score --input nested 200k deep",
                     "score --model tiny-qwen3 --input " + f + " --json " + out,
                     {f + ": " + says},
                     {out}});
    const std::string t = file_with("text-deep.jsonl", with_field(R"({"text": "a"})", deep) + "\n");
    cases.push_back({"tokenize --input line nested 200k deep",
                     "tokenize --tokenizer " + chat + " --input " + t,
                     {t + ":1: " + says}});
  }
  for (const Case& c : cases) expect_clean_error(c, tmp.path());

  // The limit is 256 levels: a record exactly that deep is read.
  const std::string ok = file_with("ok.jsonl", with_field(R"({"text": "a"})", nested(255)) + "\n");
  const auto r = run_command(bin() + " tokenize --tokenizer " + chat + " --input " + ok);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// A reward program whose answer is nested 100k deep (200 KB, within the 1 MiB line limit).
// A prompt record with two prompts (ids and text, or ids and a conversation): the text used to
// be ignored without a word; now the record is refused naming both (data/prompt_records.cpp).
TEST(Hostile, Issue35PromptRecordWithTwoPrompts) {
  test::TempDir tmp;
  const std::string chat = src() + "/examples/tiny-chat";
  std::vector<Case> cases;
  int n = 0;
  for (const auto& [other, value] : std::vector<std::pair<std::string, std::string>>{
           {"prompt", "\"What is 1 plus 1?\""},
           {"messages", "[{\"role\": \"user\", \"content\": \"hi\"}]"}}) {
    const std::string f = tmp.file("p" + std::to_string(n++) + ".jsonl");
    test::write_text(f, "{\"prompt_ids\": [1, 2, 3], \"" + other + "\": " + value + "}\n");
    const std::string out = tmp.file("gen" + std::to_string(n++) + ".jsonl");
    cases.push_back({"generate, prompt_ids and " + other,
                     "generate --model tiny-qwen3 --tokenizer " + chat + " --input " + f +
                         " --output " + out + " --max-new-tokens 2 --threads 1",
                     {f + ":1: both \"prompt_ids\" and \"" + other + "\""},
                     {out}});
  }
  for (const Case& c : cases) expect_clean_error(c, tmp.path());
}

TEST(Hostile, Issue35DeepRewardAnswer) {
  test::TempDir tmp;
  const std::string chat = src() + "/examples/tiny-chat";
  const std::string script = tmp.file("reward.sh");
  test::write_text(script,
                   "d=$(printf '%100000s' '' | tr ' ' '[')\n"
                   "e=$(printf '%100000s' '' | tr ' ' ']')\n"
                   "while read -r line; do printf '{\"reward\": 1, \"x\": %s%s}\\n' \"$d\" \"$e\"; "
                   "done\n");
  const std::string data = tmp.file("prompts.jsonl");
  test::write_text(data, "{\"prompt_ids\": [1, 2, 3]}\n{\"prompt_ids\": [1, 2]}\n");
  const std::string yaml = tmp.file("grpo.yaml");
  test::write_text(yaml, "model: " + chat + "/config.json\ntokenizer: " + chat +
                             "\noutput_dir: " + tmp.file("out") + "\ndata: {train: " + data +
                             "}\nobjective: grpo\n"
                             "grpo: {num_generations: 2, prompts_per_step: 2, "
                             "max_completion_length: 4}\n"
                             "rewards:\n  - {type: command, command: [sh, " +
                             script + "], timeout: 20}\nmax_steps: 1\nthreads: 1\n");
  // The run starts (its summary on stdout) before the first reward is asked for.
  expect_clean_error({"reward answer nested 100k deep",
                      "train " + yaml,
                      {"reward.sh' answered JSON nested deeper than 256 levels"},
                      {},
                      /*stderr_only=*/true},
                     tmp.path());
}

}  // namespace
}  // namespace sbp

// ---- issue 35 classes 3/5/6: rewards, adapters, numbers ----------------------------------------
// Reward programs (a helper left behind by a timeout, lines that answer nothing, an exit named by
// its status, SIGTERM while an answer is pending), non-finite or overflowing adapters and their
// config's numbers, and gradcheck's objective numbers. Same six promises as every case above; the
// reward cases save a checkpoint of step 0 by design (a failed reward stops the run with one), so
// only their other outputs are checked as absent.
// (Its includes are here, not at the top, so that sections appended by others merge cleanly.)
#include <signal.h>
#include <unistd.h>

#include <tuple>

namespace sbp {
namespace {

namespace issue35 {

// A LoRA adapter beside its base model (tests/fixtures/lora), copied so a case can spoil it.
const std::string kLoraFixture = "/tests/fixtures/lora/qwen3_kv_down";
const std::string kLoraA = "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight";
const std::string kLoraB = "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight";

std::string copy_adapter(const test::TempDir& tmp, const std::string& name) {
  const std::string dir = tmp.file(name);
  fs::create_directories(dir);
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    fs::copy_file(src() + kLoraFixture + "/adapter/" + f, dir + "/" + f);
  return dir;
}

// Sets element `index` of an F32 tensor of the adapter to `value`.
void set_adapter_value(const std::string& dir, const std::string& tensor, size_t index,
                       float value) {
  const std::string path = dir + "/adapter_model.safetensors";
  Safetensors s(path);
  const size_t at = s.header[tensor]["data_offsets"][0].get<size_t>() + 4 * index;
  std::memcpy(&s.data[at], &value, 4);
  write_bytes(path, s.bytes());
}

void set_adapter_config(const std::string& dir, const std::string& key, const json& value) {
  const std::string path = dir + "/adapter_config.json";
  json j = json::parse(read_bytes(path));
  j[key] = value;
  test::write_text(path, j.dump(2));
}

// An online GRPO run of the tiny random model whose one reward is `reward_argv` (a YAML list).
std::string grpo_config(const test::TempDir& tmp, const std::string& name,
                        const std::string& reward_argv, double timeout_s) {
  const std::string path = tmp.file(name + ".yaml");
  test::write_text(path,
                   "model: " + src() + "/examples/tiny-chat/config.json\n" + "tokenizer: " + src() +
                       "/examples/tiny-chat\n" + "output_dir: " + tmp.file(name + "-out") + "\n" +
                       "data:\n  train: " + src() +
                       "/examples/tiny-chat/arith_prompts.jsonl\n  eval_fraction: 0\n"
                       "objective: grpo\ngrpo:\n  num_generations: 4\n  prompts_per_step: 4\n"
                       "  max_completion_length: 6\n"
                       "rewards:\n  - {type: command, command: " +
                       reward_argv + "}\n" + "reward_timeout: " + std::to_string(timeout_s) + "\n" +
                       "max_tokens: 512\nmax_steps: 2\nsave_every: 0\nthreads: 1\n"
                       "optim:\n  lr: 0.01\nschedule:\n  type: constant\n");
  return path;
}

bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');  // then " S " (state): a zombie awaits init, gone too
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z';
}

}  // namespace issue35

TEST(Hostile, RewardPrograms) {
  if (run_command("python3 -c 'import json'").exit_code != 0)
    GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  using namespace issue35;
  test::TempDir tmp;
  const std::string script = src() + "/tests/fixtures/reward/hostile_reward.py";
  const std::string pid_file = tmp.file("helper.pid");
  struct Bad {
    std::string name, argv, says;
    double timeout_s = 20.0;
  };
  const std::vector<Bad> bad = {
      {"two answers per request", "[python3, " + script + ", twice]", "one answer per request"},
      {"1000 lines before the first request", "[python3, " + script + ", early]",
       "one answer per request"},
      // `false` exits 1 without reading: its request fails to send or resets the socket, which
      // used to be reported as "Connection reset by peer".
      {"a program exiting 1", "[false]", "it exited with status 1"},
      {"a helper outliving the timeout", "[python3, " + script + ", grandchild, " + pid_file + "]",
       "did not answer within reward_timeout (2 s)", 2.0},
  };
  for (const Bad& b : bad) {
    const std::string name = "r" + std::to_string(&b - bad.data());
    const std::string config = grpo_config(tmp, name, b.argv, b.timeout_s);
    Case c{b.name,
           "train " + config,
           {"reward command", b.says},
           {tmp.file(name + "-out/checkpoint-1")}};
    c.stderr_only = true;  // the run's summary goes to stdout before the first step
    expect_clean_error(c, tmp.path());
  }
  // The helper ignored SIGTERM and would have slept 600 s: the group's SIGKILL ended it.
  std::ifstream in(pid_file);
  pid_t helper = 0;
  ASSERT_TRUE(in >> helper) << "the helper never started";
  bool gone = false;
  for (int i = 0; i < 200 && !(gone = process_gone(helper)); ++i) usleep(10000);
  EXPECT_TRUE(gone) << "helper " << helper << " outlived the reward's timeout";
  if (!gone) kill(helper, SIGKILL);
}

// SIGTERM while a reward answer is pending (timeout 600 s): the stop path at once, exit 130 with
// a checkpoint, the program gone; it used to wait out the timeout and exit 1.
TEST(Hostile, SigtermWhileARewardIsPending) {
  if (run_command("python3 -c 'import json'").exit_code != 0)
    GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  using namespace issue35;
  test::TempDir tmp;
  const std::string script = src() + "/tests/fixtures/reward/hostile_reward.py";
  // The hang mode answers the first request and, on the second, writes the marker and sleeps:
  // from then on the answer is pending.
  const std::string marker = tmp.file("pending");
  const std::string config =
      grpo_config(tmp, "term", "[python3, " + script + ", hang, " + marker + "]", 600.0);
  const std::string cmd = "cd " + tmp.path() + " && timeout 60 bash -c '" + bin() + " train " +
                          config +
                          " >/dev/null 2>err.txt & p=$!; "
                          "for i in $(seq 300); do [ -e " +
                          marker +
                          " ] && break; sleep 0.1; done; sleep 0.5; "
                          "s=$(date +%s%N); kill -TERM $p; wait $p; rc=$?; "
                          "echo rc=$rc ms=$(( ($(date +%s%N) - s) / 1000000 ))'";
  const auto r = run_command(cmd);
  const std::string err = read_bytes(tmp.file("err.txt"));
  SCOPED_TRACE(r.output + "\nstderr: " + err);
  EXPECT_EQ(r.exit_code, 0);  // not the 60 s timeout
  EXPECT_NE(r.output.find("rc=130"), std::string::npos);
  const size_t took = r.output.find("ms=");
  ASSERT_NE(took, std::string::npos);
  EXPECT_LT(std::atof(r.output.c_str() + took + 3), 10000.0);  // not the 600 s timeout
  EXPECT_NE(err.find("stopped by signal 15 while a reward was pending"), std::string::npos);
  EXPECT_EQ(err.find("internal error"), std::string::npos);
  EXPECT_TRUE(fs::exists(tmp.file("term-out/checkpoint-0")));
  EXPECT_TRUE(fs::exists(marker));
  // "pendin[g]": the pattern must not match the shell that runs pgrep.
  const std::string pattern = marker.substr(0, marker.size() - 1) + "[g]";
  EXPECT_NE(run_command("pgrep -f '" + pattern + "'").exit_code, 0) << "the reward program is left";
}

TEST(Hostile, AdaptersAndObjectiveNumbers) {
  using namespace issue35;
  test::TempDir tmp;
  const std::string model = src() + kLoraFixture + "/model";
  std::vector<Case> cases;
  int n = 0;
  auto out = [&] { return tmp.file("merged" + std::to_string(n++)); };
  // Non-finite adapter weights: refused when the adapter is read, by merge, score and generate.
  for (const float bad : {std::nanf(""), INFINITY}) {
    const std::string a = copy_adapter(tmp, "nonfinite" + std::to_string(n));
    set_adapter_value(a, kLoraB, 7, bad);
    const std::string file = a + "/adapter_model.safetensors";
    const std::string o = out();
    const std::string says = std::isnan(bad) ? "is nan" : "is infinite";
    cases.push_back({"merge, adapter " + says,
                     "merge --model " + model + " --adapter " + a + " --out " + o,
                     {file, kLoraB + "' element 7 " + says},
                     {o}});
    const std::string tokens = tmp.file("tokens.json");
    test::write_text(tokens, R"({"sequences": [[1, 2, 3, 4]]})");
    cases.push_back({"score, adapter " + says,
                     "score --model " + model + " --adapter " + a + " --input " + tokens,
                     {file, kLoraB}});
  }
  // Finite factors whose product overflows: f32 (1e30 x 1e30), and f16 only (300 x 300 x 2).
  {
    const std::string a = copy_adapter(tmp, "overflow32");
    set_adapter_value(a, kLoraA, 0, 1e30f);
    set_adapter_value(a, kLoraB, 0, 1e30f);
    const std::string o = out();
    cases.push_back({"merge, product overflows f32",
                     "merge --model " + model + " --adapter " + a + " --out " + o,
                     {"model.layers.0.mlp.down_proj.weight", "element 0 is infinite"},
                     {o}});
  }
  {
    const std::string a = copy_adapter(tmp, "overflow16");
    set_adapter_value(a, kLoraA, 0, 300.0f);
    set_adapter_value(a, kLoraB, 0, 300.0f);
    const std::string o = out();
    cases.push_back({"merge --dtype f16, sum past 65504",
                     "merge --model " + model + " --adapter " + a + " --out " + o + " --dtype f16",
                     {"model.layers.0.mlp.down_proj.weight", "beyond F16's range"},
                     {o}});
  }
  // adapter_config.json's numbers.
  for (const auto& [key, value, says] : std::vector<std::tuple<std::string, json, std::string>>{
           {"lora_alpha", 1e39, "alpha = 1e+39 must be at most"},
           {"lora_alpha", -4, "alpha"},
           {"lora_alpha", 0, "alpha"},
           {"lora_alpha", "12", "lora_alpha = \"12\" is not a number"},
           {"r", 16.5, "r = 16.5 must be a positive integer"},
           {"r", 0, "r = 0"},
           {"r", -6, "r = -6"},
           {"r", 1000000, "r = 1000000 must be at most"},
           {"r", "6", "r = \"6\" must be a positive integer"}}) {
    const std::string a = copy_adapter(tmp, "config" + std::to_string(n));
    set_adapter_config(a, key, value);
    const std::string o = out();
    cases.push_back({"adapter_config " + key + " = " + value.dump(),
                     "merge --model " + model + " --adapter " + a + " --out " + o,
                     {a + "/adapter_config.json", says},
                     {o}});
  }
  // gradcheck's objective numbers: checked where parsed, NaN and inf included.
  const std::string g = "gradcheck --model tiny-qwen3 --seq-len 16 ";
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--objective grpo --entropy-coef inf", "--entropy-coef"},
           {"--objective grpo --entropy-coef nan", "--entropy-coef"},
           {"--objective grpo --entropy-coef -1", "--entropy-coef"},
           {"--objective dpo --beta nan", "--beta"},
           {"--objective dpo --beta inf", "--beta"},
           {"--objective grpo --beta -0.5", "--beta"},
           {"--objective dpo --label-smoothing nan", "--label-smoothing"},
           {"--objective dpo --segments 3", "--segments 3"},
           {"--objective grpo --group-size 2 --segments 3", "--segments 3"},
           {"--tolerance nan", "--tolerance"},
           {"--tolerance -1", "--tolerance"},
           {"--tolerance inf", "--tolerance"}}) {
    cases.push_back({"gradcheck " + args, g + args, {says}});
  }
  for (const Case& c : cases) expect_clean_error(c, tmp.path());
}

}  // namespace
}  // namespace sbp

// ---- issue 35 classes 4/5/6 (second part): plan's cost, LoRA settings, GRPO numbers ----------
// Class 4: `plan` past what it takes (tokens, ranks, generations) is a range error naming the
// flag, and what it takes runs within the suite's cap (4 GB of address space, 30 s).
// Class 5: resuming a LoRA run under another lora.alpha (or r, rsLoRA, targets), and lora.* keys
// beside lora.r 0 (full fine-tuning would run and ignore them), are refused naming the keys.
// Class 6: grpo.num_generations 1 (a group of one has no advantage), a completion length past the
// model's positions (named before anything is written), and rewards whose weighted total is past
// fp32 are named as what they are instead of a NaN step blamed on optim.lr.
// Same six promises as every case above.

namespace sbp {
namespace {

namespace issue35b {

// A tiny-chat training config (examples/tiny-chat) with `extra` YAML appended.
std::string tiny_config(const test::TempDir& tmp, const std::string& name,
                        const std::string& extra) {
  const std::string path = tmp.file(name + ".yaml");
  test::write_text(path, "model: " + src() + "/examples/tiny-chat/config.json\ntokenizer: " +
                             src() + "/examples/tiny-chat\noutput_dir: " +
                             tmp.file(name + "-out") + "\nmax_tokens: 512\nmax_steps: 1\n" +
                             "threads: 1\nseed: 0\n" + extra);
  return path;
}

const std::string kSftData = "data:\n  train: " + src() +
                             "/examples/tiny-chat/train.jsonl\n  eval_fraction: 0\n";

// An online GRPO config of tiny-chat; `grpo` and `rewards` are YAML blocks' bodies.
std::string grpo_run(const test::TempDir& tmp, const std::string& name, const std::string& grpo,
                     const std::string& rewards) {
  return tiny_config(tmp, name,
                     "data:\n  train: " + src() +
                         "/examples/tiny-chat/arith_prompts.jsonl\n  eval_fraction: 0\n"
                         "objective: grpo\ngrpo:\n" +
                         grpo + "rewards:\n" + rewards + "save_every: 0\noptim:\n  lr: 0.01\n");
}

}  // namespace issue35b

TEST(Hostile, Issue35PlanCostBounded) {
  test::TempDir tmp;
  const std::string json = tmp.file("plan.json");
  const std::string plan = "plan --model qwen3-0.6b --json " + json + " ";
  std::vector<Case> cases = {
      {"--seq-len 2^31-1", plan + "--seq-len 2147483647", {"--seq-len", "268435456"}, {json}},
      {"ppo --seq-len 1e8", plan + "--objective ppo --seq-len 100000000",
       {"--seq-len", "16777216", "ppo"}, {json}},
      {"--ranks 1e9", plan + "--seq-len 4096 --ranks 1e9", {"--ranks", "65536"}, {json}},
      {"--ranks 10^6", plan + "--seq-len 4096 --ranks 1000000", {"--ranks", "65536"}, {json}},
      {"--group-size 10^8", plan + "--objective grpo --seq-len 4096 --group-size 100000000",
       {"--group-size"}, {json}},
      {"generation past the positions",
       plan + "--objective grpo --seq-len 4096 --prompt-len 1000 --max-completion-length 40000",
       {"--max-completion-length", "max_position_embeddings (40960)"}, {json}},
      {"4096 generations of 40000 tokens",
       plan + "--objective grpo --seq-len 4096 --prompt-len 20000 --max-completion-length 20000 "
              "--num-generations 4096",
       {"--num-generations", "2^27"}, {json}},
  };
  for (const Case& c : cases) expect_clean_error(c, tmp.path());
  // What it takes, it plans cheaply: 10^8 tokens and 4096 generations (a 150k vocabulary)
  // within the cap; these took 1.6 GB / 17 s and ~6 GB before. (10^7 tokens under
  // AddressSanitizer, whose checked loops over the token ids would make 10^8 slow.)
  const std::string T = kAsan ? "10000000" : "100000000";
  for (const std::string& args :
       {plan + "--seq-len " + T, plan + "--objective grpo --seq-len 4096 --prompt-len 256 "
                                        "--max-completion-length 1024 --num-generations 4096"}) {
    SCOPED_TRACE(args);
    const auto r = run_command("cd " + tmp.path() + " && " + memory_cap() +
                               "OMP_NUM_THREADS=2 timeout 30 " + bin() + " " + args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(json));
    fs::remove(json);
  }
}

TEST(Hostile, Issue35LoraSettings) {
  using namespace issue35b;
  test::TempDir tmp;
  std::vector<Case> cases;
  // lora.* keys beside lora.r 0 (given, or the default).
  for (const auto& [name, lora, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"r0-alpha", "lora:\n  r: 0\n  alpha: 32\n", "lora.alpha would be ignored"},
           {"no-r-targets", "lora:\n  target_modules: all-linear\n",
            "lora.target_modules would be ignored"},
           {"r0-two", "lora:\n  r: 0\n  alpha: 8\n  use_rslora: true\n",
            "lora.alpha, lora.use_rslora would be ignored"}}) {
    const std::string config = tiny_config(tmp, name, kSftData + lora);
    cases.push_back({"lora " + name, "train " + config, {config, says, "lora.r is 0"},
                     {tmp.file(name + "-out")}});
  }
  for (const Case& c : cases) expect_clean_error(c, tmp.path());

  // A LoRA run of one step, then resumes under other adapter settings.
  const std::string config =
      tiny_config(tmp, "lora", kSftData + "lora:\n  r: 4\n  alpha: 16\nsave_every: 1\n");
  const auto first = run_command("cd " + tmp.path() + " && " + bin() + " train " + config);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string out = tmp.file("lora-out");
  const std::string ckpt = out + "/checkpoint-1";
  ASSERT_TRUE(fs::exists(ckpt + "/adapter_config.json"));
  const std::string state_before = read_bytes(ckpt + "/trainer_state.json");
  std::vector<Case> resumes = {
      {"resume, another alpha", "train --resume " + out + " lora.alpha=64 max_steps=2",
       {"lora.alpha is 64.0", "trained with 16.0", ckpt + "/adapter_config.json"},
       {out + "/checkpoint-2"}},
      {"resume, rsLoRA", "train --resume " + out + " lora.use_rslora=true max_steps=2",
       {"lora.use_rslora is true", "trained with false"}, {out + "/checkpoint-2"}},
      {"resume, full fine-tuning", "train --resume " + out + " lora.r=0 max_steps=2",
       {"lora.r is 0", "holds LoRA adapters"}, {out + "/checkpoint-2"}},
  };
  for (Case& c : resumes) {
    c.stderr_only = true;  // a resume summarises what it loaded before it cross-checks
    expect_clean_error(c, tmp.path());
  }
  EXPECT_EQ(read_bytes(ckpt + "/trainer_state.json"), state_before);

  // Its adapters made NaN: a run starting from them (lora.adapter) is refused naming the tensor
  // before anything is written, not a NaN step blamed on optim.lr.
  const std::string spoiled = tmp.file("spoiled");
  fs::create_directories(spoiled);
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
    fs::copy_file(ckpt + "/" + f, spoiled + "/" + f);
  const std::string tensor = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
  issue35::set_adapter_value(spoiled, tensor, 0, std::nanf(""));
  const std::string from = tiny_config(
      tmp, "from-nan", kSftData + "lora:\n  r: 4\n  adapter: " + spoiled + "\n");
  Case nan{"lora.adapter with a NaN", "train " + from,
           {spoiled + "/adapter_model.safetensors", tensor, "is nan"},
           {tmp.file("from-nan-out")}};
  nan.stderr_only = true;
  expect_clean_error(nan, tmp.path());
}

TEST(Hostile, Issue35GrpoNumbers) {
  using namespace issue35b;
  test::TempDir tmp;
  const std::string ok_rewards = "  - {type: format, pattern: \".*\"}\n";
  const std::string one = grpo_run(tmp, "g1",
                                   "  num_generations: 1\n  prompts_per_step: 2\n"
                                   "  max_completion_length: 6\n",
                                   ok_rewards);
  const std::string far = grpo_run(tmp, "far",
                                   "  num_generations: 2\n  prompts_per_step: 2\n"
                                   "  max_completion_length: 4096\n",
                                   ok_rewards);
  expect_clean_error({"grpo.num_generations 1", "train " + one,
                      {one, "grpo.num_generations is 1", "a group of one has no advantage"}, {tmp.file("g1-out")}},
                     tmp.path());
  Case c{"grpo.max_completion_length past the positions", "train " + far,
         {"grpo.max_completion_length 4096", "arith_prompts.jsonl:",
          "max_position_embeddings (4096)"},
         {tmp.file("far-out")}};
  c.stderr_only = true;  // the data summary goes to stdout first
  expect_clean_error(c, tmp.path());
  // Finite rewards whose weighted total is past fp32: named with the prompt's record, not a NaN
  // step. A failed reward saves the checkpoint of step 0 by design; step 1 is never written.
  const std::string huge = grpo_run(tmp, "huge",
                                    "  num_generations: 2\n  prompts_per_step: 2\n"
                                    "  max_completion_length: 4\n",
                                    "  - {type: format, pattern: \".*\", weight: 3.0e+38, "
                                    "name: big}\n"
                                    "  - {type: format, pattern: \".*\", weight: 3.0e+38, "
                                    "name: bigger}\n");
  Case h{"rewards past fp32", "train " + huge,
         {"total reward", "arith_prompts.jsonl:", "outside fp32 range", "'big' 1, 'bigger' 1"},
         {tmp.file("huge-out/checkpoint-1")}};
  h.stderr_only = true;
  expect_clean_error(h, tmp.path());
}

}  // namespace
}  // namespace sbp

// ---- issue 30: ORPO's and KTO's settings and data ----------------------------------------------
// orpo.beta and kto.* out of range, --beta on the command line, a KTO label that is not a boolean,
// and the wrong data format for each: one line naming the key, flag or file, nothing written.
namespace sbp {
namespace {

TEST(Hostile, Issue30OrpoKto) {
  test::TempDir tmp;
  std::vector<Case> cases;
  const std::string orpo = "train examples/tiny-chat/orpo.yaml output_dir=";
  int n = 0;
  for (const auto& [name, override_, says] : std::vector<std::array<std::string, 3>>{
           {"orpo.beta zero", "orpo.beta=0", "orpo.beta"},
           {"orpo.beta negative", "orpo.beta=-0.1", "orpo.beta"},
           {"orpo.beta nan", "orpo.beta=nan", "orpo.beta"},
           {"orpo.beta not a number", "orpo.beta=high", "orpo.beta"},
           {"messages data for orpo",
            "data.train=examples/tiny-chat/train.jsonl data.eval_fraction=0", "train.jsonl"}}) {
    const std::string o = tmp.file("orpo" + std::to_string(n++));
    cases.push_back({name, orpo + o + " " + override_, {says}, {o}});
  }
  // KTO: its numbers, its data (a label that is not a boolean, preference data for kto).
  const std::string bad_label = tmp.file("bad_label.jsonl");
  test::write_text(bad_label, R"({"prompt": "a", "completion": "b", "label": "yes"})"
                              "\n");
  const std::string kto = "train examples/tiny-chat/kto.yaml output_dir=";
  for (const auto& [name, override_, says] : std::vector<std::array<std::string, 3>>{
           {"kto.beta zero", "kto.beta=0", "kto.beta"},
           {"kto.desirable_weight negative", "kto.desirable_weight=-1", "kto.desirable_weight"},
           {"kto.undesirable_weight nan", "kto.undesirable_weight=nan", "kto.undesirable_weight"},
           {"kto label a string", "data.train=" + bad_label, "bad_label.jsonl:1"},
           {"preference data for kto", "data.train=examples/data/arith_preference.jsonl",
            "arith_preference.jsonl"}}) {
    const std::string o = tmp.file("kto" + std::to_string(n++));
    cases.push_back({name, kto + o + " " + override_, {says}, {o}});
  }
  const std::string g = "gradcheck --model tiny-qwen3 --seq-len 16 --objective orpo ";
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--beta nan", "--beta"}, {"--beta -1", "--beta"}, {"--segments 3", "--segments 3"}})
    cases.push_back({"gradcheck orpo " + args, g + args, {says}});
  for (const Case& c : cases) expect_clean_error(c, src());
}

TEST(Hostile, Issue29ContextParallelAndResidualGradOffload) {
  test::TempDir tmp;
  std::vector<Case> cases;
  const std::string sft = "train examples/tiny-chat/sft.yaml output_dir=";
  int n = 0;
  for (const auto& [name, override_, says] : std::vector<std::array<std::string, 3>>{
           {"context_parallel zero", "dist.context_parallel=0", "dist.context_parallel"},
           {"context_parallel negative", "dist.context_parallel=-2", "dist.context_parallel"},
           {"context_parallel huge", "dist.context_parallel=99999", "dist.context_parallel"},
           {"context_parallel not a number", "dist.context_parallel=two", "dist.context_parallel"},
           {"context_parallel without ranks", "dist.context_parallel=2", "does not divide"},
           {"context_parallel in base mode", "dist.context_parallel=2 mode=base",
            "dist.context_parallel"},
           {"offload unknown item", "offload=checkpoints+gy", "gy"},
           {"offload empty item", "offload=checkpoints+", "offload"}}) {
    const std::string o = tmp.file("cp" + std::to_string(n++));
    cases.push_back({name, sft + o + " " + override_, {says}, {o}});
  }
  for (const auto& [name, args, says] : std::vector<std::array<std::string, 3>>{
           {"plan --cp not dividing --ranks",
            "plan --model tiny-qwen3 --seq-len 64 --cp 3 --ranks 8", "--cp 3"},
           {"plan --cp 0", "plan --model tiny-qwen3 --seq-len 64 --cp 0", "--cp"},
           {"plan --cp base only", "plan --model tiny-qwen3 --seq-len 64 --cp 2 --modes base",
            "--cp"},
           {"plan --offload unknown",
            "plan --model tiny-qwen3 --seq-len 64 --offload residual", "residual"},
           {"gradcheck --cp without mpirun", "gradcheck --model tiny-qwen3 --seq-len 16 --cp 2",
            "mpirun -np 2"},
           {"bench --cp without mpirun", "bench --model tiny-qwen3 --seq-len 16 --cp 2",
            "mpirun -np 2"}})
    cases.push_back({name, args, {says}});
  for (const Case& c : cases) expect_clean_error(c, src());
}

}  // namespace
}  // namespace sbp

#include <optional>
#include <stdexcept>

namespace sbp {
namespace {

// ---- issue 34: hostile GGUF files for `streambp convert` ----------------------------------
// A small valid llama GGUF (every tensor F32, a byte-level tokenizer) serialised here by hand,
// independently of the library's writer, then broken one field at a time.
std::string le32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string le64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string gstr(const std::string& s) { return le64(s.size()) + s; }
std::string v_u32(uint32_t v) { return le32(4) + le32(v); }
std::string v_f32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return le32(6) + le32(u);
}
std::string v_str(const std::string& s) { return le32(8) + gstr(s); }
std::string v_strs(const std::vector<std::string>& xs) {
  std::string r = le32(9) + le32(8) + le64(xs.size());
  for (const auto& x : xs) r += gstr(x);
  return r;
}
std::string v_i32s(const std::vector<int32_t>& xs) {
  std::string r = le32(9) + le32(5) + le64(xs.size());
  for (int32_t x : xs) r += le32(static_cast<uint32_t>(x));
  return r;
}

struct GgufBuilder {
  uint32_t magic = 0x46554747, version = 3;
  std::optional<uint64_t> n_tensors, n_kv;  // overrides of the counts
  std::vector<std::pair<std::string, std::string>> kv;  // key, encoded type + value
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    uint64_t nbytes = 0;
    std::optional<uint64_t> offset;
  };
  std::vector<T> tensors;
  uint64_t align = 32;
  size_t cut = 0;  // bytes dropped from the end

  GgufBuilder() {
    const std::string a = "llama.";
    kv = {{"general.architecture", v_str("llama")},
          {a + "context_length", v_u32(64)},
          {a + "embedding_length", v_u32(32)},
          {a + "block_count", v_u32(1)},
          {a + "feed_forward_length", v_u32(32)},
          {a + "attention.head_count", v_u32(2)},
          {a + "attention.head_count_kv", v_u32(1)},
          {a + "attention.layer_norm_rms_epsilon", v_f32(1e-5f)},
          {a + "rope.freq_base", v_f32(10000.0f)},
          {"tokenizer.ggml.model", v_str("gpt2")},
          {"tokenizer.ggml.tokens", v_strs({"a", "b", "c", "d", "ab", "cd", "abcd", "<s>"})},
          {"tokenizer.ggml.token_type", v_i32s({1, 1, 1, 1, 1, 1, 1, 3})},
          {"tokenizer.ggml.merges", v_strs({"a b", "c d", "ab cd"})},
          {"tokenizer.ggml.eos_token_id", v_u32(7)}};
    auto t = [&](const std::string& n, std::vector<uint64_t> ne) {
      uint64_t numel = 1;
      for (uint64_t d : ne) numel *= d;
      tensors.push_back({n, ne, 0, 4 * numel, std::nullopt});
    };
    t("token_embd.weight", {32, 8});
    t("blk.0.attn_norm.weight", {32});
    t("blk.0.attn_q.weight", {32, 32});
    t("blk.0.attn_k.weight", {32, 16});
    t("blk.0.attn_v.weight", {32, 16});
    t("blk.0.attn_output.weight", {32, 32});
    t("blk.0.ffn_norm.weight", {32});
    t("blk.0.ffn_gate.weight", {32, 32});
    t("blk.0.ffn_up.weight", {32, 32});
    t("blk.0.ffn_down.weight", {32, 32});
    t("output_norm.weight", {32});
  }
  GgufBuilder& set(const std::string& key, const std::string& value) {
    for (auto& [k, v] : kv)
      if (k == key) {
        v = value;
        return *this;
      }
    kv.emplace_back(key, value);
    return *this;
  }
  GgufBuilder& drop(const std::string& key) {
    std::erase_if(kv, [&](const auto& p) { return p.first == key; });
    return *this;
  }
  T& tensor(const std::string& name) {
    for (T& t : tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
  std::string bytes() const {
    std::string b = le32(magic) + le32(version) + le64(n_tensors.value_or(tensors.size())) +
                    le64(n_kv.value_or(kv.size()));
    for (const auto& [k, v] : kv) b += gstr(k) + v;
    uint64_t off = 0;
    for (const T& t : tensors) {
      b += gstr(t.name) + le32(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) b += le64(d);
      b += le32(t.type) + le64(t.offset.value_or(off));
      off += (t.nbytes + align - 1) / align * align;
    }
    b.append((align - b.size() % align) % align, '\0');
    b.append(static_cast<size_t>(off), '\0');
    b.resize(b.size() - std::min(cut, b.size()));
    return b;
  }
};

TEST(Hostile, Issue34GgufFiles) {
  test::TempDir tmp;
  std::vector<Case> cases;
  int n = 0;
  auto add = [&](const std::string& name, const std::string& bytes,
                 std::vector<std::string> says) {
    const std::string f = tmp.file("g" + std::to_string(n) + ".gguf");
    const std::string out = tmp.file("out" + std::to_string(n++));
    write_bytes(f, bytes);
    says.insert(says.begin(), fs::path(f).filename().string());
    cases.push_back({name, "convert " + f + " --out " + out, says, {out}});
  };
  using B = GgufBuilder;
  // The valid base converts (the cases below break exactly one thing).
  {
    const std::string f = tmp.file("valid.gguf");
    write_bytes(f, B().bytes());
    const auto r = run_command(bin() + " convert " + f + " --out " + tmp.file("valid") + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  add("empty file", "", {"shorter"});
  add("ten bytes", "GGUF\3\0\0\0\0\0", {"shorter"});
  { B b; b.magic = 0x46554746; add("bad magic", b.bytes(), {"magic"}); }
  { B b; b.version = 1; add("version 1", b.bytes(), {"version 1"}); }
  { B b; b.version = 4; add("version 4", b.bytes(), {"version 4"}); }
  { B b; b.n_tensors = uint64_t{1} << 60; add("tensor count huge", b.bytes(), {"tensor count"}); }
  { B b; b.n_kv = uint64_t{1} << 60; add("metadata count huge", b.bytes(), {"metadata count"}); }
  { B b; b.n_kv = b.kv.size() + 1; add("metadata count one too many", b.bytes(), {}); }
  { B b; b.n_kv = 1; b.n_tensors = 0; add("key length huge", b.bytes().substr(0, 24) + le64(uint64_t{1} << 62) + "abcdefghijklmnop",
      {"metadata key 0"}); }
  { B b; b.set("", v_u32(1)); add("empty key", b.bytes(), {"is empty"}); }
  { B b; b.kv.push_back({"llama.block_count", v_u32(1)}); add("duplicate key", b.bytes(), {"duplicate metadata key 'llama.block_count'"}); }
  { B b; b.set("x.odd", le32(99) + le32(0)); add("unknown value type", b.bytes(), {"x.odd", "unknown value type 99"}); }
  { B b; b.set("x.flag", le32(7) + std::string(1, '\2')); add("bool 2", b.bytes(), {"x.flag", "bool"}); }
  { B b; b.set("x.s", le32(8) + le64(uint64_t{1} << 40) + "ab"); add("string past the end", b.bytes(), {"x.s", "truncated"}); }
  { B b; b.set("x.aa", le32(9) + le32(9) + le64(0)); add("array of arrays", b.bytes(), {"x.aa", "arrays of arrays"}); }
  { B b; b.set("x.a", le32(9) + le32(77) + le64(0)); add("unknown array element type", b.bytes(), {"x.a", "element type 77"}); }
  { B b; b.set("x.a", le32(9) + le32(4) + le64(uint64_t{1} << 61)); add("array length huge", b.bytes(), {"x.a", "array length"}); }
  { B b; b.set("x.big", le32(10) + le64(~uint64_t{0})); add("u64 past int64", b.bytes(), {"x.big", "u64"}); }
  { B b; b.set("general.alignment", v_str("32")); add("alignment a string", b.bytes(), {"general.alignment", "u32"}); }
  { B b; b.set("general.alignment", v_u32(0)); add("alignment 0", b.bytes(), {"general.alignment", "power of two"}); }
  { B b; b.set("general.alignment", v_u32(48)); add("alignment 48", b.bytes(), {"general.alignment", "power of two"}); }
  { B b; b.tensor("output_norm.weight").name = ""; add("empty tensor name", b.bytes(), {"tensor 10 name"}); }
  { B b; b.tensor("output_norm.weight").name = std::string(300, 'x'); add("tensor name 300 bytes", b.bytes(), {"tensor 10 name"}); }
  { B b; b.tensor("output_norm.weight").name = "blk.0.ffn_norm.weight"; add("duplicate tensor name", b.bytes(), {"duplicate tensor name 'blk.0.ffn_norm.weight'"}); }
  { B b; b.tensor("output_norm.weight").ne = {}; add("n_dims 0", b.bytes(), {"output_norm.weight", "n_dims 0"}); }
  { B b; b.tensor("output_norm.weight").ne = {32, 1, 1, 1, 1}; add("n_dims 5", b.bytes(), {"output_norm.weight", "n_dims 5"}); }
  { B b; b.tensor("output_norm.weight").ne = {0}; add("ne 0", b.bytes(), {"output_norm.weight", "ne[0] = 0"}); }
  { B b; b.tensor("output_norm.weight").ne = {uint64_t{1} << 40, uint64_t{1} << 40}; add("ne overflow", b.bytes(), {"output_norm.weight", "overflows"}); }
  { B b; b.tensor("output_norm.weight").type = 99; add("unknown ggml type", b.bytes(), {"output_norm.weight", "unknown ggml type 99"}); }
  { B b; auto& t = b.tensor("output_norm.weight"); t.type = 8; t.ne = {16}; t.nbytes = 17;
    add("Q8_0 row of 16", b.bytes(), {"output_norm.weight", "block size 32"}); }
  { B b; b.tensor("blk.0.attn_q.weight").offset = 8; add("misaligned offset", b.bytes(), {"blk.0.attn_q.weight", "offset 8"}); }
  { B b; b.tensor("blk.0.attn_k.weight").offset = 0; add("overlapping tensors", b.bytes(), {"blk.0.attn_k.weight", "offset 0"}); }
  { B b; b.cut = 100; add("data truncated", b.bytes(), {"output_norm.weight", "truncated"}); }
  { B b; auto& t = b.tensor("blk.0.ffn_up.weight"); t.type = 6; t.nbytes = 32 * 22;
    add("Q5_0 not supported", b.bytes(), {"blk.0.ffn_up.weight", "Q5_0"}); }
  { B b; b.drop("general.architecture"); add("no architecture", b.bytes(), {"general.architecture", "missing"}); }
  { B b; b.set("general.architecture", v_str("gpt2")); add("architecture gpt2", b.bytes(), {"general.architecture", "gpt2"}); }
  { B b; b.set("general.architecture", v_u32(1)); add("architecture a number", b.bytes(), {"general.architecture", "string"}); }
  { B b; b.drop("llama.embedding_length"); add("no embedding_length", b.bytes(), {"llama.embedding_length", "missing"}); }
  { B b; b.set("llama.attention.head_count", v_u32(0)); add("head_count 0", b.bytes(), {"llama.attention.head_count"}); }
  { B b; b.set("llama.block_count", v_str("1")); add("block_count a string", b.bytes(), {"llama.block_count", "integer"}); }
  { B b; b.tensor("token_embd.weight").name = "tok_embd.weight"; add("no token_embd", b.bytes(), {"token_embd.weight"}); }
  { B b; b.tensor("blk.0.attn_k.weight").ne = {32, 32}; b.tensor("blk.0.attn_k.weight").nbytes = 4096;
    add("attn_k shape against head_count_kv", b.bytes(), {"blk.0.attn_k.weight", "shape"}); }
  { B b; b.tensors.push_back({"blk.0.extra.weight", {32}, 0, 128, std::nullopt}); add("unknown tensor", b.bytes(), {"blk.0.extra.weight"}); }
  { B b; b.tensors.push_back({"rope_freqs.weight", {8}, 0, 32, std::nullopt}); add("rope_freqs", b.bytes(), {"rope_freqs.weight"}); }
  { B b; b.set("llama.rope.dimension_count", v_u32(8)); add("partial rotary", b.bytes(), {"llama.rope.dimension_count"}); }
  { B b; b.set("tokenizer.ggml.model", v_str("bert")); add("tokenizer model bert", b.bytes(), {"tokenizer.ggml.model", "bert"}); }
  { B b; b.set("tokenizer.ggml.pre", v_str("chameleon")); add("tokenizer pre unknown", b.bytes(), {"tokenizer.ggml.pre", "chameleon"}); }
  { B b; b.set("tokenizer.ggml.merges", v_strs({"a b", "abc"})); add("merge without a space", b.bytes(), {"tokenizer.ggml.merges", "[1]"}); }
  { B b; b.set("tokenizer.ggml.merges", v_strs({"a z"})); add("merge of unknown tokens", b.bytes(), {"tokenizer.ggml.merges", "[0]"}); }
  { B b; b.set("tokenizer.ggml.token_type", v_i32s({1, 1})); add("token_type length", b.bytes(), {"tokenizer.ggml.token_type", "2 entries"}); }
  { B b; b.set("tokenizer.ggml.eos_token_id", v_u32(8)); add("eos id past the vocabulary", b.bytes(), {"tokenizer.ggml.eos_token_id", "outside"}); }
  { B b; b.set("tokenizer.ggml.tokens", v_strs({"a", "b", "c", "d", "ab", "cd", "abcd", "a"})); add("token repeated", b.bytes(), {"tokenizer.ggml.tokens", "repeats"}); }
  { B b; b.set("tokenizer.ggml.tokens", v_u32(3)); add("tokens not an array", b.bytes(), {"tokenizer.ggml.tokens", "array of strings"}); }
  { B b; b.set("x.\nkey", v_u32(1)); add("key with a newline", b.bytes(), {"control characters"}); }
  { B b; b.set("tokenizer.ggml.tokens", v_strs({"a", "b", "c", "d", "ab", "cd", "abcd", "\xff"}));
    add("token not UTF-8", b.bytes(), {"tokenizer", "UTF-8"}); }
  for (const Case& c : cases) expect_clean_error(c, src());

  // Flags: the direction must fit the input.
  const std::string valid = tmp.file("valid.gguf");
  for (const auto& [name, args, says] : std::vector<std::array<std::string, 3>>{
           {"input missing", "convert " + tmp.file("nope.gguf") + " --out " + tmp.file("o1"),
            "nope.gguf"},
           {"--type for a GGUF input", "convert " + valid + " --type q8_0 --out " + tmp.file("o2"),
            "--type"},
           {"--to gguf from a file", "convert " + valid + " --to gguf --out " + tmp.file("o3"),
            "--to gguf"},
           {"--type q4_0", "convert " + tmp.file("valid") + " --to gguf --type q4_0 --out " +
                               tmp.file("o4.gguf"), "--type"},
           {"--out is the input", "convert " + valid + " --out " + valid, "--out"},
           {"--to hf from a directory", "convert " + tmp.file("valid") + " --to hf --out " +
                                            tmp.file("o5"), "--to hf"}})
    cases.push_back({name, args, {says}});
  for (size_t i = cases.size() - 6; i < cases.size(); ++i) expect_clean_error(cases[i], src());
}

}  // namespace
}  // namespace sbp

namespace sbp {
namespace {

// Issue 33: a `python` reward is a function the Python package gives train() (reward_funcs); a
// config file (or a checkpoint's stored config, read back by the program) cannot hold one.
TEST(Hostile, Issue33PythonRewardInAConfig) {
  test::TempDir tmp;
  const std::string o = tmp.file("grpo");
  const std::string grpo =
      "train examples/tiny-chat/arith-grpo.yaml model=examples/tiny-chat/config.json "
      "tokenizer=examples/tiny-chat grpo.num_generations=2 grpo.prompts_per_step=2 "
      "grpo.max_completion_length=4 output_dir=" + o;
  const std::vector<Case> cases = {
      {"python reward in a config", grpo + " 'rewards=[{type: python}]'",
       {"rewards[0]", "python reward is a function"}, {o}, true},
      {"python reward beside a built-in one",
       grpo + " 'rewards=[{type: format, pattern: x}, {type: python, name: judge}]'",
       {"rewards[1]", "python reward is a function"}, {o}, true}};
  for (const Case& c : cases) expect_clean_error(c, src());
}

}  // namespace
}  // namespace sbp

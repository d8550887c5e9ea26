// Hugging Face model directories: save/load round trips (single file and sharded, tied and
// untied), atomic replacement, and checkpoints that disagree with their config.json.
#include "model/checkpoint_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <set>

#include <nlohmann/json.hpp>

#include "backend/meta/meta_backend.h"
#include "model/safetensors.h"
#include "support/test_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

ParameterSet random_params(const ModelConfig& cfg, Pool& pool, uint64_t seed,
                           DType dt = DType::F32) {
  ParameterSet p(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(p, seed, InitStyle::test);
  if (dt == DType::F32) return p;
  ParameterSet q(cfg, pool, Category::weights, dt, false);
  for (size_t i = 0; i < p.size(); ++i) {
    const std::vector<float> v = download_f32(p.tensor(i));
    std::vector<uint16_t> bits(v.size());
    for (size_t j = 0; j < v.size(); ++j) bits[j] = f32_to_bf16(v[j]);
    q.tensor(i).memory->upload(q.tensor(i), bits.data());
  }
  return q;
}

std::vector<NamedTensor> named(const ParameterSet& p) {
  std::vector<NamedTensor> v;
  for (size_t i = 0; i < p.size(); ++i) v.push_back({p.name(i), p.tensor(i)});
  return v;
}

bool bitwise_equal(const ParameterSet& a, const ParameterSet& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a.name(i) != b.name(i) || a.tensor(i).shape != b.tensor(i).shape ||
        a.tensor(i).dtype != b.tensor(i).dtype ||
        test::bytes_of(a.tensor(i)) != test::bytes_of(b.tensor(i)))
      return false;
  }
  return true;
}

// A hand-assembled model directory: config.json + model.safetensors with these tensors.
void write_model(const std::string& dir, const ModelConfig& cfg,
                 const std::vector<NamedTensor>& tensors) {
  fs::create_directories(dir);
  test::write_text(dir + "/config.json", cfg.to_json().dump(2));
  write_safetensors(dir + "/model.safetensors", tensors, DType::F32);
}

// load_weights must throw InputError mentioning every string in `parts`.
void expect_load_error(const std::string& dir, const ModelConfig& cfg,
                       std::initializer_list<std::string> parts) {
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  ParameterSet p(cfg, pool, Category::weights, DType::F32, true);
  try {
    load_weights(dir, cfg, p);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    for (const std::string& s : parts)
      EXPECT_NE(msg.find(s), std::string::npos) << "wanted '" << s << "' in: " << msg;
  }
}

std::set<std::string> dir_names(const std::string& dir) {
  std::set<std::string> s;
  for (const auto& e : fs::directory_iterator(dir)) s.insert(e.path().filename().string());
  return s;
}

class ShardedRoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(ShardedRoundTrip, SaveThenLoadIsBitExact) {
  const ModelConfig cfg = preset_config(GetParam());
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  const ParameterSet params = random_params(cfg, pool, 11);
  test::TempDir tmp;
  const std::string dir = tmp.file("model");
  const int64_t max_shard = 30000;  // a few tensors per shard on the tiny presets
  save_model_dir(dir, cfg, params, DType::F32, max_shard);

  // Only the model directory remains: no temporary or backup siblings.
  EXPECT_EQ(dir_names(tmp.path()), std::set<std::string>{"model"});
  const std::set<std::string> files = dir_names(dir);
  EXPECT_TRUE(files.count("config.json"));
  EXPECT_TRUE(files.count("model.safetensors.index.json"));
  EXPECT_FALSE(files.count("model.safetensors"));

  const json index = json::parse(test::read_text(dir + "/model.safetensors.index.json"));
  const json& wm = index.at("weight_map");
  std::set<std::string> shards;
  for (auto it = wm.begin(); it != wm.end(); ++it) shards.insert(it->get<std::string>());
  const size_t n = shards.size();
  ASSERT_GT(n, 2u);
  EXPECT_EQ(files.size(), n + 2);  // shards + config + index
  char expect_last[64];
  std::snprintf(expect_last, sizeof expect_last, "model-%05zu-of-%05zu.safetensors", n, n);
  EXPECT_TRUE(shards.count(expect_last)) << expect_last;
  EXPECT_TRUE(shards.count("model-00001-of-" + std::string(expect_last).substr(15)));

  int64_t total = 0;
  const std::vector<ParamSpec> specs = parameter_specs(cfg);
  EXPECT_EQ(wm.size(), specs.size());
  for (const ParamSpec& s : specs) {
    EXPECT_TRUE(wm.contains(s.name)) << s.name;
    total += s.shape.numel() * 4;
  }
  EXPECT_EQ(index.at("metadata").at("total_size").get<int64_t>(), total);
  EXPECT_EQ(wm.contains("lm_head.weight"), !cfg.tie_word_embeddings);
  for (const std::string& s : shards) {  // every shard within the limit unless it is one tensor
    SafetensorsFile f(dir + "/" + s);
    int64_t bytes = 0;
    for (const auto& e : f.entries()) bytes += static_cast<int64_t>(e.end - e.begin);
    EXPECT_TRUE(bytes <= max_shard || f.entries().size() == 1) << s;
  }

  const ModelConfig back_cfg = load_config(dir);
  EXPECT_EQ(back_cfg.torch_dtype, "float32");
  EXPECT_EQ(back_cfg.to_json(), cfg.to_json());
  ParameterSet back(back_cfg, pool, Category::weights, DType::F32, true);
  load_weights(dir, back_cfg, back);
  EXPECT_TRUE(bitwise_equal(back, params));
}

INSTANTIATE_TEST_SUITE_P(Presets, ShardedRoundTrip,
                         ::testing::Values("tiny-qwen3", "tiny-qwen2", "tiny-llama"));

TEST(CheckpointIo, Bf16SingleFileRoundTrip) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  const ParameterSet params = random_params(cfg, pool, 5);
  test::TempDir tmp;
  const std::string dir = tmp.file("m") + "/";  // a trailing slash must not matter
  save_model_dir(dir, cfg, params, DType::BF16, /*max_shard_bytes=*/1 << 30);
  EXPECT_EQ(dir_names(tmp.path()), std::set<std::string>{"m"});
  EXPECT_EQ(dir_names(dir), (std::set<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(load_config(dir + "config.json").torch_dtype, "bfloat16");
  EXPECT_EQ(SafetensorsFile(dir + "model.safetensors").entries()[0].dtype, DType::BF16);

  // Into F32 parameters: the bf16-rounded values. Into BF16 parameters: the bf16 bits.
  ParameterSet f32(cfg, pool, Category::weights, DType::F32, true);
  load_weights(dir, cfg, f32);
  const ParameterSet want = random_params(cfg, pool, 5, DType::BF16);
  for (size_t i = 0; i < f32.size(); ++i) {
    const std::vector<float> got = download_f32(f32.tensor(i)), w = download_f32(want.tensor(i));
    for (size_t j = 0; j < got.size(); ++j) ASSERT_EQ(got[j], w[j]) << f32.name(i) << " " << j;
  }
  ParameterSet b16(cfg, pool, Category::weights, DType::BF16, true);
  load_weights(dir, cfg, b16);
  EXPECT_TRUE(bitwise_equal(b16, want));

  // BF16 parameters can be saved too, and F16 output is accepted.
  save_model_dir(dir, cfg, b16, DType::F16);
  EXPECT_EQ(load_config(dir).torch_dtype, "float16");
}

TEST(CheckpointIo, ShapeOnlyParametersAreValidatedNotRead) {
  const ModelConfig cfg = preset_config("tiny-llama");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  test::TempDir tmp;
  save_model_dir(tmp.file("m"), cfg, random_params(cfg, pool, 3), DType::BF16);
  Ledger meta_ledger;
  MetaBackend shape_only;
  Pool meta(meta_ledger, shape_only);
  ParameterSet shapes(cfg, meta, Category::weights, DType::BF16, false);
  EXPECT_NO_THROW(load_weights(tmp.file("m"), cfg, shapes));
  ModelConfig other = cfg;
  other.intermediate_size = 96;
  ParameterSet wrong(other, meta, Category::weights, DType::BF16, false);
  EXPECT_THROW(load_weights(tmp.file("m"), other, wrong), InputError);
}

TEST(CheckpointIo, ReplacesAModelDirectoryButNothingElse) {
  const ModelConfig cfg = preset_config("tiny-qwen2");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  const ParameterSet a = random_params(cfg, pool, 1);
  const ParameterSet b = random_params(cfg, pool, 2);
  test::TempDir tmp;
  const std::string dir = tmp.file("m");

  // An existing empty directory is fine.
  fs::create_directories(dir);
  save_model_dir(dir, cfg, a, DType::F32, 20000);
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  // Overwriting a model directory replaces it whole (old shards and index go away).
  save_model_dir(dir, cfg, b, DType::F32);
  EXPECT_EQ(dir_names(dir), (std::set<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(dir_names(tmp.path()), std::set<std::string>{"m"});
  ParameterSet back(cfg, pool, Category::weights, DType::F32, true);
  load_weights(dir, cfg, back);
  EXPECT_TRUE(bitwise_equal(back, b));

  // A non-empty directory without config.json is not ours: refuse, and touch nothing.
  const std::string home = tmp.file("home");
  fs::create_directories(home + "/sub");
  test::write_text(home + "/notes.txt", "precious");
  try {
    save_model_dir(home, cfg, a, DType::F32);
    FAIL() << "expected a refusal";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(home), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("refusing"), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::read_text(home + "/notes.txt"), "precious");
  EXPECT_EQ(dir_names(home), (std::set<std::string>{"notes.txt", "sub"}));
  // Nor is a plain file.
  const std::string file = tmp.file("file");
  test::write_text(file, "x");
  EXPECT_THROW(save_model_dir(file, cfg, a, DType::F32), InputError);
  EXPECT_EQ(test::read_text(file), "x");
  EXPECT_EQ(dir_names(tmp.path()), (std::set<std::string>{"m", "home", "file"}));
  // Parent directories are created.
  save_model_dir(tmp.file("deep/er/m"), cfg, a, DType::F32);
  EXPECT_TRUE(fs::exists(tmp.file("deep/er/m/model.safetensors")));
}

// ---- checkpoints that do not match the config --------------------------------------------

class CheckpointBad : public ::testing::Test {
 protected:
  CheckpointBad() : pool(ledger, *backend_), params(random_params(cfg, pool, 9)) {}
  ModelConfig cfg = preset_config("tiny-qwen3");
  const std::unique_ptr<Backend> backend_ = test::backend();
  Ledger ledger;
  Pool pool;
  ParameterSet params;
  test::TempDir tmp;
};

TEST_F(CheckpointBad, ShapeThatDisagreesWithConfig) {
  const std::string dir = tmp.file("m");
  std::vector<NamedTensor> t = named(params);
  const std::string q = "model.layers.0.self_attn.q_proj.weight";  // (96, 64)
  for (auto& nt : t)
    if (nt.name == q) nt.tensor = nt.tensor.reshaped(Shape{64, 96});
  write_model(dir, cfg, t);
  expect_load_error(dir, cfg,
                    {dir + "/model.safetensors", "tensor '" + q + "' has shape (64, 96)",
                     "config.json implies (96, 64)"});
}

TEST_F(CheckpointBad, UnknownTensorName) {
  const std::string dir = tmp.file("m");
  std::vector<NamedTensor> t = named(params);
  t.push_back({"model.layers.0.mlp.extra.weight", params.tensor(1)});
  write_model(dir, cfg, t);
  expect_load_error(dir, cfg, {dir + "/model.safetensors", "'model.layers.0.mlp.extra.weight'"});
}

TEST_F(CheckpointBad, MissingTensor) {
  const std::string dir = tmp.file("m");
  std::vector<NamedTensor> t = named(params);
  const std::string gone = "model.layers.1.self_attn.k_norm.weight";
  t.erase(std::remove_if(t.begin(), t.end(), [&](const NamedTensor& x) { return x.name == gone; }),
          t.end());
  write_model(dir, cfg, t);
  expect_load_error(dir, cfg, {dir + "/model.safetensors", "'" + gone + "'", "missing"});
  // The lm_head of an untied model is required.
  const std::string dir2 = tmp.file("m2");
  std::vector<NamedTensor> u = named(params);
  u.pop_back();
  ASSERT_EQ(params.name(params.size() - 1), "lm_head.weight");
  write_model(dir2, cfg, u);
  expect_load_error(dir2, cfg, {"'lm_head.weight'", "missing"});
}

TEST_F(CheckpointBad, NoCheckpointFiles) {
  const std::string dir = tmp.file("empty");
  fs::create_directories(dir);
  expect_load_error(dir, cfg, {dir, "no model.safetensors"});
  test::write_text(dir + "/pytorch_model.bin", "");
  expect_load_error(dir, cfg, {"PyTorch .bin"});
}

TEST_F(CheckpointBad, ShardedIndexProblems) {
  const std::string dir = tmp.file("m");
  save_model_dir(dir, cfg, params, DType::F32, 30000);
  const std::string index_path = dir + "/model.safetensors.index.json";
  const json good = json::parse(test::read_text(index_path));
  const std::string shard2 = good["weight_map"]["model.layers.1.mlp.up_proj.weight"];
  auto with_index = [&](const json& j) { test::write_text(index_path, j.dump()); };

  // A weight_map entry pointing outside the directory.
  json j = good;
  j["weight_map"]["model.norm.weight"] = "../model-00001-of-00009.safetensors";
  with_index(j);
  expect_load_error(dir, cfg, {index_path, "'model.norm.weight'", "not a plain file name"});
  // Not an object of strings.
  j = good;
  j["weight_map"]["model.norm.weight"] = 3;
  with_index(j);
  expect_load_error(dir, cfg, {index_path, "'model.norm.weight'", "must be a string"});
  j = good;
  j["weight_map"] = json::array();
  with_index(j);
  expect_load_error(dir, cfg, {index_path, "'weight_map' must be an object"});
  with_index(json::object());
  expect_load_error(dir, cfg, {index_path, "missing 'weight_map'"});
  test::write_text(index_path, "{ not json");
  expect_load_error(dir, cfg, {index_path, "invalid JSON"});
  // A name the shard does not hold.
  j = good;
  j["weight_map"]["model.layers.0.mlp.bogus.weight"] = shard2;
  with_index(j);
  expect_load_error(dir, cfg, {dir + "/" + shard2, "'model.layers.0.mlp.bogus.weight'"});
  // A shard tensor the index does not list (the shard stays named through another tensor).
  const std::string norm = "model.layers.1.post_attention_layernorm.weight";
  const std::string norm_shard = good["weight_map"][norm];
  ASSERT_EQ(norm_shard, good["weight_map"]["model.layers.1.self_attn.k_norm.weight"]);
  j = good;
  j["weight_map"].erase(norm);
  with_index(j);
  expect_load_error(dir, cfg, {dir + "/" + norm_shard, "'" + norm + "'", "not listed"});
  // The index maps a tensor to the wrong shard.
  j = good;
  j["weight_map"]["model.layers.1.mlp.up_proj.weight"] = good["weight_map"]["model.norm.weight"];
  with_index(j);
  expect_load_error(dir, cfg, {"'model.layers.1.mlp.up_proj.weight'"});
  // A shard that does not exist.
  with_index(good);
  fs::remove(dir + "/" + shard2);
  expect_load_error(dir, cfg, {index_path, shard2, "does not exist"});
}

TEST(CheckpointIo, TiedModelMayCarryAnIdenticalLmHead) {
  const ModelConfig cfg = preset_config("tiny-qwen2");
  ASSERT_TRUE(cfg.tie_word_embeddings);
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  const ParameterSet params = random_params(cfg, pool, 4);
  test::TempDir tmp;
  const Tensor embed = params.get("model.embed_tokens.weight");

  // A copy of the embedding under lm_head.weight (what some exporters write): accepted.
  std::vector<NamedTensor> t = named(params);
  t.push_back({"lm_head.weight", embed});
  write_model(tmp.file("same"), cfg, t);
  ParameterSet back(cfg, pool, Category::weights, DType::F32, true);
  load_weights(tmp.file("same"), cfg, back);
  EXPECT_TRUE(bitwise_equal(back, params));

  // One element different: the file is not a tied model, refuse it.
  Buffer head = pool.allocate(Category::other, DType::F32, embed.shape);
  std::vector<float> changed = download_f32(embed);
  changed.back() += 1.0f;
  upload_f32(head.view(), changed);
  t.back().tensor = head.view();
  write_model(tmp.file("diff"), cfg, t);
  expect_load_error(tmp.file("diff"), cfg,
                    {tmp.file("diff") + "/model.safetensors", "'lm_head.weight' differs"});
  // Wrong shape.
  t.back().tensor = head.view().reshaped(Shape{embed.shape[1], embed.shape[0]});
  write_model(tmp.file("shape"), cfg, t);
  expect_load_error(tmp.file("shape"), cfg, {"'lm_head.weight' has shape (48, 89)"});
}

TEST(CheckpointIo, LoadConfigErrors) {
  test::TempDir tmp;
  EXPECT_THROW(load_config(tmp.file("nope")), InputError);
  EXPECT_THROW(load_config(tmp.path()), InputError);  // directory without config.json
  test::write_text(tmp.file("config.json"), R"({"model_type": "gpt2"})");
  try {
    load_config(tmp.path());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.file("config.json")), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("gpt2"), std::string::npos);
  }
}

// Issue 35: a directory is replaced only when every file in it is one save_model_dir writes. A
// checkpoint (its optimizer state and trainer state) or a model directory holding a user's file
// is refused naming the first foreign file, and left as it was; tokenizer files, shards, the
// index and generation_config.json are a model directory's own.
TEST(CheckpointIo, ReplacesOnlyADirectoryOfItsOwnFiles) {
  const ModelConfig cfg = preset_config("tiny-qwen2");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  const ParameterSet a = random_params(cfg, pool, 1);
  test::TempDir tmp;
  const std::string dir = tmp.file("m");
  save_model_dir(dir, cfg, a, DType::F32, 20000);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    test::write_text(dir + "/" + f, "{}");
  save_model_dir(dir, cfg, a, DType::F32);  // all ours: replaced
  EXPECT_EQ(dir_names(dir), (std::set<std::string>{"config.json", "model.safetensors"}));
  for (const char* f : {"trainer_state.json", "optimizer.safetensors", "notes.txt",
                        "model-1-of-2.safetensors", "model.safetensors.bak"}) {
    const std::string d = tmp.file(std::string("c-") + f);
    save_model_dir(d, cfg, a, DType::F32);
    test::write_text(d + "/" + f, "precious");
    try {
      save_model_dir(d, cfg, a, DType::F32);
      FAIL() << "expected a refusal for " << f;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(d + ": holds " + f), std::string::npos) << e.what();
    }
    EXPECT_EQ(test::read_text(d + "/" + f), "precious");
  }
  EXPECT_TRUE(is_model_dir_file("model-00001-of-00002.safetensors"));
  EXPECT_FALSE(is_model_dir_file("model-00001-of-0002.safetensors"));
  EXPECT_FALSE(is_model_dir_file("model-0000a-of-00002.safetensors"));
}

}  // namespace
}  // namespace sbp

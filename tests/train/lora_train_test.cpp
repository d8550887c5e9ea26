// `streambp train` with a `lora:` section, through the program: only the adapters train (the
// ledger's grads and optimizer bytes are the adapters'), checkpoints are PEFT adapter
// directories, 2N steps equal N + resume + N bit for bit, DPO starts at log 2 with the
// reference = the base with the adapters off (B = 0 at the start), `merge` folds an adapter
// into its base, and `gradcheck --lora-r` passes for every objective.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "train/train_run.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::bin;
using test::read_metrics;
using test::run_command;
using test::src;
using test::TrainRun;

const char* kLora = "lora:\n  r: 4\n  alpha: 8\n  target_modules: [q_proj, v_proj, down_proj]\n";

bool same_file(const std::string& a, const std::string& b) {
  return test::read_text(a) == test::read_text(b);
}

TEST(LoraTrain, OnlyAdaptersTrainAndResumeIsExact) {
  const std::string yaml = std::string(kLora) +
                           "max_steps: 6\noptim:\n  lr: 0.01\n  weight_decay: 0.1\n"
                           "schedule:\n  type: cosine\n  warmup_steps: 2\n";
  TrainRun straight(yaml), split(yaml);
  auto r = straight.train();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA r=4"), std::string::npos) << r.output;
  const std::string ck = straight.out("checkpoint-6");
  // A PEFT adapter directory, no full weights.
  EXPECT_TRUE(fs::exists(ck + "/adapter_config.json"));
  EXPECT_TRUE(fs::exists(ck + "/adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(ck + "/optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(ck + "/model.safetensors"));
  const json cfg = json::parse(test::read_text(ck + "/adapter_config.json"));
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["r"], 4);
  // The tiny model (d 32, 2 layers, kv 16, F 64): adapters of q (A 4x32, B 32x4), v (4x32,
  // 16x4), down (4x64, 32x4) per layer = 2 * (256 + 192 + 384) floats = 1664 floats.
  const int64_t adapter_bytes = 1664 * 4;
  const std::vector<json> m = read_metrics(straight.out("metrics.jsonl"));
  ASSERT_EQ(m.size(), 6u);
  for (const json& line : m) {
    EXPECT_EQ(line["peak_memory_bytes"]["grads"].get<int64_t>(), adapter_bytes) << line.dump();
    EXPECT_EQ(line["peak_memory_bytes"]["optimizer"].get<int64_t>(), 2 * adapter_bytes);
  }
  EXPECT_LT(m.back()["loss"].get<double>(), m.front()["loss"].get<double>());

  r = split.train("stop_after_steps=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = split.train("--resume " + split.out());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(same_file(ck + "/adapter_model.safetensors",
                        split.out("checkpoint-6/adapter_model.safetensors")));
  EXPECT_TRUE(
      same_file(ck + "/optimizer.safetensors", split.out("checkpoint-6/optimizer.safetensors")));
  const std::vector<json> b = read_metrics(split.out("metrics.jsonl"));
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(b[i]["loss"], m[i]["loss"]) << "step " << i + 1;
}

TEST(LoraTrain, DpoReferenceIsTheBaseAndMergeFoldsTheAdapter) {
  TrainRun run(std::string(kLora) +
               "objective: dpo\nmax_tokens: 512\nmax_steps: 3\n"
               "optim:\n  lr: 0.01\n");
  // A base with weights on disk, so that merge has something to fold into.
  auto r = run_command(bin() + " init --config " + run.dir.file("model.json") + " --out " +
                       run.dir.file("base") + " --test-init");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A base as published: generation defaults beside the weights.
  const std::string gen_config = "{\"eos_token_id\": 450, \"max_new_tokens\": 7}\n";
  test::write_text(run.dir.file("base/generation_config.json"), gen_config);
  r = run.train("model=" + run.dir.file("base") + " data.train=" + src() +
                "/examples/data/dpo.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the base model with the adapters off"), std::string::npos) << r.output;
  const std::vector<json> m = read_metrics(run.out("metrics.jsonl"));
  ASSERT_EQ(m.size(), 3u);
  // B = 0 at the start: the policy is the reference, every pair's z is 0, the loss log 2.
  EXPECT_NEAR(m[0]["loss"].get<double>(), std::log(2.0), 1e-6);
  // One copy of the weights: the policy's (no reference model's).
  const int64_t weights = m[0]["peak_memory_bytes"]["weights"].get<int64_t>();
  r = run_command(bin() + " merge --model " + run.dir.file("base") + " --adapter " +
                  run.out("checkpoint-3") + " --out " + run.dir.file("merged"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(run.dir.file("merged/model.safetensors")));
  // A whole Hugging Face directory: the checkpoint's tokenizer files (the run's tokenizer) and
  // the base's generation_config.json, byte for byte, so transformers' AutoTokenizer and
  // generate read what the base had.
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(same_file(src() + "/examples/tiny-chat/" + f, run.dir.file("merged/") + f)) << f;
  EXPECT_EQ(test::read_text(run.dir.file("merged/generation_config.json")), gen_config);
  // ... and `generate` finds the tokenizer there: a text prompt, no --tokenizer.
  test::write_text(run.dir.file("text.jsonl"), "{\"prompt\": \"1+1=\"}\n");
  r = run_command(bin() + " generate --greedy --max-new-tokens 3 --threads 1 --input " +
                  run.dir.file("text.jsonl") + " --model " + run.dir.file("merged"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"completion\":"), std::string::npos) << r.output;
  // The merged model is the base + adapter: base and merged differ, the adapter's folded.
  EXPECT_FALSE(
      same_file(run.dir.file("base/model.safetensors"), run.dir.file("merged/model.safetensors")));
  // generate --adapter samples what the merged model samples (greedy: the same ids).
  test::write_text(run.dir.file("prompts.jsonl"), "{\"prompt_ids\": [1, 5, 9, 33, 2]}\n");
  auto ids = [&](const std::string& model) {
    const auto g =
        run_command(bin() + " generate --greedy --max-new-tokens 6 --threads 1 --input " +
                    run.dir.file("prompts.jsonl") + " --model " + model);
    EXPECT_EQ(g.exit_code, 0) << g.output;
    const size_t at = g.output.find("\"ids\":");
    return at == std::string::npos ? std::string()
                                   : g.output.substr(at, g.output.find(']', at) - at);
  };
  const std::string adapted = ids(run.dir.file("base") + " --adapter " + run.out("checkpoint-3"));
  EXPECT_FALSE(adapted.empty());
  EXPECT_EQ(adapted, ids(run.dir.file("merged")));
  // The tiny model: embedding 512x32 (tied), per layer q 32x32, k, v 16x32, o 32x32, gate, up
  // 64x32, down 32x64 and four norms (16 + 16 + 32 + 32), the final norm 32: 35,040 floats;
  // plus the adapters' 1,664. A reference copy would add another 35,040.
  EXPECT_EQ(weights, (35040 + 1664) * 4);
}

TEST(LoraTrain, RejectsDropoutAndUnknownModules) {
  TrainRun a("lora:\n  r: 4\n  dropout: 0.1\nmax_steps: 1\n");
  auto r = a.train();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("dropout"), std::string::npos) << r.output;
  TrainRun b("lora:\n  r: 4\n  target_modules: [qkv_proj]\nmax_steps: 1\n");
  r = b.train();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("qkv_proj"), std::string::npos) << r.output;
}

TEST(LoraTrain, GradcheckPassesForEveryObjective) {
  for (const char* obj : {"sft", "dpo", "grpo", "ppo"}) {
    const auto r =
        run_command(bin() +
                    " gradcheck --model tiny-qwen3 --seq-len 24 --segments 2 "
                    "--threads 1 --lora-r 8 --objective " +
                    obj + (std::string(obj) == "grpo" ? " --group-size 2 --beta 0.04" : "") +
                    " --modes checkpoint,stream,recompute+chunked --layer-chunk 5 "
                    "--head-chunk 7 --tolerance 1e-5");
    EXPECT_EQ(r.exit_code, 0) << obj << "\n" << r.output;
    EXPECT_NE(r.output.find("PASS"), std::string::npos) << obj << "\n" << r.output;
    EXPECT_NE(r.output.find("lora_B.weight"), std::string::npos) << r.output;
  }
}

// lora.adapter: a run starts from a saved PEFT adapter directory (here one of our checkpoints),
// takes its r / alpha / targets, and scores the eval set as the saving run did at that step.
TEST(LoraTrain, StartsFromAPeftAdapterDirectory) {
  TrainRun first(std::string(kLora) + "max_steps: 3\neval_every: 3\noptim:\n  lr: 0.01\n");
  auto r = first.train("data.eval_fraction=0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  double eval3 = NAN;  // the eval loss after step 3
  for (const json& line : read_metrics(first.out("metrics.jsonl")))
    if (line.value("step", -1) == 3 && line.contains("eval_loss"))
      eval3 = line["eval_loss"].get<double>();
  ASSERT_TRUE(std::isfinite(eval3));
  TrainRun second("lora:\n  adapter: " + first.out("checkpoint-3") + "\nmax_steps: 1\n");
  r = second.train("data.eval_fraction=0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA r=4 alpha=8"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("adapters: from " + first.out("checkpoint-3")), std::string::npos);
  const size_t b = r.output.find("eval loss before training: ");
  ASSERT_NE(b, std::string::npos) << r.output;
  EXPECT_NEAR(std::stod(r.output.substr(b + 27)), eval3, 1e-4);
  // A lora key that disagrees with the adapter's config is an error naming both.
  TrainRun third("lora:\n  adapter: " + first.out("checkpoint-3") + "\n  r: 8\nmax_steps: 1\n");
  r = third.train();
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("lora.r disagrees"), std::string::npos) << r.output;
}

// examples/lora.yaml as shipped (shortened): it runs from the repository root and lowers the
// eval loss.
TEST(LoraTrain, ExampleConfigRunsAndImprovesEvalLoss) {
  test::TempDir tmp;
  const auto r = run_command(
      "cd " + src() + " && " + bin() +
      " train examples/lora.yaml max_steps=20 eval_every=20 output_dir=" + tmp.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(tmp.file("out/checkpoint-20/adapter_model.safetensors")));
  const size_t b = r.output.find("eval loss before training: ");
  const size_t e = r.output.find(", eval loss ", r.output.find("done: "));
  ASSERT_NE(b, std::string::npos) << r.output;
  ASSERT_NE(e, std::string::npos) << r.output;
  const double before = std::stod(r.output.substr(b + 27));
  const double after = std::stod(r.output.substr(e + 12));
  EXPECT_LT(after, before - 0.3) << r.output;
}

}  // namespace
}  // namespace sbp

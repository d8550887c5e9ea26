// streambp generate: completions of prompts, sampled (or greedy) with a KV cache through the
// training step's own model code (Engine::generate), printed as JSONL. The rollouts of online
// GRPO/PPO come from the same Engine::generate.
//
// Input (--input prompts.jsonl), one object per line:
//   {"prompt": "text"} | {"prompt": [messages]} | {"messages": [messages]}   (needs a tokenizer)
//   {"prompt_ids": [ids...]}                                                  (token ids)
// A conversation is rendered by the chat template with the generation prompt, plain text is
// [bos] + text: as the trainer encodes prompts (data/prompt_encoder.h).
// Output, one line per prompt and sample, in input order:
//   {"index": i, "sample": r, "prompt_tokens": n, "ids": [...], "logprobs": [...],
//    "finish_reason": "stop" | "length", "completion": "text" (with a tokenizer)}
// logprobs are the model's own log-probabilities of the chosen tokens (unscaled, unfiltered),
// what `streambp score` gives for the same sequence.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/copy_probe.h"
#include "backend/cpu_threads.h"
#include "cli/command_output.h"
#include "cli/commands.h"
#include "cli/exec_args.h"
#include "cli/flag_checks.h"
#include "cli/model_source.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "core/output_paths.h"
#include "data/prompt_encoder.h"
#include "data/prompt_records.h"
#include "engine/engine.h"
#include "model/lora_io.h"
#include "reward/builtin_rewards.h"

namespace sbp::cli {

namespace {

using json = nlohmann::json;

constexpr ExecFlags kGenerateExec{
    .mode_help = "How the prompt's forward is chunked (stream: --layer-chunk)",
    .head_chunk = false,
    .offload = false};

struct Args {
  std::string model;
  std::string adapter;  // a PEFT LoRA adapter directory on top of --model
  std::string input;
  std::string output;
  std::string tokenizer;
  std::string chat_template;
  int64_t num_return_sequences = 1;
  int64_t batch_size = 0;  // sequences decoded together; 0: one prompt's samples
  int64_t max_new_tokens = 64;
  bool greedy = false;
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_ids;
  uint64_t seed = 0;
  ExecArgs exec;  // --mode, --layer-chunk (the prompt's forward), --precision, --threads, --backend
  bool accuracy = false;
  std::string answer_field = "answer";
  bool bandwidth_bound = false;
};

// With `sink` (an embedding program, cli/command_output.h): the lines as an array in sink->json,
// nothing printed.
int run(const Args& a, CommandOutput* sink) {
  check_output_dir("--output", a.output);
  // The prompts, model, adapter and tokenizer are never written over (core/output_paths.h).
  refuse_output_over_inputs({"--output", a.output}, {{"--input", a.input},
                                                     {"--model", a.model},
                                                     {"--adapter", a.adapter},
                                                     {"--tokenizer", a.tokenizer}});
  a.exec.set_threads();
  const ModelSource src = resolve_model(a.model);
  const ModelConfig& cfg = src.cfg;

  std::optional<PromptEncoder> enc;
  const std::string tok_dir = !a.tokenizer.empty() ? a.tokenizer : src.dir;
  if (!tok_dir.empty() && std::filesystem::exists(std::filesystem::path(tok_dir) / "tokenizer.json")) {
    std::optional<ChatTemplate> chat;
    if (!a.chat_template.empty())
      chat = chat_template_by_name(a.chat_template, "--chat-template");
    enc = PromptEncoder::from_dir(tok_dir, chat);
  } else if (!a.tokenizer.empty()) {
    throw InputError("--tokenizer " + a.tokenizer + ": no tokenizer.json there");
  }
  // An embedding program (cli/command_output.h) may hand the prompt records over in memory.
  if (a.input.empty() && !(sink && sink->input_lines))
    throw InputError("--input: the prompts file is required");
  const DataSource input = a.input.empty() ? DataSource("prompts (in memory)", sink->input_lines)
                                           : DataSource(a.input);
  const std::vector<PromptRecord> prompts =
      read_prompt_records(input, enc ? &*enc : nullptr, cfg.vocab_size);
  if (a.accuracy) {
    if (!enc) throw InputError("--accuracy: completions are compared as text; it needs a tokenizer");
    for (const PromptRecord& p : prompts)
      if (!p.fields.contains(a.answer_field))
        throw InputError(p.where + ": --accuracy: the record has no \"" + a.answer_field +
                         "\" field");
  }

  GenerationConfig g;
  g.max_new_tokens = a.max_new_tokens;
  g.sampling = {a.greedy, a.temperature, a.top_k, a.top_p, a.min_p};
  g.sampling.validate("generate");
  if (enc) g.stop_ids = enc->stop_ids();
  for (int64_t id : a.stop_ids) {
    if (id < 0 || id >= cfg.vocab_size)
      throw InputError("--stop-id " + std::to_string(id) + ": not a token id in [0, " +
                       std::to_string(cfg.vocab_size) + ")");
    g.stop_ids.push_back(static_cast<int32_t>(id));
  }
  if (!a.stop.empty()) {
    if (!enc) throw InputError("--stop: stop strings need a tokenizer");
    g.stop_after = enc->stop_strings(a.stop);
  }

  const std::unique_ptr<Backend> be = a.exec.make_backend();
  Ledger ledger;
  Pool pool(ledger, *be);
  const Precision precision = a.exec.precision_value();
  const ExecConfig exec = a.exec.config(ChunkDefault::exec_config, 0, precision);
  const ParameterSet w =
      materialize_weights(src, pool, a.seed, InitStyle::test, storage_dtype(precision));
  Engine engine(cfg, w, *be, pool, exec);
  LoraSet adapters;
  if (!a.adapter.empty()) {
    adapters =
        LoraSet(cfg, read_lora_config(a.adapter), pool, Category::weights, DType::F32, false);
    load_lora_weights(a.adapter, adapters);
    engine.set_lora(&adapters, nullptr);
  }

  std::string text;
  if (sink) sink->json = json::array();
  int64_t new_tokens = 0, correct = 0;
  const std::unique_ptr<RewardFunction> accuracy = make_accuracy_reward(a.answer_field);
  const auto t0 = std::chrono::steady_clock::now();
  // Samples in (prompt, sample) order, decoded `batch` at a time.
  const int64_t R = a.num_return_sequences;
  const int64_t total = static_cast<int64_t>(prompts.size()) * R;
  const int64_t batch = a.batch_size > 0 ? a.batch_size : R;
  for (int64_t first = 0; first < total; first += batch) {
    const int64_t count = std::min(batch, total - first);
    std::vector<std::vector<int32_t>> ids;
    std::vector<Rng> rngs;
    for (int64_t k = first; k < first + count; ++k) {
      // Each sample draws from its own stream: the same (seed, prompt, sample) gives the same
      // completion whatever else is generated in the run, and with any batch size.
      ids.push_back(prompts[static_cast<size_t>(k / R)].ids);
      rngs.emplace_back(a.seed, "generate/" + std::to_string(k / R) + "/" + std::to_string(k % R));
    }
    const std::vector<Generated> outs = engine.generate_batch(ids, g, rngs);
    for (int64_t k = first; k < first + count; ++k) {
      const size_t i = static_cast<size_t>(k / R);
      const Generated& out = outs[static_cast<size_t>(k - first)];
      new_tokens += static_cast<int64_t>(out.ids.size());
      json j = {{"index", i},
                {"sample", k % R},
                {"prompt_tokens", prompts[i].ids.size()},
                {"ids", out.ids},
                {"logprobs", out.logprobs},
                {"finish_reason", finish_reason_name(out.finish)}};
      if (enc) j["completion"] = enc->decode(out.ids);
      if (a.accuracy) {
        // The trainer's accuracy reward (reward/reward.h), on the record's answer field.
        RewardRequest req;
        req.completion = j["completion"].get<std::string>();
        req.fields = &prompts[i].fields;
        const bool ok = accuracy->score({&req, 1}).at(0) > 0.5;
        correct += ok ? 1 : 0;
        j["correct"] = ok;
      }
      if (sink) {
        sink->json.push_back(std::move(j));
      } else {
        text += j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
      }
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sink) return 0;
  if (a.output.empty()) {
    // main() checks that stdout was flushed: a full disk or closed pipe is an error.
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    write_file_atomically(a.output, text);
  }
  std::fprintf(stderr,
               "generate: %lld completions, %lld new tokens in %.2f s (%.1f tokens/s); peak "
               "memory %s (kv_cache %s)\n",
               static_cast<long long>(prompts.size() * a.num_return_sequences),
               static_cast<long long>(new_tokens), secs, secs > 0 ? new_tokens / secs : 0.0,
               format_bytes(ledger.peak()).c_str(),
               format_bytes(ledger.category_peak(Category::kv_cache)).c_str());
  if (a.bandwidth_bound) {
    // A decoding step reads every weight once (the tied embedding once, as the LM head) for
    // the new token of each of its B sequences, at best at the machine's read bandwidth. (The
    // cache's reads are left out: small next to the weights for short sequences.)
    double weight_bytes = 0.0;
    for (size_t i = 0; i < w.size(); ++i)
      weight_bytes += static_cast<double>(w.tensor(i).numel()) *
                      static_cast<double>(dtype_size(w.tensor(i).dtype));
    const double gbs = measure_read_bandwidth_gbs();
    const int64_t B = std::min(batch, total);  // the largest decoding batch of the run
    const double bound = static_cast<double>(B) * gbs * 1e9 / weight_bytes;
    std::fprintf(stderr,
                 "bandwidth bound: %.1f tokens/s at batch %lld (%.3f GB of weights per step at "
                 "%.1f GB/s read bandwidth); measured %.1f tokens/s = %.0f%% of it\n",
                 bound, static_cast<long long>(B), weight_bytes / 1e9, gbs,
                 secs > 0 ? new_tokens / secs : 0.0,
                 secs > 0 ? 100.0 * (new_tokens / secs) / bound : 0.0);
  }
  if (a.accuracy) {
    const int64_t n = static_cast<int64_t>(prompts.size()) * a.num_return_sequences;
    std::fprintf(stderr, "accuracy: %lld of %lld completions match \"%s\" (%.1f%%)\n",
                 static_cast<long long>(correct), static_cast<long long>(n),
                 a.answer_field.c_str(), 100.0 * static_cast<double>(correct) / static_cast<double>(n));
  }
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, CommandOutput* out) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "generate", "Sample completions of prompts with a KV cache; prints JSONL");
  c->add_option("--model", a->model, "Model directory (config.json + safetensors), or a preset")
      ->required();
  c->add_option("--adapter", a->adapter, "A LoRA adapter directory (PEFT format) on top of --model")
      ->check(non_empty());
  c->add_option("--input", a->input,
                "prompts.jsonl: {\"prompt\": text | messages} or {\"prompt_ids\": [ids]} per line")
      ->required(out == nullptr);  // an embedding program may give the lines in memory
  c->add_option("--output", a->output, "Write the JSONL here (default: standard output)")
      ->check(non_empty());
  c->add_option("--tokenizer", a->tokenizer, "Directory with tokenizer.json (default: --model)")
      ->check(non_empty());
  c->add_option("--chat-template", a->chat_template,
                "Chat template instead of the tokenizer config's: chatml, qwen2, qwen2.5, qwen3, "
                "llama3, llama3.0, gemma3")
      ->check(non_empty());
  c->add_option("--num-return-sequences", a->num_return_sequences, "Samples per prompt")
      ->check(int_in(1, 65536));
  c->add_option("--batch-size", a->batch_size,
                "Sequences decoded together, in (prompt, sample) order (default: the samples of "
                "one prompt, --num-return-sequences)")
      ->check(int_in(1, 65536));
  c->add_option("--max-new-tokens", a->max_new_tokens, "Most tokens per completion")
      ->check(int_in(1, kMaxFlagInt));
  c->add_flag("--greedy", a->greedy, "Always the most likely token (ignores the sampling flags)");
  c->add_option("--temperature", a->temperature, "Softmax temperature")
      ->check(positive_finite(1e6));
  c->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = all)")
      ->check(int_in(0, kMaxFlagInt));
  c->add_option("--top-p", a->top_p, "Nucleus: the most likely tokens with this much mass")
      ->check(positive_finite(1.0));
  c->add_option("--min-p", a->min_p, "Drop tokens below min_p x the top probability")
      ->check(CLI::Range(0.0, 0.999999));
  c->add_option("--stop", a->stop, "Stop string (repeatable); the completion keeps it")
      ->check(non_empty());
  c->add_option("--stop-id", a->stop_ids,
                "Stop token id (repeatable), besides eos and the template's end of turn");
  c->add_option("--seed", a->seed, "Sampling seed (and random weights for a preset)")
      ->check(uint64_flag());
  a->exec.add_flags(c, kGenerateExec);
  c->add_flag("--accuracy", a->accuracy,
              "Score each completion with the accuracy reward against the record's answer field; "
              "prints the share that match");
  c->add_option("--answer-field", a->answer_field, "The record field --accuracy compares with")
      ->check(non_empty());
  c->add_flag("--bandwidth-bound", a->bandwidth_bound,
              "Also measure the copy bandwidth and print the decoding bound it gives at the batch size");
  c->callback([a, out] {
    const int rc = run(*a, out);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sbp::cli

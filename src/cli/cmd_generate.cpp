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
#include <chrono>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/model_source.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "data/prompt_encoder.h"
#include "engine/engine.h"
#include "model/lora_io.h"

namespace sbp::cli {

namespace {

using json = nlohmann::json;

struct Args {
  std::string model;
  std::string adapter;  // a PEFT LoRA adapter directory on top of --model
  std::string input;
  std::string output;
  std::string tokenizer;
  std::string chat_template;
  int64_t num_return_sequences = 1;
  int64_t max_new_tokens = 64;
  bool greedy = false;
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_ids;
  uint64_t seed = 0;
  int threads = 0;
  std::string backend = "cpu";
  std::string precision = "fp32";
  std::string mode = "stream";
  int64_t layer_chunk = 0;
};

struct Prompt {
  std::vector<int32_t> ids;
  std::string where;  // "prompts.jsonl:3"
};

std::vector<Prompt> read_prompts(const std::string& path, const PromptEncoder* enc, int64_t vocab) {
  check_input_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the input file");
  std::vector<Prompt> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    json row;
    try {
      row = json::parse(line);
    } catch (const json::exception& e) {
      throw InputError(where + ": invalid JSON: " + e.what());
    }
    Prompt p;
    p.where = where;
    if (row.is_object() && row.contains("prompt_ids")) {
      const json& ids = row["prompt_ids"];
      if (!ids.is_array() || ids.empty())
        throw InputError(where + ": \"prompt_ids\" must be a non-empty array of token ids");
      for (size_t t = 0; t < ids.size(); ++t) {
        if (!ids[t].is_number_integer() || ids[t].get<int64_t>() < 0 ||
            ids[t].get<int64_t>() >= vocab)
          throw InputError(where + ": prompt_ids[" + std::to_string(t) + "] = " + ids[t].dump() +
                           " is not a token id in [0, " + std::to_string(vocab) + ")");
        p.ids.push_back(static_cast<int32_t>(ids[t].get<int64_t>()));
      }
    } else {
      const TextOrChat prompt = parse_generation_prompt(row, where);
      if (!enc)
        throw InputError(where + ": a text or conversation prompt needs a tokenizer (--model "
                                 "directory with tokenizer.json, or --tokenizer); without one, "
                                 "give \"prompt_ids\"");
      p.ids = enc->encode(prompt, where);
      for (int32_t id : p.ids)
        if (id >= vocab)
          throw InputError(where + ": the tokenizer gives id " + std::to_string(id) +
                           " but the model's vocab_size is " + std::to_string(vocab));
      if (p.ids.empty()) throw InputError(where + ": the prompt encodes to no tokens");
    }
    out.push_back(std::move(p));
  }
  if (out.empty()) throw InputError(path + ": no prompts");
  return out;
}

int run(const Args& a) {
  check_output_dir("--output", a.output);
  set_cpu_threads(a.threads);
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
  const std::vector<Prompt> prompts = read_prompts(a.input, enc ? &*enc : nullptr, cfg.vocab_size);

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
    g.stop_after = [&](std::span<const int32_t> ids) {
      const std::string text = enc->decode(std::vector<int32_t>(ids.begin(), ids.end()));
      for (const std::string& s : a.stop)
        if (!s.empty() && text.find(s) != std::string::npos) return true;
      return false;
    };
  }

  const std::unique_ptr<Backend> be = backend_from_flag(a.backend);
  Ledger ledger;
  Pool pool(ledger, *be);
  const Precision precision = precision_from_flag(a.precision);
  ExecConfig exec = parse_mode(a.mode);
  if (a.layer_chunk > 0) exec.layer_chunk = a.layer_chunk;
  exec.act_dtype = storage_dtype(precision);
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
  int64_t new_tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int64_t r = 0; r < a.num_return_sequences; ++r) {
      // Each sample draws from its own stream: the same (seed, prompt, sample) gives the same
      // completion whatever else is generated in the run.
      Rng rng(a.seed, "generate/" + std::to_string(i) + "/" + std::to_string(r));
      const Generated out = engine.generate(prompts[i].ids, g, rng);
      new_tokens += static_cast<int64_t>(out.ids.size());
      json j = {{"index", i},
                {"sample", r},
                {"prompt_tokens", prompts[i].ids.size()},
                {"ids", out.ids},
                {"logprobs", out.logprobs},
                {"finish_reason", finish_reason_name(out.finish)}};
      if (enc) j["completion"] = enc->decode(out.ids);
      text += j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  return 0;
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "generate", "Sample completions of prompts with a KV cache; prints JSONL");
  c->add_option("--model", a->model, "Model directory (config.json + safetensors), or a preset")
      ->required();
  c->add_option("--adapter", a->adapter,
                "A LoRA adapter directory (PEFT format) on top of --model");
  c->add_option("--input", a->input,
                "prompts.jsonl: {\"prompt\": text | messages} or {\"prompt_ids\": [ids]} per line")
      ->required();
  c->add_option("--output", a->output, "Write the JSONL here (default: standard output)");
  c->add_option("--tokenizer", a->tokenizer, "Directory with tokenizer.json (default: --model)");
  c->add_option("--chat-template", a->chat_template,
                "Chat template instead of the tokenizer config's: chatml, qwen2, qwen2.5, qwen3, "
                "llama3, llama3.0, gemma3");
  c->add_option("--num-return-sequences", a->num_return_sequences, "Samples per prompt")
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
  c->add_option("--stop", a->stop, "Stop string (repeatable); the completion keeps it");
  c->add_option("--stop-id", a->stop_ids,
                "Stop token id (repeatable), besides eos and the template's end of turn");
  c->add_option("--seed", a->seed, "Sampling seed (and random weights for a preset)");
  c->add_option("--threads", a->threads, "Threads (default: all)")->check(int_in(0, 4096));
  c->add_option("--backend", a->backend, "Backend that computes: cpu");
  c->add_option("--precision", a->precision, "fp32 or bf16");
  c->add_option("--mode", a->mode, "How the prompt's forward is chunked (stream: --layer-chunk)");
  c->add_option("--layer-chunk", a->layer_chunk, "Prompt chunk length in tokens")
      ->check(int_in(1, kMaxFlagInt));
  c->callback([a] {
    const int rc = run(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sbp::cli

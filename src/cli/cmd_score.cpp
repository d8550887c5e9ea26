// streambp score: the SFT loss, per-token target log-probabilities and (optionally) every
// parameter's gradient of a model on given token sequences. This is the command a user runs to
// check a checkpoint against another implementation, and what the Hugging Face parity fixtures
// (tests/fixtures/hf) are compared through.
//
// Input (--input tokens.json):
//   {"sequences": [[ids...], ...], "loss_mask": [[0/1...], ...]}
// loss_mask is optional (default: every token that has a predecessor is a loss token). It has
// Hugging Face `labels` semantics: loss_mask[i][t] = 1 means "predicting token t counts", i.e.
// labels[t] != -100; loss_mask[i][0] is accepted but has no effect (token 0 is never predicted).
// The sequences are packed as the segments of one batch (no padding), so the loss is the
// mean negative log-likelihood over ALL loss tokens of all sequences — what transformers'
// cross-entropy gives for the same sequences with its mean over non-ignored labels.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "backend/cpu_threads.h"
#include "cli/command_output.h"
#include "cli/commands.h"
#include "cli/exec_args.h"
#include "cli/flag_checks.h"
#include "cli/model_source.h"
#include "core/error.h"
#include "core/untrusted_json.h"
#include "core/input_file.h"
#include "core/memory.h"
#include "core/output_file.h"
#include "core/output_paths.h"
#include "model/lora_io.h"
#include "model/safetensors.h"
#include "step/step_runner.h"

namespace sbp::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Args {
  std::string model;
  std::string input;
  ExecArgs exec;  // --mode (stream), chunks (ExecConfig's), --precision, --threads, --backend
  std::string grads;
  std::string adapter;  // a PEFT LoRA adapter directory on top of --model
  std::string json_out;
  uint64_t seed = 0;
};

std::string where(const std::string& file, const std::string& field, size_t i) {
  return file + ": " + field + "[" + std::to_string(i) + "]";
}

std::string where(const std::string& file, const std::string& field, size_t i, size_t t) {
  return where(file, field, i) + "[" + std::to_string(t) + "]";
}

// Validates tokens.json's object (or an embedding program's, cli/command_output.h) into one
// packed batch. Every error names `path` (the file), the field, the sequence index and the
// position.
Batch tokens_from_json(const json& j, const std::string& path, int64_t vocab) {
  if (!j.is_object())
    throw InputError(path + ": expected an object {\"sequences\": [...], \"loss_mask\": [...]}");
  for (const auto& [key, value] : j.items()) {
    if (key != "sequences" && key != "loss_mask")
      throw InputError(path + ": unknown field '" + key + "' (expected 'sequences', 'loss_mask')");
  }
  const auto seqs = j.find("sequences");
  if (seqs == j.end()) throw InputError(path + ": missing field 'sequences'");
  if (!seqs->is_array()) throw InputError(path + ": 'sequences' must be an array of arrays");
  if (seqs->empty()) throw InputError(path + ": 'sequences' is empty");

  Batch b;
  for (size_t i = 0; i < seqs->size(); ++i) {
    const json& s = (*seqs)[i];
    if (!s.is_array())
      throw InputError(where(path, "sequences", i) + ": must be an array of token ids");
    if (s.empty()) throw InputError(where(path, "sequences", i) + ": is empty");
    for (size_t t = 0; t < s.size(); ++t) {
      const json& id = s[t];
      // is_number_integer excludes floats and booleans, so 1.5 or true is an error, not a cast.
      if (!id.is_number_integer())
        throw InputError(where(path, "sequences", i, t) + ": token id must be an integer, got " +
                         id.dump());
      const int64_t v =
          id.is_number_unsigned()
              ? static_cast<int64_t>(std::min<uint64_t>(id.get<uint64_t>(), uint64_t{1} << 62))
              : id.get<int64_t>();
      if (v < 0 || v >= vocab)
        throw InputError(where(path, "sequences", i, t) + ": token id " + id.dump() +
                         " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
      b.tokens.push_back(static_cast<int32_t>(v));
    }
    b.seq_lens.push_back(static_cast<int64_t>(s.size()));
    if (b.size() > (int64_t{1} << 31) - 1)
      throw InputError(path + ": more than 2^31 - 1 tokens in total");
  }

  const auto masks = j.find("loss_mask");
  if (masks != j.end() && !masks->is_null()) {
    if (!masks->is_array()) throw InputError(path + ": 'loss_mask' must be an array of arrays");
    if (masks->size() != seqs->size())
      throw InputError(path + ": 'loss_mask' has " + std::to_string(masks->size()) +
                       " entries for " + std::to_string(seqs->size()) + " sequences");
    b.loss_mask.reserve(b.tokens.size());
    for (size_t i = 0; i < masks->size(); ++i) {
      const json& m = (*masks)[i];
      const size_t len = static_cast<size_t>(b.seq_lens[i]);
      if (!m.is_array())
        throw InputError(where(path, "loss_mask", i) + ": must be an array of 0/1");
      if (m.size() != len)
        throw InputError(where(path, "loss_mask", i) + ": has " + std::to_string(m.size()) +
                         " entries but sequences[" + std::to_string(i) + "] has " +
                         std::to_string(len) + " tokens");
      for (size_t t = 0; t < len; ++t) {
        const json& v = m[t];
        float w = -1.0f;
        if (v.is_boolean())
          w = v.get<bool>() ? 1.0f : 0.0f;
        else if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1))
          w = static_cast<float>(v.get<int64_t>());
        if (w < 0.0f)
          throw InputError(where(path, "loss_mask", i, t) + ": must be 0 or 1, got " + v.dump());
        b.loss_mask.push_back(w);
      }
    }
  }
  b.validate(vocab, path);  // the batch's own invariants (belt and braces)
  return b;
}

// Reads tokens.json (the --input file) into one packed batch.
Batch read_tokens_file(const std::string& path, int64_t vocab) {
  check_input_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the input file");
  json j;
  try {
    j = parse_untrusted_json(in, path);
  } catch (const json::exception& e) {
    throw InputError(path + ": invalid JSON: " + e.what());
  }
  return tokens_from_json(j, path, vocab);
}

// With `out` (an embedding program, cli/command_output.h): the sequences from out->input, the
// results in out->json (what --json writes, less the log-probs) and out->arrays (the log-probs
// of each sequence, "logprobs/<i>", then with out->grads every gradient by its name); nothing
// printed.
int run(const Args& a, CommandOutput* out) {
  check_output_dir("--json", a.json_out);
  check_output_dir("--grads", a.grads);
  // Outputs never overwrite what the command reads (core/output_paths.h).
  const std::vector<NamedPath> inputs = {
      {"--model", a.model}, {"--input", a.input}, {"--adapter", a.adapter}};
  refuse_output_over_inputs({"--json", a.json_out}, inputs);
  refuse_output_over_inputs({"--grads", a.grads}, inputs);
  if (!a.json_out.empty()) refuse_output_over_inputs({"--grads", a.grads}, {{"--json", a.json_out}});
  a.exec.set_threads();
  const ModelSource src = resolve_model(a.model);
  if (!src.dir.empty() && !src.has_weights)
    throw InputError(a.model + ": no model.safetensors or model.safetensors.index.json to score");
  const ModelConfig& cfg = src.cfg;
  const Precision precision = a.exec.precision_value();
  const ExecConfig exec = a.exec.config(ChunkDefault::exec_config, 0, precision);

  const bool want_grads = !a.grads.empty() || (out && out->grads);
  const Batch batch = out && a.input.empty()
                          ? tokens_from_json(out->input, "score input", cfg.vocab_size)
                          : read_tokens_file(a.input, cfg.vocab_size);
  const int64_t T = batch.size();
  const double n_loss = batch.loss_weight_sum();

  const std::unique_ptr<Backend> be = a.exec.make_backend();
  Ledger ledger, host_ledger;
  Pool pool(ledger, *be);
  Pool host_pool(host_ledger, be->host_memory());  // --offload: what waits in host memory
  if (exec.offload.any()) pool.set_host(&host_pool);
  const ParameterSet w =
      materialize_weights(src, pool, a.seed, InitStyle::test, storage_dtype(precision));
  // The step `train` runs (one SFT micro-batch), recording the log-probs of its own gradient
  // pass; or, without --grads, a forward alone (no gradient memory).
  // With --adapter: base + LoRA adapters, and --grads writes the adapters' gradients (PEFT
  // names); the base is frozen.
  LoraSet adapters, adapter_grads;
  std::unique_ptr<DataParallel> grads;
  if (want_grads && a.adapter.empty())
    grads =
        std::make_unique<DataParallel>(single_process(), 0, cfg, ModelHead::lm, pool, *be, nullptr);
  StepModels models;
  models.policy = {{&cfg, &w}, grads.get()};
  if (!a.adapter.empty()) {
    const LoraConfig lc = read_lora_config(a.adapter);
    adapters = LoraSet(cfg, lc, pool, Category::weights, DType::F32, false);
    load_lora_weights(a.adapter, adapters);
    if (want_grads) adapter_grads = LoraSet(cfg, lc, pool, Category::grads, DType::F32, true);
    models.lora = {&adapters, want_grads ? &adapter_grads : nullptr};
  }
  const ObjectiveSetup sft;  // the SFT loss over the given loss tokens
  StepRunner runner(sft, models, *be, pool, exec, single_process(), {.record_logp = true});

  std::vector<float> logp;  // (T) target log-prob of each row, 0 where none
  double loss = 0.0;
  std::vector<NamedTensor> named;  // with --grads: every gradient, as written
  if (want_grads) {
    MicroBatch mb;
    mb.batch = batch;
    StepResult r = runner.run(StepBatches::whole({std::move(mb)}));
    loss = r.loss;
    logp = std::move(r.logp[0]);
    if (grads) {
      const ParameterSet& g = grads->grads();
      for (size_t i = 0; i < g.size(); ++i) named.push_back({g.name(i), g.tensor(i)});
    } else {
      for (size_t i = 0; i < adapter_grads.size(); ++i)
        named.push_back({adapter_grads.name(i), adapter_grads.tensor(i)});
    }
    char loss_text[64];
    std::snprintf(loss_text, sizeof loss_text, "%.9g", loss);
    if (!a.grads.empty())
      write_safetensors(a.grads, named, DType::F32,
                        {{"source", "streambp score"},
                         {"mode", mode_name(exec)},
                         {"loss", loss_text},
                         {"num_loss_tokens", std::to_string(static_cast<int64_t>(n_loss))}});
  } else {
    logp = runner.score(batch).logp;
    const std::vector<float> wt = batch.target_weights();
    double sum = 0.0;  // fp64, in row order
    for (size_t t = 0; t < static_cast<size_t>(T); ++t) sum -= static_cast<double>(wt[t]) * logp[t];
    loss = n_loss > 0.0 ? sum / n_loss : 0.0;
  }

  // Per sequence: the log-prob of tokens 1..len-1 (row t of a segment predicts token t+1).
  json per_seq = json::array();
  int64_t row = 0;
  for (int64_t len : batch.seq_lens) {
    json s = json::array();
    for (int64_t t = 0; t + 1 < len; ++t) s.push_back(logp[static_cast<size_t>(row + t)]);
    per_seq.push_back(std::move(s));
    row += len;
  }

  const int64_t n_loss_i = static_cast<int64_t>(std::llround(n_loss));
  if (out) {
    // the results go to the embedding program (below)
  } else if (n_loss > 0.0) {
    std::printf("score: loss %.8f over %lld loss tokens (%zu sequences, %lld tokens, mode %s)\n",
                loss, static_cast<long long>(n_loss_i), batch.seq_lens.size(),
                static_cast<long long>(T), mode_name(exec).c_str());
  } else {
    std::printf("score: no loss tokens (every target is masked); %zu sequences, %lld tokens\n",
                batch.seq_lens.size(), static_cast<long long>(T));
  }
  if (!a.grads.empty() && !out)
    std::printf("score: wrote gradients of %zu tensors to %s\n",
                a.adapter.empty() ? parameter_specs(cfg).size() : adapter_grads.size(),
                a.grads.c_str());
  if (!a.json_out.empty()) {
    json j;
    // No loss tokens: the mean is undefined (transformers gives NaN), written as null.
    j["loss"] = n_loss > 0.0 ? json(loss) : json(nullptr);
    j["num_loss_tokens"] = n_loss_i;
    j["num_tokens"] = T;
    j["mode"] = mode_name(exec);
    j["logprobs"] = std::move(per_seq);
    write_file_atomically(a.json_out, j.dump() + "\n");
  } else if (!out) {
    // Per sequence: the summed log-prob of every target and of the loss tokens only.
    const std::vector<float> wt = batch.target_weights();
    row = 0;
    for (size_t i = 0; i < batch.seq_lens.size(); ++i) {
      const int64_t len = batch.seq_lens[i];
      double all = 0.0, masked = 0.0, n = 0.0;
      for (int64_t t = 0; t + 1 < len; ++t) {
        const size_t r = static_cast<size_t>(row + t);
        all += logp[r];
        masked += static_cast<double>(wt[r]) * logp[r];
        n += wt[r];
      }
      std::printf(
          "  sequence %zu: %lld tokens, %lld loss tokens, sum logp %.6f "
          "(loss tokens %.6f)\n",
          i, static_cast<long long>(len), static_cast<long long>(std::llround(n)), all, masked);
      row += len;
    }
  }
  if (out) {
    // No loss tokens: the mean is undefined (transformers gives NaN), null as in --json.
    out->json = {{"loss", n_loss > 0.0 ? json(loss) : json(nullptr)},
                 {"num_loss_tokens", n_loss_i},
                 {"num_tokens", T},
                 {"mode", mode_name(exec)}};
    row = 0;
    for (size_t i = 0; i < batch.seq_lens.size(); ++i) {
      const int64_t len = batch.seq_lens[i];
      const auto first = logp.begin() + row;
      out->arrays.push_back({"logprobs/" + std::to_string(i), {len - 1},
                             std::vector<float>(first, first + (len - 1))});
      row += len;
    }
    for (const NamedTensor& g : named) {
      const Shape& sh = g.tensor.shape;
      out->arrays.push_back(
          {g.name, std::vector<int64_t>(sh.dims.begin(), sh.dims.begin() + sh.ndim),
           download_f32(g.tensor)});
    }
  }
  return 0;
}

}  // namespace

void register_score(CLI::App& app, CommandOutput* out) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "score", "SFT loss, per-token log-probs and gradients of a model on token sequences");
  c->add_option("--model", a->model, "Model directory (config.json + safetensors)")->required();
  CLI::Option* input = c->add_option(
      "--input", a->input,
      "tokens.json: {\"sequences\": [[ids...]...], \"loss_mask\": [[0/1...]...]}");
  if (!out) input->required();  // an embedding program gives the sequences in memory
  a->exec.add_flags(c, ExecFlags{});
  c->add_option("--grads", a->grads, "Write every parameter's gradient (F32 safetensors)")
      ->check(non_empty());
  c->add_option("--adapter", a->adapter,
                "A LoRA adapter directory (PEFT format) on top of --model; --grads then writes "
                "the adapters' gradients")
      ->check(non_empty());
  c->add_option("--json", a->json_out, "Write loss and per-token log-probs as JSON")
      ->check(non_empty());
  c->add_option("--seed", a->seed, "Seed of the random weights when --model is a preset")
      ->check(uint64_flag());
  c->callback([a, out] {
    const int rc = run(*a, out);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sbp::cli

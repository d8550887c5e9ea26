// streambp eval: long-context evaluation on the streamed forward (train/long_eval.h) —
// passkey retrieval by length and depth (a table, JSON and a heat map) and perplexity by
// position on a user's long documents. Each sample is one forward in the chosen mode (stream by
// default: the memory of one chunk of rows), and the command reports the memory it used at the
// longest length beside what a full forward (mode base) of that length needs, measured by the
// same ledger on the shape-only backend.
//
//   streambp eval --model DIR --lengths 4096,8192 --depths 0,0.5,1 [--trials 2]
//                 [--filler long.jsonl] [--heatmap passkey.png] [--json eval.json]
//                 [--input docs.jsonl --bucket 1024 --max-length 32768]
//                 [--rope-scaling '{"rope_type": "yarn", "factor": 4, ...}']
//                 [--max-position-embeddings 32768]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "cli/exec_args.h"
#include "cli/flag_checks.h"
#include "cli/model_source.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/memory.h"
#include "core/output_file.h"
#include "core/untrusted_json.h"
#include "data/prompt_encoder.h"
#include "engine/engine.h"
#include "train/context_extension.h"
#include "train/eval_report.h"
#include "train/long_eval.h"
#include "train/passkey_task.h"

namespace sbp::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Args {
  std::string model, tokenizer;
  std::vector<int64_t> lengths;
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int64_t trials = 1;
  uint64_t seed = 0;
  std::string filler;  // JSONL of {"text"}; "" = the built-in sentences
  std::string input;   // JSONL of {"text"} documents for perplexity by position
  int64_t bucket = 1024;
  int64_t max_length = 0;    // documents cut to this many tokens (0: whole)
  std::string rope_scaling;  // a JSON object: context extension for the evaluation
  int64_t max_positions = 0;
  std::string json_out, heatmap;
  std::vector<std::string> from;  // --from: earlier --json files to tabulate and draw again
  std::string title;
  ExecArgs exec;
};

// --from: the passkey cells of earlier runs' --json files, in file order (a run per scaling
// or per length range, drawn as one table and heat map without computing anything again).
std::vector<PasskeyCell> cells_from_json(const std::vector<std::string>& files) {
  std::vector<PasskeyCell> cells;
  for (const std::string& f : files) {
    const json j = parse_untrusted_json_or_discarded(read_input_file(f));
    if (j.is_discarded() || !j.is_object() || !j.contains("passkey") || !j["passkey"].is_array())
      throw InputError(f + ": not a streambp eval --json file with passkey results");
    for (const json& c : j["passkey"]) {
      PasskeyCell p;
      try {
        p.length = c.at("length").get<int64_t>();
        p.depth = c.at("depth").get<double>();
        p.trials = c.at("trials").get<int64_t>();
        p.found = c.at("found").get<int64_t>();
        p.key_logp = c.at("key_logp").get<double>();
        p.key_tokens = c.at("key_tokens").get<int64_t>();
      } catch (const json::exception& e) {
        throw InputError(f + ": passkey cell " + c.dump() + ": " + e.what());
      }
      if (p.trials < 1) throw InputError(f + ": passkey cell with trials < 1");
      cells.push_back(p);
    }
  }
  return cells;
}

int replot(const Args& a) {
  check_output_dir("--heatmap", a.heatmap);
  const std::vector<PasskeyCell> cells = cells_from_json(a.from);
  std::printf("%s", passkey_table(cells).c_str());
  if (!a.heatmap.empty()) {
    write_passkey_heatmap(cells, a.heatmap, a.title.empty() ? "passkey retrieval" : a.title);
    std::printf("eval: wrote %s\n", a.heatmap.c_str());
  }
  return 0;
}

// Peak bytes of one forward of T rows in `exec` on the shape-only backend (the planner's way of
// measuring: the same allocations, no data).
int64_t forward_peak(const ModelConfig& cfg, const ExecConfig& exec, DType weights, int64_t T) {
  const std::unique_ptr<Backend> meta = make_shape_only_backend(false);
  Ledger ledger;
  Pool pool(ledger, *meta);
  const ParameterSet w(cfg, pool, Category::weights, weights, false);
  Batch b;
  b.tokens.assign(static_cast<size_t>(T), 0);
  b.seq_lens = {T};
  Engine(cfg, w, *meta, pool, exec).score(b);
  return ledger.peak();
}

std::vector<std::vector<int32_t>> read_documents(const std::string& path, const Tokenizer& tok,
                                                 std::optional<int32_t> bos, int64_t max_len) {
  const std::string text = read_input_file(path);
  std::vector<std::vector<int32_t>> docs;
  size_t at = 0;
  int64_t line_no = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = parse_untrusted_json_or_discarded(line);
    const std::string where = path + ":" + std::to_string(line_no);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string())
      throw InputError(where + ": expected a JSON object with a string \"text\"");
    std::vector<int32_t> ids;
    if (bos) ids.push_back(*bos);
    const std::vector<int32_t> t = tok.encode(j["text"].get<std::string>(), false);
    ids.insert(ids.end(), t.begin(), t.end());
    if (max_len > 0 && static_cast<int64_t>(ids.size()) > max_len) ids.resize(max_len);
    docs.push_back(std::move(ids));
  }
  if (docs.empty()) throw InputError(path + ": no documents");
  return docs;
}

std::string mib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return b;
}

int run(const Args& a) {
  if (!a.from.empty()) return replot(a);
  if (a.model.empty()) throw InputError("eval: --model is required (or --from)");
  check_output_dir("--json", a.json_out);
  check_output_dir("--heatmap", a.heatmap);
  if (a.lengths.empty() && a.input.empty())
    throw InputError(
        "eval: nothing to evaluate: give --lengths (passkey) and/or --input "
        "(perplexity by position)");
  a.exec.set_threads();
  const ModelSource src = resolve_model(a.model);
  if (src.dir.empty() || !src.has_weights)
    throw InputError(a.model + ": eval needs a model directory with weights");
  ContextExtension ext;
  if (!a.rope_scaling.empty()) {
    const json r = parse_untrusted_json_or_discarded(a.rope_scaling);
    if (r.is_discarded() || !(r.is_object() || r.is_null()))
      throw InputError(
          "--rope-scaling: expected a JSON object (config.json's rope_scaling) or "
          "null");
    ext.set_rope = true;
    ext.rope_scaling = r;
  }
  ext.max_position_embeddings = a.max_positions;
  const ModelConfig cfg =
      extend_context(src.cfg, ext, "--rope-scaling / --max-position-embeddings");
  ModelSource with = src;
  with.cfg = cfg;

  const std::string tok_dir = a.tokenizer.empty() ? src.dir : a.tokenizer;
  if (!fs::exists(fs::path(tok_dir) / "tokenizer.json"))
    throw InputError((a.tokenizer.empty() ? "--model " : "--tokenizer ") + tok_dir +
                     ": no tokenizer.json there");
  const PromptEncoder enc = PromptEncoder::from_dir(tok_dir);
  const Tokenizer& tok = enc.tokenizer();

  const Precision precision = a.exec.precision_value();
  const ExecConfig exec = a.exec.config(ChunkDefault::exec_config, 0, precision);
  const std::unique_ptr<Backend> be = a.exec.make_backend();
  Ledger ledger;
  Pool pool(ledger, *be);
  const ParameterSet w =
      materialize_weights(with, pool, 0, InitStyle::test, storage_dtype(precision));
  Engine engine(cfg, w, *be, pool, exec);
  const int64_t weight_bytes = ledger.live();
  int64_t longest = 0, longest_peak = 0;
  const ScoreFn score = [&](const Batch& b) {
    ledger.reset_peak();
    Engine::TokenScores s = engine.score(b);
    if (b.size() >= longest) {
      longest = b.size();
      longest_peak = ledger.peak();
    }
    return SequenceScores{std::move(s.logp), std::move(s.argmax)};
  };

  json report = {{"model", a.model},
                 {"mode", mode_name(exec)},
                 {"precision", enum_name<Precision>(kPrecisionNames, precision)},
                 {"rope_scaling", cfg.rope_scaling_description()},
                 {"max_position_embeddings", cfg.max_position_embeddings}};
  std::vector<PasskeyCell> cells;
  if (!a.lengths.empty()) {
    const std::string filler_text =
        a.filler.empty() ? builtin_filler_text() : filler_text_from_jsonl(a.filler);
    std::vector<int32_t> filler = tok.encode(filler_text, false);
    // The built-in sentences, repeated as text (not as tokens) up to the longest length, so
    // the joins between repeats tokenize as running text does.
    if (a.filler.empty()) {
      const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(filler.size()));
      const int64_t need = *std::max_element(a.lengths.begin(), a.lengths.end()) / per + 2;
      std::string text;
      for (int64_t i = 0; i < need; ++i) text += filler_text;
      filler = tok.encode(text, false);
    }
    PasskeyOptions o{a.lengths, a.depths, a.trials, a.seed};
    cells = run_passkey(score, tok, enc.bos(), filler, o, [](const PasskeyCell& c) {
      std::printf("passkey: length %lld depth %.2f: %lld/%lld found, key log-prob %.3f\n",
                  static_cast<long long>(c.length), c.depth, static_cast<long long>(c.found),
                  static_cast<long long>(c.trials), c.key_logp);
      std::fflush(stdout);
    });
    std::printf("\n%s", passkey_table(cells).c_str());
    report["passkey"] = passkey_json(cells);
  }
  if (!a.input.empty()) {
    const auto docs = read_documents(a.input, tok, enc.bos(), a.max_length);
    const std::vector<PositionBucket> buckets = perplexity_by_position(score, docs, a.bucket);
    std::printf("\n%s", perplexity_table(buckets).c_str());
    report["perplexity"] = perplexity_json(buckets);
    report["bucket"] = a.bucket;
  }
  // Memory: this run's peak at its longest sample against a full forward of that length.
  ExecConfig full = parse_mode("base");
  full.act_dtype = exec.act_dtype;
  const int64_t full_peak = forward_peak(cfg, full, storage_dtype(precision), longest);
  std::printf(
      "\nmemory at %lld tokens: %s peak in mode %s (weights %s); a full forward (mode "
      "base) needs %s\n",
      static_cast<long long>(longest), mib(longest_peak).c_str(), mode_name(exec).c_str(),
      mib(weight_bytes).c_str(), mib(full_peak).c_str());
  report["memory"] = {{"tokens", longest},
                      {"peak_bytes", longest_peak},
                      {"weight_bytes", weight_bytes},
                      {"full_forward_peak_bytes", full_peak}};
  if (!a.json_out.empty()) {
    write_file_atomically(a.json_out, report.dump(1) + "\n");
    std::printf("eval: wrote %s\n", a.json_out.c_str());
  }
  if (!a.heatmap.empty()) {
    if (cells.empty()) throw InputError("--heatmap: needs the passkey task (--lengths)");
    write_passkey_heatmap(
        cells, a.heatmap,
        "passkey retrieval: " + a.model +
            (cfg.rope_scaling_description().empty() ? std::string()
                                                    : " (" + cfg.rope_scaling_description() + ")"));
    std::printf("eval: wrote %s\n", a.heatmap.c_str());
  }
  return 0;
}

}  // namespace

void register_eval(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "eval",
      "Long-context evaluation: passkey retrieval by length and depth, perplexity by "
      "position (streamed forward)");
  c->add_option("--model", a->model, "Model directory (config.json + safetensors)");
  c->add_option("--from", a->from,
                "Earlier --json files: print their passkey table and draw --heatmap again, "
                "computing nothing (repeatable)");
  c->add_option("--title", a->title, "Heat map title with --from");
  c->add_option("--tokenizer", a->tokenizer, "Directory with tokenizer.json (default: --model)");
  c->add_option("--lengths", a->lengths, "Passkey sample lengths in tokens (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  c->add_option("--depths", a->depths, "Depths of the key in [0, 1] (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--trials", a->trials, "Samples per (length, depth), each its own key")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  c->add_option("--seed", a->seed, "Seed of the keys")->check(uint64_flag());
  c->add_option("--filler", a->filler,
                "JSONL of {\"text\": ...} long texts for the filler "
                "(default: built-in sentences)")
      ->check(non_empty());
  c->add_option("--input", a->input, "JSONL of {\"text\": ...} documents: perplexity by position")
      ->check(non_empty());
  c->add_option("--bucket", a->bucket, "Perplexity bucket size in positions")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  c->add_option("--max-length", a->max_length, "Cut documents to this many tokens (0: whole)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31));
  c->add_option("--rope-scaling", a->rope_scaling,
                "Evaluate with this rope scaling instead of the model's (config.json's "
                "rope_scaling as JSON, or null for the default rope)");
  c->add_option("--max-position-embeddings", a->max_positions,
                "Evaluate with this max_position_embeddings")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  c->add_option("--json", a->json_out, "Write the results as JSON")->check(non_empty());
  c->add_option("--heatmap", a->heatmap, "Write the passkey heat map (.png or .svg; gnuplot)")
      ->check(non_empty());
  a->exec.add_flags(c, ExecFlags{});
  c->callback([a] {
    const int rc = run(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sbp::cli

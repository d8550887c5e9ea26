#include "train/train_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/rng.h"
#include "data/hf_tokenizer_config.h"
#include "data/packing.h"
#include "data/template_choice.h"
#include "data/tokenizer.h"
#include "train/checkpoint.h"

namespace sbp {

namespace {

void check_objective(const TrainConfig& c, const Dataset& d, const std::string& key) {
  if (!objective_accepts(c.objective, d.format)) {
    throw InputError(c.where(key) + ": " + key + ": objective " + objective_name(c.objective) +
                     " trains on " + objective_traits(c.objective).formats_text +
                     " records, but " + d.path +
                     " holds " + data_format_name(d.format) + " records");
  }
  if (objective_traits(c.objective).group != SequenceGroup::configured) return;
  // GRPO's advantages compare completions within a group: every prompt needs the same number
  // of them (TRL's num_generations), at least two.
  const size_t n = d.examples.front().sequences.size();
  for (const Example& e : d.examples) {
    if (e.sequences.size() != n || n < 2) {
      throw InputError(d.path + ":" + std::to_string(e.lines.front()) +
                       ": the prompt first seen here has " + std::to_string(e.sequences.size()) +
                       " completion(s), the first prompt " + std::to_string(n) +
                       ": GRPO groups must all have the same size, at least 2");
    }
  }
}

// The token id of a special-token string from tokenizer_config.json.
std::optional<int32_t> token_id(const Tokenizer& tok, const std::optional<std::string>& token) {
  if (!token) return std::nullopt;
  return tok.token_to_id(*token);
}

}  // namespace

bool objective_accepts(ObjectiveKind objective, DataFormat f) {
  return accepts_format(objective_traits(objective), data_format_name(f));
}

void split_eval(std::vector<Example>& train, std::vector<Example>& eval, double fraction,
                uint64_t seed) {
  const int64_t n = static_cast<int64_t>(train.size());
  if (fraction <= 0.0 || n < 2) return;
  const int64_t n_eval =
      std::clamp<int64_t>(std::llround(fraction * static_cast<double>(n)), 1, n - 1);
  Rng rng(seed, "eval-split");
  std::vector<int64_t> order = epoch_order(n, true, rng);
  std::vector<char> held(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n_eval; ++i) held[static_cast<size_t>(order[static_cast<size_t>(i)])] = 1;
  std::vector<Example> keep;
  for (int64_t i = 0; i < n; ++i) {
    (held[static_cast<size_t>(i)] ? eval : keep)
        .push_back(std::move(train[static_cast<size_t>(i)]));
  }
  train = std::move(keep);
}

TrainingData prepare_training_data(const TrainConfig& c, int64_t model_vocab) {
  namespace fs = std::filesystem;
  TrainingData out;
  const std::string tok_dir = c.tokenizer;
  if (!fs::is_directory(tok_dir) || !(fs::exists(fs::path(tok_dir) / "tokenizer.json") ||
                                      fs::exists(fs::path(tok_dir) / "encoder.json"))) {
    throw InputError(c.where(c.origin.count("tokenizer") ? "tokenizer" : "model") + ": " + tok_dir +
                     " has no tokenizer.json (set tokenizer: to the directory that has it)");
  }
  const Tokenizer tok = Tokenizer::from_dir(tok_dir);
  if (tok.vocab_size() > model_vocab) {
    throw InputError(tok_dir + "/tokenizer.json: its ids go up to " +
                     std::to_string(tok.vocab_size() - 1) + " but the model's vocab_size is " +
                     std::to_string(model_vocab) + " (tokenizer and model do not match)");
  }
  const HfTokenizerConfig hf = HfTokenizerConfig::load_dir(tok_dir);

  std::string no_chat =
      "conversation data needs a chat template, but " + tok_dir +
      " has none (no chat_template in tokenizer_config.json): set data.chat_template";
  std::optional<ChatTemplate> named;
  if (c.chat_template) named = chat_template_for(*c.chat_template);
  TemplateChoice choice = choose_chat_template(hf, tok_dir, std::move(named));
  out.chat = std::move(choice.chat);
  out.chat_source = choice.source == "named" ? "data.chat_template" : choice.source;
  if (out.chat) out.chat->date_string = c.date_string;

  PlainTextTokens plain;
  if (c.append_eos) {
    plain.eos = token_id(tok, hf.eos_token);
    if (!plain.eos) {
      plain.eos_problem =
          "data.append_eos is on, but " +
          (hf.eos_token ? "eos_token '" + *hf.eos_token + "' is not in the vocabulary"
                        : std::string("tokenizer_config.json names no eos_token")) +
          " (set data.append_eos: false)";
    }
  }
  if (plain_text_wants_bos(hf, out.chat, c.add_bos)) {
    plain.bos = token_id(tok, hf.bos_token);
    if (!plain.bos && c.add_bos.value_or(false))
      throw InputError(c.where("data.add_bos") +
                       ": data.add_bos is true but the tokenizer has no bos_token");
  }
  const ExampleEncoder encoder(MaskedEncoder(tok), out.chat, plain, no_chat);

  DatasetOptions opts;
  opts.format = c.data_format;
  opts.max_seq_len = c.max_seq_len;
  opts.max_tokens = c.max_tokens;
  opts.truncation = c.truncation;

  out.train = load_dataset(c.train_source(), encoder, opts);
  check_objective(c, out.train, "data.train");
  out.train_summary = out.train.summary();
  out.fingerprints["train"] = data_fingerprint(c.train_source());
  if (!c.data_eval.empty()) {
    Dataset eval = load_dataset(c.eval_source(), encoder, opts);
    check_objective(c, eval, "data.eval");
    out.eval = std::move(eval.examples);
    out.eval_source = "data.eval (" + c.data_eval + ")";
    out.fingerprints["eval"] = data_fingerprint(c.eval_source());
  } else if (c.eval_fraction > 0.0) {
    split_eval(out.train.examples, out.eval, c.eval_fraction, c.seed);
    out.eval_source = std::to_string(out.eval.size()) + " examples held out of data.train";
  }
  return out;
}

}  // namespace sbp

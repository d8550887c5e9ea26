// Loading a tokenizer: tokenizer.json (the `tokenizers` library's format) or GPT-2's
// encoder.json + vocab.bpe. Every rejection names the file and the JSON field.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/input_file.h"
#include "data/tokenizer.h"
#include "data/tokenizer_impl.h"
#include "data/tokenizer_json.h"
#include "data/tokenizer_utf8.h"

namespace sbp {

using namespace tokenizer_detail;
using nlohmann::json;

namespace {

// Ids above this are refused: it is the largest vocab_size a model may declare (docs/MODELS.md).
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// The per-id tables (id -> token, decoded bytes, flags) are dense, sized by the highest id, so a
// file of a few tokens with one id near kMaxTokenId would cost a gigabyte. Real vocabularies are
// dense (reserved ids leave small gaps), so ids may leave at most as many gaps as there are
// tokens, plus kIdSlack: the work stays proportional to the file.
constexpr int64_t kIdSlack = 1024;

void check_dense_ids(const TokenizerImpl& t, const std::string& path) {
  int64_t highest = -1;
  for (const auto& [token, id] : t.model.vocab) highest = std::max<int64_t>(highest, id);
  for (const AddedToken& a : t.added_tokens) highest = std::max<int64_t>(highest, a.id);
  const int64_t tokens =
      static_cast<int64_t>(t.model.vocab.size()) + static_cast<int64_t>(t.added_tokens.size());
  if (highest >= 2 * tokens + kIdSlack)
    throw InputError(path + ": token ids are sparse: the highest is " + std::to_string(highest) +
                     " but the file has only " + std::to_string(tokens) +
                     " tokens (ids must be dense: below 2 x tokens + " + std::to_string(kIdSlack) +
                     ")");
}

// The model and added-token parts of a tokenizer.json (the pipeline's are in
// tokenizer_load_pipeline.cpp).
class ModelLoader : public JsonLoader {
 public:
  using JsonLoader::JsonLoader;

  int32_t token_id(const json& value, const std::string& field) const {
    if (!value.is_number_integer()) fail(field, "token id must be an integer");
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      fail(field, "token id " + std::to_string(id) + " out of range (0.." +
                      std::to_string(kMaxTokenId) + ")");
    }
    return static_cast<int32_t>(id);
  }
  void vocab(const json& v, BpeModel& model) const {
    if (!v.is_object()) fail("model.vocab", "missing or not an object");
    model.vocab.reserve(v.size());
    std::unordered_map<int32_t, std::string> owner;
    owner.reserve(v.size());
    for (auto it = v.begin(); it != v.end(); ++it) {
      const int32_t id = token_id(it.value(), "model.vocab[" + in_quotes(it.key()) + "]");
      auto [prev, fresh] = owner.emplace(id, it.key());
      if (!fresh) {
        fail("model.vocab", "id " + std::to_string(id) + " is used by both " +
                                in_quotes(prev->second) + " and " + in_quotes(it.key()));
      }
      model.vocab.emplace(it.key(), id);
    }
  }

  int32_t vocab_id(const BpeModel& model, const std::string& token,
                   const std::string& field) const {
    auto it = model.vocab.find(token);
    if (it == model.vocab.end())
      fail(field, "token " + in_quotes(token) + " is not in model.vocab");
    return it->second;
  }

  void merges(const json& m, BpeModel& model) const {
    if (!m.is_array()) fail("model.merges", "missing or not a list");
    model.merges.reserve(m.size());
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string field = "model.merges[" + std::to_string(i) + "]";
      std::string left, right;
      if (m[i].is_string()) {
        // The older form "left right": both halves are tokens without spaces (byte-level maps
        // the space to 'Ġ'), so the first space separates them.
        const std::string s = m[i].get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos) fail(field, "expected \"left right\", got " + in_quotes(s));
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else if (m[i].is_array() && m[i].size() == 2 && m[i][0].is_string() &&
                 m[i][1].is_string()) {
        left = m[i][0].get<std::string>();
        right = m[i][1].get<std::string>();
      } else {
        fail(field, "expected \"left right\" or [\"left\", \"right\"]");
      }
      add_merge(model, left, right, static_cast<int32_t>(i), field);
    }
  }

  void add_merge(BpeModel& model, const std::string& left, const std::string& right, int32_t rank,
                 const std::string& field) const {
    const int32_t l = vocab_id(model, left, field);
    const int32_t r = vocab_id(model, right, field);
    auto merged = model.vocab.find(left + right);
    if (merged == model.vocab.end()) {
      fail(field, "merged token " + in_quotes(left + right) + " is not in model.vocab");
    }
    model.merges.insert(l, r, {rank, merged->second});
  }

  void model(const json& m, BpeModel& out) const {
    if (!m.is_object()) fail("model", "missing or not an object");
    const std::string type = get_string(m, "type", "model");
    if (type != "BPE")
      fail("model.type", "unsupported model type " + in_quotes(type) + " (only BPE)");
    if (m.contains("dropout") && !m["dropout"].is_null() &&
        !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0)) {
      fail("model.dropout", "BPE dropout is not supported (it makes encoding random)");
    }
    out.byte_fallback = get_bool(m, "byte_fallback", false, "model");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (m.contains(key) && !m[key].is_null() && m[key] != "") {
        fail(std::string("model.") + key, "only null or \"\" is supported");
      }
    }
    vocab(m.value("vocab", json()), out);
    merges(m.value("merges", json()), out);
    out.ignore_merges = get_bool(m, "ignore_merges", false, "model");
    out.fuse_unk = get_bool(m, "fuse_unk", false, "model");
    if (m.contains("unk_token") && !m["unk_token"].is_null()) {
      if (!m["unk_token"].is_string()) fail("model.unk_token", "expected a string or null");
      out.unk_id = vocab_id(out, m["unk_token"].get<std::string>(), "model.unk_token");
    }
  }

  void added_tokens(const json& list, TokenizerImpl& t) const {
    if (list.is_null()) return;
    if (!list.is_array()) fail("added_tokens", "expected a list");
    std::unordered_map<int32_t, std::string> by_id;
    std::unordered_map<int32_t, const std::string*> vocab_by_id;
    vocab_by_id.reserve(t.model.vocab.size());
    for (const auto& [content, id] : t.model.vocab) vocab_by_id.emplace(id, &content);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      const json& a = list[i];
      if (!a.is_object()) fail(field, "expected an object");
      AddedToken token;
      if (!a.contains("id")) fail(field + ".id", "missing");
      token.id = token_id(a["id"], field + ".id");
      token.content = get_string(a, "content", field);
      token.special = get_bool(a, "special", false, field);
      token.single_word = get_bool(a, "single_word", false, field);
      token.lstrip = get_bool(a, "lstrip", false, field);
      token.rstrip = get_bool(a, "rstrip", false, field);
      token.normalized = get_bool(a, "normalized", !token.special, field);
      check_added_id(t, token, vocab_by_id, by_id, field);
      t.added_tokens.push_back(std::move(token));
    }
  }

  // An added token either is a vocab entry (same id) or has an id of its own.
  void check_added_id(const TokenizerImpl& t, const AddedToken& token,
                      const std::unordered_map<int32_t, const std::string*>& vocab_by_id,
                      std::unordered_map<int32_t, std::string>& by_id,
                      const std::string& field) const {
    auto in_vocab = t.model.vocab.find(token.content);
    if (in_vocab != t.model.vocab.end() && in_vocab->second != token.id) {
      fail(field + ".id", "token " + in_quotes(token.content) + " has id " +
                              std::to_string(token.id) + " but model.vocab gives it " +
                              std::to_string(in_vocab->second));
    }
    if (in_vocab == t.model.vocab.end()) {
      auto other = vocab_by_id.find(token.id);
      if (other != vocab_by_id.end()) {
        fail(field + ".id", "id " + std::to_string(token.id) + " of " + in_quotes(token.content) +
                                " is already model.vocab's " + in_quotes(*other->second));
      }
    }
    auto [prev, fresh] = by_id.emplace(token.id, token.content);
    if (!fresh && prev->second != token.content) {
      fail(field + ".id", "id " + std::to_string(token.id) + " is used by both " +
                              in_quotes(prev->second) + " and " + in_quotes(token.content));
    }
  }
};

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json_path) {
  const ModelLoader loader(tokenizer_json_path);
  const json doc = loader.parse(read_input_file(tokenizer_json_path));
  if (!doc.is_object()) loader.fail("(top level)", "expected a JSON object");
  auto impl = std::make_shared<TokenizerImpl>();
  try {
    if (!doc.contains("model")) loader.fail("model", "missing");
    loader.model(doc["model"], impl->model);
    loader.normalizer(doc.value("normalizer", json()), "normalizer", impl->normalizer);
    loader.pre_tokenizer(doc.value("pre_tokenizer", json()), "pre_tokenizer", impl->pre_tokenizer);
    impl->decoder = loader.decoder(doc.value("decoder", json()), "decoder", impl->decoder_steps);
    loader.check_pipeline(*impl);
    loader.added_tokens(doc.value("added_tokens", json()), *impl);
  } catch (const json::exception& e) {
    // A field of the wrong JSON type that no check above anticipated.
    throw InputError(tokenizer_json_path + ": unexpected JSON structure: " + e.what());
  }
  check_dense_ids(*impl, tokenizer_json_path);
  impl->finish();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_gpt2_files(const std::string& encoder_json_path,
                                     const std::string& vocab_bpe_path) {
  auto impl = std::make_shared<TokenizerImpl>();
  {
    const ModelLoader loader(encoder_json_path);
    loader.vocab(loader.parse(read_input_file(encoder_json_path)), impl->model);
  }
  // vocab.bpe: a "#version" line, then one "left right" merge per line, in rank order.
  const ModelLoader merges_loader(vocab_bpe_path);
  std::istringstream lines(read_input_file(vocab_bpe_path));
  std::string line;
  int32_t rank = 0;
  for (int64_t line_no = 1; std::getline(lines, line); ++line_no) {
    if (line.starts_with("#version")) continue;
    const std::string field = "line " + std::to_string(line_no);
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      merges_loader.fail(field, "expected \"left right\", got " + in_quotes(line));
    }
    merges_loader.add_merge(impl->model, line.substr(0, space), line.substr(space + 1), rank++,
                            field);
  }
  PreTokenizerStep byte_level;
  byte_level.kind = PreTokenizerStep::Kind::ByteLevel;
  byte_level.add_prefix_space = false;
  byte_level.regex =
      std::make_shared<const Regex>(gpt2_split_pattern(), false, "GPT-2 pre-tokenizer");
  impl->pre_tokenizer.steps.push_back(std::move(byte_level));
  impl->decoder = DecoderKind::ByteLevel;

  AddedToken eot;
  eot.content = "<|endoftext|>";
  eot.special = true;
  eot.normalized = true;
  auto it = impl->model.vocab.find(eot.content);
  // The library gives a special token that is not in the vocab the next free id.
  eot.id =
      it != impl->model.vocab.end() ? it->second : static_cast<int32_t>(impl->model.vocab.size());
  impl->added_tokens.push_back(eot);
  check_dense_ids(*impl, encoder_json_path);
  impl->finish();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  if (fs::is_regular_file(d / "tokenizer.json")) return from_file((d / "tokenizer.json").string());
  if (fs::is_regular_file(d / "encoder.json") && fs::is_regular_file(d / "vocab.bpe")) {
    return from_gpt2_files((d / "encoder.json").string(), (d / "vocab.bpe").string());
  }
  throw InputError(dir +
                   ": no tokenizer.json (nor GPT-2's encoder.json + vocab.bpe) in this directory");
}

}  // namespace sbp

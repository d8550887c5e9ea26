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
                     " tokens (ids must be dense: below 2 x tokens + " +
                     std::to_string(kIdSlack) + ")");
}

std::string read_file(const std::string& path) {
  check_input_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read tokenizer file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// Replace and Prepend strings longer than this are refused: each match of a Replace (every space,
// in Gemma's) grows the text by its content, so a hostile file with a long one would turn a
// training set into terabytes. SentencePiece conversions use one character.
constexpr size_t kMaxInsertBytes = 256;

// Reads the parts of a tokenizer.json, turning every problem into an InputError that names the
// file and the field.
class JsonLoader {
 public:
  explicit JsonLoader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw InputError(path_ + ": " + field + ": " + what);
  }

  json parse(const std::string& text) const {
    try {
      return json::parse(text);
    } catch (const json::exception& e) {  // also out_of_range: 1e999
      throw InputError(path_ + ": not valid JSON: " + e.what());
    }
  }

  bool get_bool(const json& obj, const char* key, bool fallback, const std::string& field) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(field + "." + key, "expected true or false");
    return it->get<bool>();
  }

  std::string get_string(const json& obj, const char* key, const std::string& field) const {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_string()) fail(field + "." + key, "missing or not a string");
    return it->get<std::string>();
  }

  // A Replace's {"String": "..."} pattern. Regex patterns are not supported here (no
  // SentencePiece conversion writes one); an empty string would match everywhere.
  std::string string_pattern(const json& obj, const std::string& field) const {
    const json& pattern = obj.value("pattern", json());
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string()) {
      fail(field + ".pattern", "expected {\"String\": ...} (Regex patterns are not supported)");
    }
    std::string s = pattern["String"].get<std::string>();
    if (s.empty()) fail(field + ".pattern.String", "must not be empty");
    if (utf8_find_invalid(s) != std::string::npos) fail(field + ".pattern.String", "not UTF-8");
    return s;
  }

  // A field that the library reads as one `char`: exactly one code point.
  std::string one_char(const json& obj, const char* key, const std::string& field) const {
    std::string s = get_string(obj, key, field);
    size_t i = 0;
    if (s.empty() || utf8_find_invalid(s) != std::string::npos || (utf8_next(s, i), i != s.size()))
      fail(field + "." + key, "expected exactly one character, got " + in_quotes(s));
    return s;
  }

  // Metaspace's prepend_scheme ("always" when absent); an older add_prefix_space must agree.
  PrependScheme prepend_scheme(const json& obj, const std::string& field) const {
    PrependScheme scheme = PrependScheme::Always;
    if (obj.contains("prepend_scheme") && !obj["prepend_scheme"].is_null()) {
      const std::string s = get_string(obj, "prepend_scheme", field);
      if (s == "always") {
        scheme = PrependScheme::Always;
      } else if (s == "first") {
        scheme = PrependScheme::First;
      } else if (s == "never") {
        scheme = PrependScheme::Never;
      } else {
        fail(field + ".prepend_scheme", "expected always, first or never, got " + in_quotes(s));
      }
    }
    if (!get_bool(obj, "add_prefix_space", true, field) && scheme != PrependScheme::Never)
      fail(field + ".add_prefix_space", "false contradicts prepend_scheme (not \"never\")");
    return scheme;
  }

  // A Replace content or Prepend string: at most kMaxInsertBytes.
  std::string insert_string(const json& obj, const char* key, const std::string& field) const {
    std::string s = get_string(obj, key, field);
    if (s.size() > kMaxInsertBytes) {
      fail(field + "." + key, std::to_string(s.size()) + " bytes long (at most " +
                                  std::to_string(kMaxInsertBytes) + " are accepted)");
    }
    return s;
  }

  size_t count(const json& obj, const char* key, const std::string& field) const {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_number_unsigned())
      fail(field + "." + key, "missing or not a non-negative integer");
    return it->get<size_t>();
  }

  int32_t token_id(const json& value, const std::string& field) const {
    if (!value.is_number_integer()) fail(field, "token id must be an integer");
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      fail(field, "token id " + std::to_string(id) + " out of range (0.." +
                      std::to_string(kMaxTokenId) + ")");
    }
    return static_cast<int32_t>(id);
  }

  void normalizer(const json& n, const std::string& field, Normalizer& out) const {
    if (n.is_null()) return;
    const std::string type = get_string(n, "type", field);
    NormalizerStep step;
    if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
      step.form = type == "NFC"    ? NormalForm::NFC
                  : type == "NFD"  ? NormalForm::NFD
                  : type == "NFKC" ? NormalForm::NFKC
                                   : NormalForm::NFKD;
      out.steps.push_back(step);
    } else if (type == "Replace") {
      step.kind = NormalizerStep::Kind::Replace;
      step.pattern = string_pattern(n, field);
      step.content = insert_string(n, "content", field);
      out.steps.push_back(step);
    } else if (type == "Prepend") {
      step.kind = NormalizerStep::Kind::Prepend;
      step.content = insert_string(n, "prepend", field);
      out.steps.push_back(step);
    } else if (type == "Sequence") {
      const json& list = n.value("normalizers", json());
      if (!list.is_array()) fail(field + ".normalizers", "expected a list");
      for (size_t i = 0; i < list.size(); ++i)
        normalizer(list[i], field + ".normalizers[" + std::to_string(i) + "]", out);
    } else {
      fail(field, "unsupported normalizer " + type);
    }
  }

  void pre_tokenizer(const json& p, const std::string& field, PreTokenizer& out) const {
    if (p.is_null()) return;
    const std::string type = get_string(p, "type", field);
    if (type == "Sequence") {
      const json& list = p.value("pretokenizers", json());
      if (!list.is_array()) fail(field + ".pretokenizers", "expected a list");
      for (size_t i = 0; i < list.size(); ++i)
        pre_tokenizer(list[i], field + ".pretokenizers[" + std::to_string(i) + "]", out);
      return;
    }
    PreTokenizerStep step;
    if (type == "ByteLevel") {
      step.kind = PreTokenizerStep::Kind::ByteLevel;
      // The library's defaults for a ByteLevel without these fields are both true.
      step.add_prefix_space = get_bool(p, "add_prefix_space", true, field);
      if (get_bool(p, "use_regex", true, field)) {
        step.regex =
            std::make_shared<const Regex>(gpt2_split_pattern(), false, path_ + ": " + field);
      }
    } else if (type == "Split") {
      step.kind = PreTokenizerStep::Kind::Split;
      const json& pattern = p.value("pattern", json());
      if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
        step.regex = std::make_shared<const Regex>(pattern["Regex"].get<std::string>(), false,
                                                   path_ + ": " + field + ".pattern.Regex");
      } else if (pattern.is_object() && pattern.contains("String") &&
                 pattern["String"].is_string()) {
        step.regex = std::make_shared<const Regex>(pattern["String"].get<std::string>(), true,
                                                   path_ + ": " + field + ".pattern.String");
      } else {
        fail(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
      }
      const std::string behavior = get_string(p, "behavior", field);
      if (behavior == "Removed") {
        step.behavior = SplitBehavior::Removed;
      } else if (behavior == "Isolated") {
        step.behavior = SplitBehavior::Isolated;
      } else if (behavior == "MergedWithPrevious") {
        step.behavior = SplitBehavior::MergedWithPrevious;
      } else if (behavior == "MergedWithNext") {
        step.behavior = SplitBehavior::MergedWithNext;
      } else if (behavior == "Contiguous") {
        step.behavior = SplitBehavior::Contiguous;
      } else {
        fail(field + ".behavior", "unsupported split behavior " + behavior);
      }
      step.invert = get_bool(p, "invert", false, field);
    } else if (type == "Metaspace") {
      step.kind = PreTokenizerStep::Kind::Metaspace;
      step.replacement = one_char(p, "replacement", field);
      step.prepend = prepend_scheme(p, field);
      if (get_bool(p, "split", true, field)) {
        step.regex = std::make_shared<const Regex>(step.replacement, true,
                                                   path_ + ": " + field + ".replacement");
      }
      for (const PreTokenizerStep& before : out.steps) {
        // ByteLevel maps ' ' away, and we do not track where its pieces began.
        if (before.kind == PreTokenizerStep::Kind::ByteLevel)
          fail(field, "Metaspace after ByteLevel is not supported");
      }
    } else {
      fail(field, "unsupported pre_tokenizer " + type);
    }
    out.steps.push_back(std::move(step));
  }

  DecoderKind decoder(const json& d, const std::string& field,
                      std::vector<DecoderStep>& steps) const {
    if (d.is_null()) return DecoderKind::None;
    const std::string type = get_string(d, "type", field);
    if (type == "ByteLevel") return DecoderKind::ByteLevel;
    if (type == "Sequence") {
      const json& list = d.value("decoders", json());
      if (!list.is_array()) fail(field + ".decoders", "expected a list");
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string item = field + ".decoders[" + std::to_string(i) + "]";
        if (!list[i].is_object()) fail(item, "expected an object");
        steps.push_back(decoder_step(list[i], item));
      }
    } else {
      steps.push_back(decoder_step(d, field));
    }
    return DecoderKind::Chain;
  }

  // One SentencePiece-style decoder (alone or in a Sequence; ByteLevel only alone).
  DecoderStep decoder_step(const json& d, const std::string& field) const {
    const std::string type = get_string(d, "type", field);
    DecoderStep step;
    if (type == "Replace") {
      step.kind = DecoderStep::Kind::Replace;
      step.pattern = string_pattern(d, field);
      step.content = insert_string(d, "content", field);
    } else if (type == "ByteFallback") {
      step.kind = DecoderStep::Kind::ByteFallback;
    } else if (type == "Fuse") {
      step.kind = DecoderStep::Kind::Fuse;
    } else if (type == "Strip") {
      step.kind = DecoderStep::Kind::Strip;
      step.content = one_char(d, "content", field);
      step.start = count(d, "start", field);
      step.stop = count(d, "stop", field);
    } else if (type == "ByteLevel") {
      fail(field, "ByteLevel is only supported as the whole decoder, not in a Sequence");
    } else if (type == "Metaspace") {
      step.kind = DecoderStep::Kind::Metaspace;
      step.replacement = one_char(d, "replacement", field);
      step.drop_first = prepend_scheme(d, field) != PrependScheme::Never;
      get_bool(d, "split", true, field);  // checked, but decoding does not use it
    } else {
      fail(field, "unsupported decoder " + type);
    }
    return step;
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

  // Metaspace's "first" scheme asks whether a piece starts the original text; we answer from
  // where the piece starts in the normalized text, which is only the same answer when the
  // normalizer cannot delete leading text (a Replace with empty content could).
  void check_metaspace_start(const TokenizerImpl& t) const {
    bool first = false;
    for (const PreTokenizerStep& s : t.pre_tokenizer.steps)
      first |= s.kind == PreTokenizerStep::Kind::Metaspace && s.prepend == PrependScheme::First;
    if (!first) return;
    for (const NormalizerStep& n : t.normalizer.steps) {
      if (n.kind == NormalizerStep::Kind::Replace && n.content.empty())
        fail("normalizer",
             "a Replace with empty content together with a Metaspace "
             "pre_tokenizer whose prepend_scheme is \"first\" is not supported");
    }
  }

 private:
  std::string path_;
};

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json_path) {
  const JsonLoader loader(tokenizer_json_path);
  const json doc = loader.parse(read_file(tokenizer_json_path));
  if (!doc.is_object()) loader.fail("(top level)", "expected a JSON object");
  auto impl = std::make_shared<TokenizerImpl>();
  try {
    if (!doc.contains("model")) loader.fail("model", "missing");
    loader.model(doc["model"], impl->model);
    loader.normalizer(doc.value("normalizer", json()), "normalizer", impl->normalizer);
    loader.pre_tokenizer(doc.value("pre_tokenizer", json()), "pre_tokenizer", impl->pre_tokenizer);
    impl->decoder = loader.decoder(doc.value("decoder", json()), "decoder", impl->decoder_steps);
    loader.check_metaspace_start(*impl);
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
    const JsonLoader loader(encoder_json_path);
    loader.vocab(loader.parse(read_file(encoder_json_path)), impl->model);
  }
  // vocab.bpe: a "#version" line, then one "left right" merge per line, in rank order.
  const JsonLoader merges_loader(vocab_bpe_path);
  std::istringstream lines(read_file(vocab_bpe_path));
  std::string line;
  int32_t rank = 0;
  for (int64_t line_no = 1; std::getline(lines, line); ++line_no) {
    if (line.rfind("#version", 0) == 0) continue;
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

#include "convert/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"
#include "core/untrusted_json.h"

namespace sbp {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// llama.cpp's token types (llama_token_type): 0 undefined, 1 normal, 2 unknown, 3 control,
// 4 user defined, 5 unused, 6 byte. Nothing else is a token type.
constexpr int64_t kNormal = 1, kControl = 3, kUserDefined = 4, kByte = 6;
constexpr int64_t kMaxTokenType = 6;

const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", !use_regex ? false : true},
          {"use_regex", use_regex}};
}
json split_regex(const char* re) {
  return {{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"},
          {"invert", false}};
}

// The byte-level pre-tokenizers llama.cpp names in tokenizer.ggml.pre, as the original
// tokenizer.json files spell them. ignore_merges: Llama 3's BPE looks whole words up first.
struct PreTokenizer {
  json pre;
  json normalizer;
  bool ignore_merges = false;
};

std::optional<PreTokenizer> byte_level_pre(const std::string& pre) {
  if (pre == "default" || pre == "gpt2") return PreTokenizer{byte_level(true), nullptr, false};
  if (pre == "smollm" || pre == "starcoder" || pre == "refact")
    return PreTokenizer{{{"type", "Sequence"},
                         {"pretokenizers",
                          {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}},
                        nullptr, false};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3")
    return PreTokenizer{
        {{"type", "Sequence"}, {"pretokenizers", {split_regex(kLlama3Regex), byte_level(false)}}},
        nullptr, true};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen")
    return PreTokenizer{
        {{"type", "Sequence"}, {"pretokenizers", {split_regex(kQwen2Regex), byte_level(false)}}},
        {{"type", "NFC"}}, false};
  return std::nullopt;
}

// The llama.cpp name of a byte-level tokenizer.json's pre-tokenizer, or "".
std::string pre_name_of(const json& pre, const json& normalizer) {
  auto is_byte_level = [](const json& p, bool use_regex) {
    return p.is_object() && p.value("type", "") == "ByteLevel" &&
           p.value("use_regex", true) == use_regex && !p.value("add_prefix_space", false);
  };
  if (is_byte_level(pre, true) && normalizer.is_null()) return "gpt2";
  if (!pre.is_object() || pre.value("type", "") != "Sequence") return "";
  const json& ps = pre.value("pretokenizers", json::array());
  if (ps.size() != 2) return "";
  if (ps[0].value("type", "") == "Digits" && ps[0].value("individual_digits", false) &&
      is_byte_level(ps[1], true) && normalizer.is_null())
    return "smollm";
  if (ps[0].value("type", "") == "Split" && ps[0].value("behavior", "") == "Isolated" &&
      is_byte_level(ps[1], false) && ps[0].contains("pattern") &&
      ps[0]["pattern"].contains("Regex")) {
    const std::string re = ps[0]["pattern"]["Regex"].get<std::string>();
    if (re == kLlama3Regex && normalizer.is_null()) return "llama-bpe";
    if (re == kQwen2Regex && (normalizer.is_null() || normalizer.value("type", "") == "NFC"))
      return "qwen2";
  }
  return "";
}

// Code point boundaries of a UTF-8 string (invalid bytes count as one each).
std::vector<size_t> char_starts(const std::string& s) {
  std::vector<size_t> b;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) b.push_back(i);
  return b;
}

struct Meta {
  const GgufFile& f;
  std::string where(const std::string& key) const { return f.path() + ": metadata '" + key + "'"; }
  const std::vector<std::string>& strings(const std::string& key, bool required) const {
    static const std::vector<std::string> kNone;
    const GgufValue* v = f.find(key);
    if (!v) {
      if (required) throw InputError(where(key) + " is missing");
      return kNone;
    }
    if (!v->is_array() || v->elem_type != GgufValueType::STRING)
      throw InputError(where(key) + " must be an array of strings");
    return v->strs;
  }
  std::optional<std::vector<int64_t>> ints(const std::string& key, size_t n) const {
    const GgufValue* v = f.find(key);
    if (!v) return std::nullopt;
    if (!v->is_array() || v->elem_type == GgufValueType::STRING || v->elem_type == GgufValueType::F32 ||
        v->elem_type == GgufValueType::F64)
      throw InputError(where(key) + " must be an array of integers");
    if (v->ints.size() != n)
      throw InputError(where(key) + " has " + std::to_string(v->ints.size()) +
                       " entries for " + std::to_string(n) + " tokens");
    return v->ints;
  }
  std::optional<std::vector<double>> floats(const std::string& key, size_t n) const {
    const GgufValue* v = f.find(key);
    if (!v) return std::nullopt;
    if (!v->is_array() || (v->elem_type != GgufValueType::F32 && v->elem_type != GgufValueType::F64))
      throw InputError(where(key) + " must be an array of floats");
    if (v->floats.size() != n)
      throw InputError(where(key) + " has " + std::to_string(v->floats.size()) +
                       " entries for " + std::to_string(n) + " tokens");
    return v->floats;
  }
  // A token id key: nullopt if absent, InputError if outside the vocabulary.
  std::optional<int64_t> id(const std::string& key, size_t n) const {
    const auto v = f.get_int(key);
    if (!v) return std::nullopt;
    if (*v < 0 || *v >= static_cast<int64_t>(n))
      throw InputError(where(key) + " is " + std::to_string(*v) + ", outside the " +
                       std::to_string(n) + "-token vocabulary");
    return v;
  }
};

// SentencePiece scores to BPE merges, as transformers builds them for GGUF files without
// merges: every split of a token into two tokens, the splits of one token ordered by their
// pieces' scores, all of them by the whole token's score (stable, highest first).
json merges_from_scores(const std::vector<std::string>& tokens, const std::vector<double>& scores,
                        const std::unordered_map<std::string, int64_t>& id_of) {
  struct Merge {
    int64_t l, r;
    double score;
  };
  std::vector<Merge> all;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& tok = tokens[t];
    if (id_of.at(tok) != static_cast<int64_t>(t)) continue;  // a duplicate: the first counts
    std::vector<Merge> local;
    const std::vector<size_t> starts = char_starts(tok);
    for (size_t k = 1; k < starts.size(); ++k) {
      auto l = id_of.find(tok.substr(0, starts[k]));
      auto r = id_of.find(tok.substr(starts[k]));
      if (l != id_of.end() && r != id_of.end()) local.push_back({l->second, r->second, scores[t]});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Merge& a, const Merge& b) {
      const double al = scores[static_cast<size_t>(a.l)], bl = scores[static_cast<size_t>(b.l)];
      if (al != bl) return al > bl;
      return scores[static_cast<size_t>(a.r)] > scores[static_cast<size_t>(b.r)];
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  json m = json::array();
  for (const Merge& x : all)
    m.push_back({tokens[static_cast<size_t>(x.l)], tokens[static_cast<size_t>(x.r)]});
  return m;
}

}  // namespace

namespace {
HfTokenizerFiles gguf_tokenizer_to_hf_impl(const GgufFile& f, int64_t max_len);
}  // namespace

HfTokenizerFiles gguf_tokenizer_to_hf(const GgufFile& f, int64_t max_len) {
  try {
    return gguf_tokenizer_to_hf_impl(f, max_len);
  } catch (const json::exception& e) {
    // dump() refuses strings that are not UTF-8 (a token, a merge, the chat template).
    throw InputError(f.path() + ": metadata 'tokenizer.*': a string is not valid UTF-8 (" +
                     std::string(e.what()) + ")");
  }
}

namespace {
HfTokenizerFiles gguf_tokenizer_to_hf_impl(const GgufFile& f, int64_t max_len) {
  const Meta m{f};
  const std::string model = f.require_string("tokenizer.ggml.model");
  const std::vector<std::string>& tokens = m.strings("tokenizer.ggml.tokens", true);
  const size_t n = tokens.size();
  if (n == 0) throw InputError(m.where("tokenizer.ggml.tokens") + " is empty");
  const std::vector<int64_t> types =
      m.ints("tokenizer.ggml.token_type", n).value_or(std::vector<int64_t>(n, kNormal));
  // An unknown type would silently take a control token's special status away.
  for (size_t i = 0; i < n; ++i)
    if (types[i] < 0 || types[i] > kMaxTokenType)
      throw InputError(m.where("tokenizer.ggml.token_type") + "[" + std::to_string(i) + "] is " +
                       std::to_string(types[i]) + ", not a llama.cpp token type (0 to 6)");
  std::unordered_map<std::string, int64_t> id_of;
  id_of.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!id_of.emplace(tokens[i], static_cast<int64_t>(i)).second && model == "gpt2")
      throw InputError(m.where("tokenizer.ggml.tokens") + ": token " + std::to_string(i) +
                       " repeats token " + std::to_string(id_of[tokens[i]]));
  }

  json tj;
  tj["version"] = "1.0";
  tj["truncation"] = nullptr;
  tj["padding"] = nullptr;
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    const int64_t t = types[i];
    // <unk> (type 2) stays a plain vocabulary entry, as SentencePiece and transformers keep it.
    if (t != kControl && t != kUserDefined) continue;
    if (id_of[tokens[i]] != static_cast<int64_t>(i)) continue;
    added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", t != kUserDefined}});
  }
  tj["added_tokens"] = added;
  json vocab = json::object();
  for (size_t i = 0; i < n; ++i)
    if (id_of[tokens[i]] == static_cast<int64_t>(i)) vocab[tokens[i]] = i;
  json bpe = {{"type", "BPE"},         {"dropout", nullptr},         {"unk_token", nullptr},
              {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
              {"fuse_unk", false},     {"byte_fallback", false},     {"ignore_merges", false}};
  const auto unk = m.id("tokenizer.ggml.unknown_token_id", n);

  if (model == "gpt2") {
    const std::string pre = f.get_string("tokenizer.ggml.pre").value_or("default");
    const auto p = byte_level_pre(pre);
    if (!p)
      throw InputError(m.where("tokenizer.ggml.pre") + " '" + pre +
                       "' is not supported (default, gpt2, smollm, starcoder, refact, "
                       "llama-bpe, qwen2 are)");
    json merges = json::array();
    const std::vector<std::string>& ms = m.strings("tokenizer.ggml.merges", true);
    for (size_t i = 0; i < ms.size(); ++i) {
      const size_t sp = ms[i].find(' ');
      if (sp == std::string::npos || ms[i].find(' ', sp + 1) != std::string::npos)
        throw InputError(m.where("tokenizer.ggml.merges") + "[" + std::to_string(i) +
                         "] is not \"left right\"");
      const std::string l = ms[i].substr(0, sp), r = ms[i].substr(sp + 1);
      if (!id_of.count(l) || !id_of.count(r) || !id_of.count(l + r))
        throw InputError(m.where("tokenizer.ggml.merges") + "[" + std::to_string(i) +
                         "] merges tokens that are not in the vocabulary");
      merges.push_back(ms[i]);
    }
    bpe["ignore_merges"] = p->ignore_merges;
    bpe["vocab"] = std::move(vocab);
    bpe["merges"] = std::move(merges);
    tj["normalizer"] = p->normalizer;
    tj["pre_tokenizer"] = p->pre;
    tj["post_processor"] = nullptr;
    tj["decoder"] = byte_level(true);
  } else if (model == "llama") {
    const auto scores = m.floats("tokenizer.ggml.scores", n);
    if (!scores) throw InputError(m.where("tokenizer.ggml.scores") + " is missing");
    // The merges are sorted by score: a NaN breaks the ordering the sort relies on.
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite((*scores)[i]))
        throw InputError(m.where("tokenizer.ggml.scores") + "[" + std::to_string(i) + "] is " +
                         ((*scores)[i] != (*scores)[i] ? "nan" : "infinite") +
                         " (scores must be finite)");
    for (size_t i = 0; i < n; ++i)
      if (types[i] == kByte && !(tokens[i].size() == 6 && tokens[i].starts_with("<0x")))
        throw InputError(m.where("tokenizer.ggml.tokens") + ": byte token " + std::to_string(i) +
                         " is not <0xNN>");
    bpe["fuse_unk"] = true;
    bpe["byte_fallback"] = true;
    if (unk) bpe["unk_token"] = tokens[static_cast<size_t>(*unk)];
    bpe["vocab"] = std::move(vocab);
    bpe["merges"] = merges_from_scores(tokens, *scores, id_of);
    const bool prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    json norm = json::array();
    if (prefix) norm.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
    norm.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}});
    tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
    tj["pre_tokenizer"] = nullptr;
    tj["post_processor"] = nullptr;
    json dec = json::array();
    dec.push_back({{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}});
    dec.push_back({{"type", "ByteFallback"}});
    dec.push_back({{"type", "Fuse"}});
    if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tj["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
  } else {
    throw InputError(m.where("tokenizer.ggml.model") + " '" + model +
                     "' is not supported (gpt2, llama are)");
  }
  tj["model"] = std::move(bpe);

  json cfg;
  auto token = [&](const char* key, const char* hf_key) {
    if (const auto id = m.id(key, n)) cfg[hf_key] = tokens[static_cast<size_t>(*id)];
  };
  token("tokenizer.ggml.bos_token_id", "bos_token");
  token("tokenizer.ggml.eos_token_id", "eos_token");
  token("tokenizer.ggml.unknown_token_id", "unk_token");
  token("tokenizer.ggml.padding_token_id", "pad_token");
  cfg["add_bos_token"] = f.get_bool("tokenizer.ggml.add_bos_token").value_or(model == "llama");
  cfg["add_eos_token"] = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  if (const auto t = f.get_string("tokenizer.chat_template")) cfg["chat_template"] = *t;
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["model_max_length"] = max_len;
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  return {tj.dump(2) + "\n", cfg.dump(2) + "\n"};
}
}  // namespace

namespace {
std::vector<std::pair<std::string, GgufValue>> hf_tokenizer_to_gguf_impl(const std::string& dir,
                                                                         int64_t vocab_size);
}  // namespace

std::vector<std::pair<std::string, GgufValue>> hf_tokenizer_to_gguf(const std::string& dir,
                                                                    int64_t vocab_size) {
  // The files are untrusted: a field of an unexpected JSON type is an input error, not a crash.
  try {
    return hf_tokenizer_to_gguf_impl(dir, vocab_size);
  } catch (const json::exception& e) {
    throw InputError(dir + ": tokenizer.json / tokenizer_config.json: unexpected field type (" +
                     std::string(e.what()) + ")");
  }
}

namespace {
std::vector<std::pair<std::string, GgufValue>> hf_tokenizer_to_gguf_impl(const std::string& dir,
                                                                         int64_t vocab_size) {
  const std::string tpath = (fs::path(dir) / "tokenizer.json").string();
  if (!fs::exists(tpath)) throw InputError(dir + ": no tokenizer.json (needed for the GGUF tokenizer)");
  const json tj = parse_untrusted_json(read_input_file(tpath), tpath);
  auto fail = [&](const std::string& field, const std::string& what) -> InputError {
    return InputError(tpath + ": " + field + ": " + what);
  };
  const json& model = tj.contains("model") ? tj["model"] : json();
  if (!model.is_object() || model.value("type", "") != "BPE")
    throw fail("model.type", "only BPE tokenizers can be exported to GGUF");
  if (model.value("byte_fallback", false))
    throw fail("model.byte_fallback",
               "SentencePiece-style tokenizers cannot be exported to GGUF yet (byte-level BPE can)");
  const std::string pre = pre_name_of(tj.value("pre_tokenizer", json()), tj.value("normalizer", json()));
  if (pre.empty())
    throw fail("pre_tokenizer", "not a byte-level pre-tokenizer llama.cpp names (gpt2, smollm, "
                                "llama-bpe, qwen2)");
  const json& vocab = model.contains("vocab") ? model["vocab"] : json();
  if (!vocab.is_object()) throw fail("model.vocab", "missing or not an object");
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::vector<bool> have;
  auto put = [&](const std::string& tok, const json& id_j, const std::string& field, int64_t type) {
    if (!id_j.is_number_unsigned()) throw fail(field, "id is not a non-negative integer");
    const uint64_t id = id_j.get<uint64_t>();
    if (id >= static_cast<uint64_t>(vocab_size))
      throw fail(field, "id " + std::to_string(id) + " is outside the model's " +
                            std::to_string(vocab_size) + "-row embedding");
    if (tokens.size() <= id) {
      tokens.resize(id + 1);
      types.resize(id + 1, kNormal);
      have.resize(id + 1, false);
    }
    if (have[id] && tokens[id] != tok) throw fail(field, "id " + std::to_string(id) + " given twice");
    tokens[id] = tok;
    types[id] = type;
    have[id] = true;
  };
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    put(it.key(), it.value(), "model.vocab['" + it.key() + "']", kNormal);
  const json& added = tj.value("added_tokens", json::array());
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id"))
      throw fail("added_tokens[" + std::to_string(i) + "]", "needs content and id");
    put(a["content"].get<std::string>(), a["id"], "added_tokens[" + std::to_string(i) + "]",
        a.value("special", false) ? kControl : kUserDefined);
  }
  // Rows of the embedding past the tokenizer (vocab padded to a multiple): llama.cpp's
  // converter names them [PAD<i>] and marks them unused.
  tokens.resize(static_cast<size_t>(vocab_size));
  types.resize(static_cast<size_t>(vocab_size), kNormal);
  have.resize(static_cast<size_t>(vocab_size), false);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (!have[i]) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = 5;  // unused
    }
  std::vector<std::string> merges;
  const json& mj = model.contains("merges") ? model["merges"] : json::array();
  for (size_t i = 0; i < mj.size(); ++i) {
    if (mj[i].is_string()) merges.push_back(mj[i].get<std::string>());
    else if (mj[i].is_array() && mj[i].size() == 2 && mj[i][0].is_string() && mj[i][1].is_string())
      merges.push_back(mj[i][0].get<std::string>() + " " + mj[i][1].get<std::string>());
    else throw fail("model.merges[" + std::to_string(i) + "]", "not a merge");
  }

  std::vector<std::pair<std::string, GgufValue>> out;
  out.emplace_back("tokenizer.ggml.model", GgufValue::str("gpt2"));
  out.emplace_back("tokenizer.ggml.pre", GgufValue::str(pre));
  out.emplace_back("tokenizer.ggml.tokens", GgufValue::str_array(tokens));
  out.emplace_back("tokenizer.ggml.token_type", GgufValue::i32_array(types));
  out.emplace_back("tokenizer.ggml.merges", GgufValue::str_array(merges));

  // Special tokens and the chat template from tokenizer_config.json.
  const std::string cpath = (fs::path(dir) / "tokenizer_config.json").string();
  if (fs::exists(cpath)) {
    const json c = parse_untrusted_json(read_input_file(cpath), cpath);
    std::map<std::string, int64_t> id_of;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (have[i]) id_of.emplace(tokens[i], static_cast<int64_t>(i));
    auto special = [&](const char* key, const char* gguf_key) {
      if (!c.contains(key) || c[key].is_null()) return;
      const json& v = c[key];
      const std::string s = v.is_string() ? v.get<std::string>()
                            : v.is_object() && v.contains("content") && v["content"].is_string()
                                ? v["content"].get<std::string>()
                                : throw InputError(cpath + ": " + key + ": not a token");
      auto it = id_of.find(s);
      if (it == id_of.end())
        throw InputError(cpath + ": " + key + ": '" + s + "' is not a token of tokenizer.json");
      out.emplace_back(gguf_key, GgufValue::u32(static_cast<uint32_t>(it->second)));
    };
    special("bos_token", "tokenizer.ggml.bos_token_id");
    special("eos_token", "tokenizer.ggml.eos_token_id");
    special("unk_token", "tokenizer.ggml.unknown_token_id");
    special("pad_token", "tokenizer.ggml.padding_token_id");
    if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean())
      out.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(c["add_bos_token"].get<bool>()));
    if (c.contains("add_eos_token") && c["add_eos_token"].is_boolean())
      out.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::boolean(c["add_eos_token"].get<bool>()));
    if (c.contains("chat_template") && c["chat_template"].is_string())
      out.emplace_back("tokenizer.chat_template", GgufValue::str(c["chat_template"].get<std::string>()));
  }
  if (std::none_of(out.begin(), out.end(),
                   [](const auto& kv) { return kv.first == "tokenizer.chat_template"; })) {
    const fs::path jinja = fs::path(dir) / "chat_template.jinja";
    if (fs::exists(jinja))
      out.emplace_back("tokenizer.chat_template", GgufValue::str(read_input_file(jinja.string())));
  }
  return out;
}
}  // namespace

}  // namespace sbp

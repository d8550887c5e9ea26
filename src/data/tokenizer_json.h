#pragma once
// Reading a tokenizer.json: the helpers every part uses, each turning a problem into an
// InputError that names the file and the JSON field. Only tokenizer_load*.cpp include this.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/untrusted_json.h"
#include "data/tokenizer_impl.h"
#include "data/tokenizer_utf8.h"

namespace sbp::tokenizer_detail {

using nlohmann::json;

inline std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

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
      return parse_untrusted_json(text, path_);
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

  const std::string& path() const { return path_; }

  // The pipeline (tokenizer_load_pipeline.cpp). `field` is the JSON path named in errors.
  void normalizer(const json& n, const std::string& field, Normalizer& out) const;
  void pre_tokenizer(const json& p, const std::string& field, PreTokenizer& out) const;
  DecoderKind decoder(const json& d, const std::string& field,
                      std::vector<DecoderStep>& steps) const;
  // Refuses combinations whose result we could not match (see the definition).
  void check_pipeline(const TokenizerImpl& t) const;

 private:
  std::string path_;

  std::shared_ptr<const Regex> pattern_regex(const json& obj, const std::string& field,
                                             bool allow_empty_string) const;
  DecoderStep decoder_step(const json& d, const std::string& field) const;
  SplitBehavior behavior(const json& obj, const char* key, const std::string& field,
                         const char* fallback) const;
};

}  // namespace sbp::tokenizer_detail

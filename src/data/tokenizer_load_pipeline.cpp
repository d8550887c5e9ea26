// Loading the pipeline of a tokenizer.json: normalizer, pre_tokenizer and decoder, every type the
// `tokenizers` library has for BPE models, in any Sequence. Each rejection names the JSON field.
#include <string>

#include "data/tokenizer_json.h"

namespace sbp::tokenizer_detail {

namespace {

std::string item(const std::string& field, const char* list, size_t i) {
  return field + "." + list + "[" + std::to_string(i) + "]";
}

const json& list_field(const JsonLoader& l, const json& obj, const char* key,
                       const std::string& field) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_array()) l.fail(field + "." + key, "expected a list");
  return *it;
}

// A string field with the library's default when it is absent.
std::string string_or(const JsonLoader& l, const json& obj, const char* key, const char* fallback,
                      const std::string& field) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  return l.get_string(obj, key, field);
}

}  // namespace

// A Replace's or Split's {"String": ...} or {"Regex": ...} pattern: the compiled regex for a
// Regex pattern, nullptr for a String one (then read with `literal_pattern`).
std::shared_ptr<const Regex> JsonLoader::pattern_regex(const json& obj, const std::string& field,
                                                       bool allow_empty_string) const {
  const json& pattern = obj.value("pattern", json());
  if (pattern.is_object() && pattern.size() == 1 && pattern.contains("Regex") &&
      pattern["Regex"].is_string()) {
    return std::make_shared<const Regex>(pattern["Regex"].get<std::string>(), false,
                                         path_ + ": " + field + ".pattern.Regex");
  }
  if (!pattern.is_object() || pattern.size() != 1 || !pattern.contains("String") ||
      !pattern["String"].is_string()) {
    fail(field + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  const std::string s = pattern["String"].get<std::string>();
  // An empty Replace pattern would match everywhere; no tokenizer has one.
  if (s.empty() && !allow_empty_string) fail(field + ".pattern.String", "must not be empty");
  return nullptr;
}

SplitBehavior JsonLoader::behavior(const json& obj, const char* key, const std::string& field,
                                   const char* fallback) const {
  const std::string b = obj.contains(key) || !fallback ? get_string(obj, key, field) : fallback;
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  fail(field + "." + key, "unsupported split behavior " + b);
}

void JsonLoader::normalizer(const json& n, const std::string& field, Normalizer& out) const {
  if (n.is_null()) return;
  if (!n.is_object()) fail(field, "expected an object");
  const std::string type = get_string(n, "type", field);
  using Kind = NormalizerStep::Kind;
  NormalizerStep step;
  if (type == "Sequence") {
    const json& list = list_field(*this, n, "normalizers", field);
    for (size_t i = 0; i < list.size(); ++i)
      normalizer(list[i], item(field, "normalizers", i), out);
    return;
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.form = type == "NFC"    ? NormalForm::NFC
                : type == "NFD"  ? NormalForm::NFD
                : type == "NFKC" ? NormalForm::NFKC
                                 : NormalForm::NFKD;
  } else if (type == "Replace") {
    step.kind = Kind::Replace;
    step.regex = pattern_regex(n, field, false);
    if (!step.regex) step.pattern = n["pattern"]["String"].get<std::string>();
    step.content = insert_string(n, "content", field);
  } else if (type == "Prepend") {
    step.kind = Kind::Prepend;
    step.content = insert_string(n, "prepend", field);
  } else if (type == "Lowercase") {
    step.kind = Kind::Lowercase;
  } else if (type == "Strip") {
    step.kind = Kind::Strip;
    step.left = get_bool(n, "strip_left", false, field);
    step.right = get_bool(n, "strip_right", false, field);
  } else if (type == "StripAccents") {
    step.kind = Kind::StripAccents;
  } else if (type == "BertNormalizer") {
    step.kind = Kind::Bert;
    step.clean_text = get_bool(n, "clean_text", true, field);
    step.chinese_chars = get_bool(n, "handle_chinese_chars", true, field);
    step.lowercase = get_bool(n, "lowercase", true, field);
    // null: strip accents exactly when lowercasing (the library's rule).
    step.strip_accents = get_bool(n, "strip_accents", step.lowercase, field);
  } else if (type == "Nmt") {
    step.kind = Kind::Nmt;
  } else if (type == "ByteLevel") {
    step.kind = Kind::ByteLevel;
  } else if (type == "Precompiled") {
    fail(field,
         "unsupported normalizer Precompiled (a SentencePiece precompiled_charsmap; "
         "Unigram conversions use it, BPE ones do not)");
  } else {
    fail(field, "unsupported normalizer " + type);
  }
  step.where = path_ + ": " + field + " (" + type + ")";
  out.steps.push_back(std::move(step));
}

void JsonLoader::pre_tokenizer(const json& p, const std::string& field, PreTokenizer& out) const {
  if (p.is_null()) return;
  if (!p.is_object()) fail(field, "expected an object");
  const std::string type = get_string(p, "type", field);
  using Kind = PreTokenizerStep::Kind;
  if (type == "Sequence") {
    const json& list = list_field(*this, p, "pretokenizers", field);
    for (size_t i = 0; i < list.size(); ++i)
      pre_tokenizer(list[i], item(field, "pretokenizers", i), out);
    return;
  }
  PreTokenizerStep step;
  auto char_split = [&](CharClass c, SplitBehavior b) {
    PreTokenizerStep s;
    s.kind = Kind::CharSplit;
    s.char_class = c;
    s.behavior = b;
    return s;
  };
  if (type == "ByteLevel") {
    step.kind = Kind::ByteLevel;
    // The library's defaults for a ByteLevel without these fields are both true.
    step.add_prefix_space = get_bool(p, "add_prefix_space", true, field);
    if (get_bool(p, "use_regex", true, field)) {
      step.regex = std::make_shared<const Regex>(gpt2_split_pattern(), false, path_ + ": " + field);
    }
  } else if (type == "Split") {
    step.kind = Kind::Split;
    step.regex = pattern_regex(p, field, true);
    if (!step.regex) {
      step.regex = std::make_shared<const Regex>(p["pattern"]["String"].get<std::string>(), true,
                                                 path_ + ": " + field + ".pattern.String");
    }
    step.behavior = behavior(p, "behavior", field, nullptr);
    step.invert = get_bool(p, "invert", false, field);
  } else if (type == "Metaspace") {
    step.kind = Kind::Metaspace;
    step.replacement = one_char(p, "replacement", field);
    step.prepend = prepend_scheme(p, field);
    if (get_bool(p, "split", true, field)) {
      step.regex = std::make_shared<const Regex>(step.replacement, true,
                                                 path_ + ": " + field + ".replacement");
    }
    for (const PreTokenizerStep& before : out.steps) {
      // "first" asks where a piece began in the original text; ByteLevel's pieces lose that.
      if (before.kind == Kind::ByteLevel && step.prepend == PrependScheme::First)
        fail(field, "Metaspace with prepend_scheme \"first\" after ByteLevel is not supported");
    }
  } else if (type == "Whitespace") {
    // \w+|[^\w\s]+, the matches kept and the rest (whitespace) removed.
    step.kind = Kind::Split;
    step.regex = std::make_shared<const Regex>(whitespace_pattern(), false, path_ + ": " + field);
    step.behavior = SplitBehavior::Removed;
    step.invert = true;
  } else if (type == "WhitespaceSplit") {
    step = char_split(CharClass::WhiteSpace, SplitBehavior::Removed);
  } else if (type == "Punctuation") {
    step = char_split(CharClass::Punctuation, behavior(p, "behavior", field, "Isolated"));
  } else if (type == "Digits") {
    const bool individual = get_bool(p, "individual_digits", false, field);
    step = char_split(CharClass::Numeric,
                      individual ? SplitBehavior::Isolated : SplitBehavior::Contiguous);
  } else if (type == "CharDelimiterSplit") {
    step = char_split(CharClass::OneChar, SplitBehavior::Removed);
    const std::string d = one_char(p, "delimiter", field);
    size_t i = 0;
    step.delimiter = utf8_next(d, i);
  } else if (type == "BertPreTokenizer") {
    // Whitespace removed, then every punctuation character on its own: two steps.
    out.steps.push_back(char_split(CharClass::WhiteSpace, SplitBehavior::Removed));
    step = char_split(CharClass::Punctuation, SplitBehavior::Isolated);
  } else if (type == "FixedLength") {
    step.kind = Kind::FixedLength;
    step.length = p.contains("length") ? count(p, "length", field) : 5;
    if (step.length == 0) fail(field + ".length", "must be at least 1");
  } else if (type == "UnicodeScripts") {
    step.kind = Kind::UnicodeScripts;
  } else {
    fail(field, "unsupported pre_tokenizer " + type);
  }
  out.steps.push_back(std::move(step));
}

DecoderKind JsonLoader::decoder(const json& d, const std::string& field,
                                std::vector<DecoderStep>& steps) const {
  if (d.is_null()) return DecoderKind::None;
  if (!d.is_object()) fail(field, "expected an object");
  const std::string type = get_string(d, "type", field);
  // The whole decoder being ByteLevel has a faster path (bytes precomputed per id).
  if (type == "ByteLevel") return DecoderKind::ByteLevel;
  if (type == "Sequence") {
    const json& list = list_field(*this, d, "decoders", field);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = item(field, "decoders", i);
      if (!list[i].is_object()) fail(at, "expected an object");
      if (list[i].value("type", json()) == "Sequence") {
        decoder(list[i], at, steps);  // a nested Sequence runs its steps in place
      } else {
        steps.push_back(decoder_step(list[i], at));
      }
    }
  } else {
    steps.push_back(decoder_step(d, field));
  }
  return DecoderKind::Chain;
}

DecoderStep JsonLoader::decoder_step(const json& d, const std::string& field) const {
  const std::string type = get_string(d, "type", field);
  using Kind = DecoderStep::Kind;
  DecoderStep step;
  if (type == "Replace") {
    step.kind = Kind::Replace;
    step.regex = pattern_regex(d, field, false);
    if (!step.regex) step.pattern = d["pattern"]["String"].get<std::string>();
    step.content = insert_string(d, "content", field);
  } else if (type == "ByteFallback") {
    step.kind = Kind::ByteFallback;
  } else if (type == "Fuse") {
    step.kind = Kind::Fuse;
  } else if (type == "Strip") {
    step.kind = Kind::Strip;
    step.content = one_char(d, "content", field);
    step.start = count(d, "start", field);
    step.stop = count(d, "stop", field);
  } else if (type == "ByteLevel") {
    step.kind = Kind::ByteLevel;
  } else if (type == "Metaspace") {
    step.kind = Kind::Metaspace;
    step.replacement = one_char(d, "replacement", field);
    step.drop_first = prepend_scheme(d, field) != PrependScheme::Never;
    get_bool(d, "split", true, field);  // checked, but decoding does not use it
  } else if (type == "WordPiece") {
    step.kind = Kind::WordPiece;
    step.prefix = string_or(*this, d, "prefix", "##", field);
    step.cleanup = get_bool(d, "cleanup", true, field);
  } else if (type == "BPEDecoder") {
    step.kind = Kind::BpeSuffix;
    step.prefix = string_or(*this, d, "suffix", "</w>", field);
  } else if (type == "CTC") {
    step.kind = Kind::Ctc;
    step.pad_token = string_or(*this, d, "pad_token", "<pad>", field);
    step.word_delimiter = string_or(*this, d, "word_delimiter_token", "|", field);
    step.cleanup = get_bool(d, "cleanup", true, field);
  } else {
    fail(field, "unsupported decoder " + type);
  }
  step.where = path_ + ": " + field + " (" + type + ")";
  for (const std::string* s : {&step.prefix, &step.pad_token, &step.word_delimiter}) {
    if (s->size() > kMaxInsertBytes)
      fail(field, "a string of " + std::to_string(s->size()) + " bytes (at most " +
                      std::to_string(kMaxInsertBytes) + " are accepted)");
  }
  return step;
}

// Metaspace's "first" scheme asks whether a piece starts the original text (its first character
// comes from offset 0). We answer from where the piece starts in the normalized text, which is
// the same answer unless a normalizer deleted leading characters (Strip, StripAccents, Nmt,
// BertNormalizer's clean_text or strip_accents, a Replace with empty content), or a normalizer
// turned one character into several (NFD, Lowercase's U+0130, ByteLevel, ...) and an earlier
// pre-tokenizer split those apart. Both combinations are refused rather than answered wrongly.
void JsonLoader::check_pipeline(const TokenizerImpl& t) const {
  const auto& steps = t.pre_tokenizer.steps;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind != PreTokenizerStep::Kind::Metaspace ||
        steps[i].prepend != PrependScheme::First)
      continue;
    for (const NormalizerStep& n : t.normalizer.steps) {
      if (n.can_delete())
        fail("normalizer",
             "a normalizer that deletes characters (Strip, StripAccents, Nmt, BertNormalizer, a "
             "Replace with empty content) together with a Metaspace pre_tokenizer whose "
             "prepend_scheme is \"first\" is not supported");
    }
    if (i > 0 && !t.normalizer.steps.empty())
      fail("pre_tokenizer",
           "a Metaspace whose prepend_scheme is \"first\" after another pre-tokenizer, together "
           "with a normalizer, is not supported");
  }
}

}  // namespace sbp::tokenizer_detail

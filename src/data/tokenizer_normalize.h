#pragma once
// The normalizers of the `tokenizers` library, applied to each piece of text between added
// tokens: Unicode normal forms, Replace (String or Regex), Prepend, Lowercase, Strip,
// StripAccents, BertNormalizer, Nmt, ByteLevel, and a Sequence of them (the steps, in order).
// Only the normalized text matters here: we produce no offsets.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer_regex.h"

namespace sbp::tokenizer_detail {

// How far a transformation chain (the normalizer's steps, the decoder's steps) may grow the
// text it is given: each step's own strings are bounded (kMaxInsertBytes), but a chain of
// Replace steps multiplies them, exponentially in its length ("a" -> 256 "a" -> 65536 "a" ...).
// Real pipelines grow text by a small factor (Metaspace's ' ' -> U+2581: 3; NFKD: rarely more
// than 3), so a chain whose result would pass this is refused, naming its file and step.
constexpr size_t kMaxTextGrowth = 16;
constexpr size_t kTextGrowthSlack = 4096;  // bytes: Prepend strings, a short text's tokens
inline size_t text_growth_limit(size_t input_bytes) {
  return kMaxTextGrowth * input_bytes + kTextGrowthSlack;
}
// Throws InputError "<where>: grows ... past the limit" (`where` names the file, step and type).
[[noreturn]] void fail_text_growth(const std::string& where, const char* chain, size_t input_bytes,
                                   size_t output_bytes);

enum class NormalForm { NFC, NFD, NFKC, NFKD };

struct NormalizerStep {
  enum class Kind {
    Form,          // a Unicode normal form
    Replace,       // every match of a String (SentencePiece: ' ' -> U+2581) or Regex pattern
    Prepend,       // a string in front of a non-empty piece
    Lowercase,     // Rust's char::to_lowercase, character by character
    Strip,         // leading and/or trailing White_Space
    StripAccents,  // drops combining marks (general category M)
    Bert,          // BertNormalizer: clean_text, handle_chinese_chars, strip_accents, lowercase
    Nmt,           // drops ASCII controls, maps some spaces and separators to ' '
    ByteLevel,     // every byte becomes its GPT-2 byte-level character
  } kind = Kind::Form;
  NormalForm form = NormalForm::NFC;
  std::string pattern;  // Replace with a String pattern: what is looked for (never empty)
  std::shared_ptr<const Regex> regex;  // Replace with a Regex pattern
  std::string content;                 // Replace: what it becomes; Prepend: what goes in front
  bool left = false, right = false;    // Strip: which ends
  // Bert's four switches (strip_accents already resolved: null follows lowercase).
  bool clean_text = false, chinese_chars = false, strip_accents = false, lowercase = false;
  // "<tokenizer.json>: normalizer.normalizers[2] (Replace)", for errors ("" when built in code).
  std::string where;

  // Whether the step can delete characters the text starts with (which moves where a piece's
  // text starts in the original, what Metaspace's "first" scheme asks).
  bool can_delete() const;
};

struct Normalizer {
  std::vector<NormalizerStep> steps;  // applied in order; empty = no normalizer
  // Returns `text` normalized; `buffer` holds the result when it differs from the input.
  // InputError (naming the step) when the steps would grow it past text_growth_limit.
  std::string_view apply(std::string_view text, std::string& buffer) const;

 private:
  // Writes the step's result to `out`; returns false (out untouched) when it leaves text as is.
  // A Replace whose result would pass `limit` bytes throws before building it.
  static bool apply_step(const NormalizerStep& step, std::string_view text, std::string& out,
                         size_t limit, size_t input_bytes);
};

}  // namespace sbp::tokenizer_detail

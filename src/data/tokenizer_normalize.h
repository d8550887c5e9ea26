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

  // Whether the step can delete characters the text starts with (which moves where a piece's
  // text starts in the original, what Metaspace's "first" scheme asks).
  bool can_delete() const;
};

struct Normalizer {
  std::vector<NormalizerStep> steps;  // applied in order; empty = no normalizer
  // Returns `text` normalized; `buffer` holds the result when it differs from the input.
  std::string_view apply(std::string_view text, std::string& buffer) const;

 private:
  // Writes the step's result to `out`; returns false (out untouched) when it leaves text as is.
  static bool apply_step(const NormalizerStep& step, std::string_view text, std::string& out);
};

}  // namespace sbp::tokenizer_detail

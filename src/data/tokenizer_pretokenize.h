#pragma once
// The pre-tokenizers of the `tokenizers` library, between normalization and BPE: Split, ByteLevel,
// Metaspace, the character-class splits (Whitespace, WhitespaceSplit, Punctuation, Digits,
// CharDelimiterSplit, BertPreTokenizer), FixedLength, UnicodeScripts, and a Sequence of them,
// with the library's splitting semantics.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer_regex.h"

namespace sbp::tokenizer_detail {

// What happens to the parts of a piece that the pattern matches (the library's
// SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Metaspace: when the replacement character goes in front of a piece. First: only a piece that
// starts the text (original offset 0, so not a piece after an added token).
enum class PrependScheme { Always, First, Never };

// CharSplit: which characters are the delimiters (each one a match of its own, as the library's
// `Fn(char) -> bool` patterns).
enum class CharClass { WhiteSpace, Punctuation, Numeric, OneChar };

struct PreTokenizerStep {
  // Split: a regex (Whitespace is one too). CharSplit: a character class (WhitespaceSplit,
  // Punctuation, Digits, CharDelimiterSplit; BertPreTokenizer is two). FixedLength: chunks of
  // `length` characters. UnicodeScripts: cuts where the script changes.
  enum class Kind {
    Split,
    ByteLevel,
    Metaspace,
    CharSplit,
    FixedLength,
    UnicodeScripts
  } kind = Kind::Split;
  // Split: its pattern; ByteLevel: GPT-2's, if use_regex; Metaspace: the replacement, if split.
  std::shared_ptr<const Regex> regex;
  CharClass char_class = CharClass::WhiteSpace;  // CharSplit
  char32_t delimiter = 0;                        // CharSplit with OneChar
  size_t length = 0;                             // FixedLength (at least 1)
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;            // Split: the non-matches are the delimiters
  bool add_prefix_space = false;  // ByteLevel: a piece not starting with ' ' gets one
  std::string replacement;        // Metaspace: one character (U+2581) that replaces ' '
  PrependScheme prepend = PrependScheme::Always;  // Metaspace
};

// The regex GPT-2's ByteLevel pre-tokenizer splits with when use_regex is true.
const std::string& gpt2_split_pattern();
// The Whitespace pre-tokenizer's \w+|[^\w\s]+ (Rust regex semantics: \w is Alphabetic, marks,
// decimal digits, connector punctuation and Join_Control), spelled out for PCRE2.
const std::string& whitespace_pattern();

class PreTokenizer {
 public:
  std::vector<PreTokenizerStep> steps;  // a Sequence, or one step, or none

  // Calls emit(pre_token) for every non-empty pre-token of `text`, left to right.
  // `starts_text`: `text` begins at offset 0 of the original text (Metaspace's "first" scheme).
  void run(std::string_view text, bool starts_text,
           const std::function<void(std::string_view)>& emit) const;

 private:
  void run_from(size_t step, std::string_view piece, bool starts_text,
                const std::function<void(std::string_view)>& emit) const;
  void run_char_split(size_t step, std::string_view piece, bool starts_text,
                      const std::function<void(std::string_view)>& emit) const;
  void run_fixed_length(size_t step, std::string_view piece, bool starts_text,
                        const std::function<void(std::string_view)>& emit) const;
  void run_scripts(size_t step, std::string_view piece, bool starts_text,
                   const std::function<void(std::string_view)>& emit) const;
  void run_metaspace(size_t step, std::string_view piece, bool starts_text,
                     const std::function<void(std::string_view)>& emit) const;
};

}  // namespace sbp::tokenizer_detail

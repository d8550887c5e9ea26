#pragma once
// The text stages between added-token extraction and BPE: the normalizer (Unicode normal forms,
// Replace, Prepend) and the pre-tokenizer chain (Split, ByteLevel, Metaspace), with the library's
// splitting semantics.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer_regex.h"

namespace sbp::tokenizer_detail {

enum class NormalForm { NFC, NFD, NFKC, NFKD };

struct NormalizerStep {
  // Form: a Unicode normal form. Replace: every occurrence of a literal string (SentencePiece
  // conversions turn ' ' into U+2581). Prepend: a string in front of a non-empty piece.
  enum class Kind { Form, Replace, Prepend } kind = Kind::Form;
  NormalForm form = NormalForm::NFC;
  std::string pattern;  // Replace: what is looked for (never empty)
  std::string content;  // Replace: what it becomes; Prepend: what goes in front
};

struct Normalizer {
  std::vector<NormalizerStep> steps;  // applied in order; empty = no normalizer
  // Returns `text` normalized; `buffer` holds the result when it differs from the input.
  std::string_view apply(std::string_view text, std::string& buffer) const;

 private:
  // Writes the step's result to `out`; returns false (out untouched) when it leaves text as is.
  static bool apply_step(const NormalizerStep& step, std::string_view text, std::string& out);
  static void normalize_runs(std::string_view text, NormalForm form, std::string& out);
};

// What happens to the parts of a piece that the pattern matches (the library's
// SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Metaspace: when the replacement character goes in front of a piece. First: only a piece that
// starts the text (original offset 0, so not a piece after an added token).
enum class PrependScheme { Always, First, Never };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace } kind = Kind::Split;
  // Split: its pattern; ByteLevel: GPT-2's, if use_regex; Metaspace: the replacement, if split.
  std::shared_ptr<const Regex> regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;            // Split: the non-matches are the delimiters
  bool add_prefix_space = false;  // ByteLevel: a piece not starting with ' ' gets one
  std::string replacement;        // Metaspace: one character (U+2581) that replaces ' '
  PrependScheme prepend = PrependScheme::Always;  // Metaspace
};

// The regex GPT-2's ByteLevel pre-tokenizer splits with when use_regex is true.
const std::string& gpt2_split_pattern();

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
  void run_metaspace(size_t step, std::string_view piece, bool starts_text,
                     const std::function<void(std::string_view)>& emit) const;
};

}  // namespace sbp::tokenizer_detail

#pragma once
// The text stages between added-token extraction and BPE: the normalizer (Unicode normal forms)
// and the pre-tokenizer chain (Split, ByteLevel), with the library's splitting semantics.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer_regex.h"

namespace sbp::tokenizer_detail {

enum class NormalForm { NFC, NFD, NFKC, NFKD };

struct Normalizer {
  std::vector<NormalForm> steps;  // applied in order; empty = no normalizer
  // Returns `text` normalized; `buffer` holds the result when it differs from the input.
  std::string_view apply(std::string_view text, std::string& buffer) const;

 private:
  static void normalize_runs(std::string_view text, NormalForm form, std::string& out);
};

// What happens to the parts of a piece that the pattern matches (the library's
// SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel } kind = Kind::Split;
  std::shared_ptr<const Regex> regex;  // Split: its pattern; ByteLevel: GPT-2's, if use_regex
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;            // Split: the non-matches are the delimiters
  bool add_prefix_space = false;  // ByteLevel: a piece not starting with ' ' gets one
};

// The regex GPT-2's ByteLevel pre-tokenizer splits with when use_regex is true.
const std::string& gpt2_split_pattern();

class PreTokenizer {
 public:
  std::vector<PreTokenizerStep> steps;  // a Sequence, or one step, or none

  // Calls emit(pre_token) for every non-empty pre-token of `text`, left to right.
  void run(std::string_view text, const std::function<void(std::string_view)>& emit) const;

 private:
  void run_from(size_t step, std::string_view piece,
                const std::function<void(std::string_view)>& emit) const;
};

}  // namespace sbp::tokenizer_detail

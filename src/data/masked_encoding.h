#pragma once
// Tokenizing a rendered conversation exactly as Hugging Face does (one encode of the whole string,
// so token boundaries never depend on how the text was assembled) while learning which tokens
// cover trained bytes.
//
// A byte-level BPE token stands for a known byte string (and so does a SentencePiece-style one
// when spaces only become "▁": Tokenizer::sentencepiece_text_lengths), so walking the ids of
// the whole text gives every token's byte span; a token is trained if its span touches a
// trained byte range — the rule transformers' return_assistant_tokens_mask applies to
// characters. (A token that
// straddles the header and the content, e.g. "\n\n\n" when an assistant message starts with
// newlines, is trained.)
//
// When the spans do not add up to the text (a normalizer changed the bytes, or a tokenizer that
// is not byte-level), each range is tokenized on its own instead; `exact` is then false and the
// ids may differ from the library's at range boundaries.
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenizer.h"

namespace sbp {

struct MaskedTokens {
  std::vector<int32_t> ids;
  std::vector<float> mask;  // 1 where the token covers a trained byte
  bool exact = true;        // false: fell back to tokenizing the ranges separately
};

class MaskedEncoder {
 public:
  // Precomputes the byte length of every token id (one pass over the vocabulary).
  explicit MaskedEncoder(Tokenizer tok);

  // `trained`: sorted, non-overlapping byte ranges [begin, end) of `text`.
  MaskedTokens encode(std::string_view text,
                      std::span<const std::pair<size_t, size_t>> trained) const;

  const Tokenizer& tokenizer() const { return tok_; }

 private:
  MaskedTokens encode_by_ranges(std::string_view text,
                                std::span<const std::pair<size_t, size_t>> trained) const;
  Tokenizer tok_;
  std::vector<int32_t> byte_len_;  // (vocab) bytes each id stands for; -1 for ids without a token
};

}  // namespace sbp

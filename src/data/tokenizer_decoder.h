#pragma once
// The SentencePiece-style decoders of the `tokenizers` library (Replace, ByteFallback, Fuse,
// Strip, Metaspace, and a Sequence of them), with the library's per-token semantics: each step
// maps the list of token strings to a new list, and the final list is joined.
#include <cstddef>
#include <string>
#include <vector>

namespace sbp::tokenizer_detail {

struct DecoderStep {
  enum class Kind { Replace, ByteFallback, Fuse, Strip, Metaspace } kind = Kind::Fuse;
  std::string pattern;  // Replace: the literal looked for in each token (never empty)
  std::string content;  // Replace: what it becomes; Strip: the one character stripped
  size_t start = 0;     // Strip: at most this many `content` characters cut from each token's front
  size_t stop = 0;      // Strip: ... and from its end
  std::string replacement;  // Metaspace: one character, turned back into ' '
  bool drop_first = true;   // Metaspace: prepend_scheme is not "never": the first token loses it
};

// Runs the steps over `tokens` (changed in place) and returns the joined text.
std::string decode_chain(const std::vector<DecoderStep>& steps, std::vector<std::string>& tokens);

}  // namespace sbp::tokenizer_detail

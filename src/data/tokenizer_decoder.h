#pragma once
// The decoders of the `tokenizers` library (ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace, WordPiece, BPEDecoder, CTC, and a Sequence of them in any order), with the library's
// per-token semantics: each step maps the list of token strings to a new list, and the final list
// is joined.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer_regex.h"

namespace sbp::tokenizer_detail {

struct DecoderStep {
  enum class Kind {
    Replace,
    ByteFallback,
    Fuse,
    Strip,
    Metaspace,
    ByteLevel,
    WordPiece,
    BpeSuffix,  // the library's BPEDecoder
    Ctc,
  } kind = Kind::Fuse;
  std::string pattern;  // Replace: the literal looked for in each token (never empty) ...
  std::shared_ptr<const Regex> regex;  // ... or, for a {"Regex": ...} pattern, this
  std::string content;  // Replace: what it becomes; Strip: the one character stripped
  size_t start = 0;     // Strip: at most this many `content` characters cut from each token's front
  size_t stop = 0;      // Strip: ... and from its end
  std::string replacement;     // Metaspace: one character, turned back into ' '
  bool drop_first = true;      // Metaspace: prepend_scheme is not "never": the first token loses it
  std::string prefix;          // WordPiece: continuation prefix ("##"); BPEDecoder: suffix ("</w>")
  bool cleanup = false;        // WordPiece, CTC: the English spacing clean-up (" ." -> ".", ...)
  std::string pad_token;       // CTC: dropped
  std::string word_delimiter;  // CTC: becomes ' ' (with cleanup)
  // "<tokenizer.json>: decoder.decoders[1] (Replace)", for errors ("" when built in code).
  std::string where;
};

// Runs the steps over `tokens` (changed in place) and returns the joined text. InputError
// naming the step when the tokens would grow past text_growth_limit (tokenizer_normalize.h)
// of their bytes: a Replace is refused before it builds its result.
std::string decode_chain(const std::vector<DecoderStep>& steps, std::vector<std::string>& tokens);

// Rust's str::replace: every non-overlapping occurrence, leftmost first; an empty `pattern`
// matches at every character boundary, the two ends included ("ab" -> "XaXbX").
void rust_replace(std::string& s, const std::string& pattern, const std::string& content);

}  // namespace sbp::tokenizer_detail

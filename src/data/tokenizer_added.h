#pragma once
// Added tokens (<|im_start|>, <think>, ...): found in the text before any normalization or
// pre-tokenization, with the library's leftmost-longest matching and its single_word / lstrip /
// rstrip rules.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sbp::tokenizer_detail {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;      // skipped by decode(skip_special); not matched without allow_special
  bool single_word = false;  // only matches with no letter or digit on either side
  bool lstrip = false;       // also swallows the whitespace before it
  bool rstrip = false;       // also swallows the whitespace after it
  bool normalized = false;   // matched in the normalized text instead of the raw text
};

// A part of the text: either an added token or plain text to tokenize further.
struct Segment {
  size_t begin = 0, end = 0;
  int32_t token_id = -1;  // -1: plain text
};

class AddedTokenMatcher {
 public:
  // `patterns[i]` is the string that finds tokens[i] (its content, normalized if it is
  // matched in normalized text).
  void build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }

  // Splits `text` into segments covering it, left to right (empty text: no segments).
  void split(std::string_view text, bool allow_special, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;  // index into tokens_ of the token ending here
  };
  int32_t child(int32_t node, unsigned char byte) const;
  // Length and token index of the longest token starting at text[pos], or {0, -1}.
  std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
  bool first_byte_[256] = {};  // a cheap filter: most positions cannot start a token
};

}  // namespace sbp::tokenizer_detail

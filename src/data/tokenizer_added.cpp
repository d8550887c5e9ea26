#include "data/tokenizer_added.h"

#include <algorithm>

#include "data/tokenizer_utf8.h"

namespace sbp::tokenizer_detail {

void AddedTokenMatcher::build(const std::vector<AddedToken>& tokens,
                              const std::vector<std::string>& patterns) {
  tokens_ = tokens;
  trie_.assign(1, Node{});
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  for (size_t t = 0; t < patterns.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;  // an empty token can never be found in text
    first_byte_[static_cast<unsigned char>(p[0])] = true;
    int32_t node = 0;
    for (char c : p) {
      const auto byte = static_cast<unsigned char>(c);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(trie_.size());
        auto& kids = trie_[node].children;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{0})),
                    {byte, next});
        trie_.push_back(Node{});
      }
      node = next;
    }
    // Two tokens with one pattern: the first one listed wins.
    if (trie_[node].token < 0) trie_[node].token = static_cast<int32_t>(t);
  }
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  const auto& kids = trie_[node].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(byte, int32_t{0}));
  return it != kids.end() && it->first == byte ? it->second : -1;
}

std::pair<size_t, int32_t> AddedTokenMatcher::longest_at(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (trie_[node].token >= 0) best = {i + 1 - pos, trie_[node].token};
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, bool allow_special,
                              std::vector<Segment>& out) const {
  size_t emitted = 0;  // end of the last segment written
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [length, index] = longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + length;
    // The search resumes after this match even when the rules below reject it: the library
    // iterates non-overlapping matches first and filters them afterwards.
    pos = stop;
    const AddedToken& token = tokens_[index];
    if (token.special && !allow_special) continue;
    if (token.single_word) {
      size_t unused;
      const bool free_left = start == 0 || !is_word_char(utf8_prev(text, start, unused));
      size_t after = stop;
      const bool free_right = stop == text.size() || !is_word_char(utf8_next(text, after));
      if (!free_left || !free_right) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t begin;
        if (!is_white_space(utf8_prev(text, s, begin))) break;
        s = begin;
      }
      start = std::max(s, emitted);  // whitespace an earlier token already took stays there
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!is_white_space(utf8_next(text, next))) break;
        stop = next;
      }
    }
    if (stop <= emitted) continue;  // inside whitespace a previous rstrip token swallowed
    start = std::max(start, emitted);
    if (emitted < start) out.push_back({emitted, start, -1});
    out.push_back({start, stop, token.id});
    emitted = stop;
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

}  // namespace sbp::tokenizer_detail

#pragma once
// The BPE model: turns one pre-token into ids by applying merges in rank order, exactly as the
// `tokenizers` library does (lowest rank first, leftmost first among equal ranks).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sbp::tokenizer_detail {

// Hashing that lets an unordered_map<std::string, ...> be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Open-addressing table from a pair of token ids to (merge rank, id of the merged token).
// A std::unordered_map of 150k pairs costs a cache miss per node; this is one flat array.
class MergeTable {
 public:
  struct Merge {
    int32_t rank = -1;
    int32_t merged_id = -1;
  };
  void reserve(size_t n);
  // A pair listed twice keeps the later rank, as the library's HashMap collect does.
  void insert(int32_t left, int32_t right, Merge merge);
  const Merge* find(int32_t left, int32_t right) const;
  size_t size() const { return count_; }
  std::vector<int32_t> merged_ids() const;  // the merged token of every merge

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  size_t slot(uint64_t key) const;
  std::vector<uint64_t> keys_;
  std::vector<Merge> values_;
  size_t count_ = 0;
};

// Per-call working memory for encode_word, reused across the pre-tokens of one encode call.
struct BpeScratch {
  std::vector<int32_t> symbols;  // current token ids of the word, left to right
  std::vector<int32_t> ranks;    // ranks[i]: rank of the merge of symbols i and i+1 (or none)
  std::vector<int32_t> prev, next;
  struct Candidate {
    int32_t rank, pos, merged_id;
  };
  std::vector<Candidate> heap;
};

struct BpeModel {
  TokenMap vocab;
  MergeTable merges;
  bool ignore_merges = false;  // a pre-token that is itself in the vocab is emitted whole
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  // byte_fallback: a character missing from the vocab becomes the tokens <0xNN> of its UTF-8
  // bytes when all of them exist (else unk_id, as without fallback).
  bool byte_fallback = false;
  std::vector<int32_t> byte_id;  // byte_fallback: id of <0xNN> for each byte, -1 if absent
  // Single-character tokens below U+0144 (all byte-level characters), looked up without hashing.
  std::vector<int32_t> small_char_id;

  void build_char_table();  // also fills byte_id
  // Appends the ids of one pre-token. Characters missing from the vocab become unk_id, or are
  // dropped when there is none, as in the library.
  void encode_word(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const;

 private:
  // -1 when the character is not a token.
  int32_t char_id(std::string_view ch, char32_t cp) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
  // Appends the <0xNN> ids of the character's bytes; false (nothing appended) if one is missing.
  bool push_fallback_bytes(std::string_view ch, std::vector<int32_t>& symbols) const;
  // Two strategies with the same result: rescanning a rank array is fastest for the short words
  // that make up almost all text; a heap over a linked list keeps long runs O(n log n).
  void merge_short(BpeScratch& scratch) const;
  void merge_long(BpeScratch& scratch) const;
};

}  // namespace sbp::tokenizer_detail

#include "data/tokenizer_bpe.h"

#include <algorithm>
#include <climits>

#include "data/tokenizer_utf8.h"

namespace sbp::tokenizer_detail {

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Words up to this many characters use the rank-array rescan; longer ones the heap.
constexpr size_t kShortWord = 96;

}  // namespace

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;  // load factor <= 1/2 keeps probe chains short
  keys_.assign(cap, kEmpty);
  values_.assign(cap, Merge{});
  count_ = 0;
}

size_t MergeTable::slot(uint64_t key) const {
  // Fibonacci hashing: the multiply spreads the two packed ids over the high bits.
  const size_t mask = keys_.size() - 1;
  size_t i = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
  while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask;
  return i;
}

void MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  if (2 * (count_ + 1) > keys_.size()) {
    // Grow and rehash (only when reserve() was too small).
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<Merge> old_values = std::move(values_);
    reserve(std::max<size_t>(count_ + 1, old_keys.size()));
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] == kEmpty) continue;
      const size_t s = slot(old_keys[i]);
      keys_[s] = old_keys[i];
      values_[s] = old_values[i];
      ++count_;
    }
  }
  const uint64_t key = pair_key(left, right);
  const size_t s = slot(key);
  if (keys_[s] == kEmpty) ++count_;
  keys_[s] = key;
  values_[s] = merge;
}

const MergeTable::Merge* MergeTable::find(int32_t left, int32_t right) const {
  if (keys_.empty()) return nullptr;
  const size_t s = slot(pair_key(left, right));
  return keys_[s] == kEmpty ? nullptr : &values_[s];
}

std::vector<int32_t> MergeTable::merged_ids() const {
  std::vector<int32_t> out;
  out.reserve(count_);
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] != kEmpty) out.push_back(values_[i].merged_id);
  return out;
}

void BpeModel::build_char_table() {
  small_char_id.assign(ByteLevelAlphabet::kMaxCodePoint, -1);
  for (char32_t cp = 0; cp < ByteLevelAlphabet::kMaxCodePoint; ++cp) {
    std::string ch;
    utf8_append(ch, cp);
    auto it = vocab.find(ch);
    if (it != vocab.end()) small_char_id[cp] = it->second;
  }
  byte_id.assign(256, -1);
  if (!byte_fallback) return;
  static const char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    // The library looks up format!("<{b:#04X}>"): "<0x" then two upper-case hex digits.
    const std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
    auto it = vocab.find(name);
    if (it != vocab.end()) byte_id[static_cast<size_t>(b)] = it->second;
  }
}

bool BpeModel::push_fallback_bytes(std::string_view ch, std::vector<int32_t>& symbols) const {
  for (char c : ch)
    if (byte_id[static_cast<unsigned char>(c)] < 0) return false;
  for (char c : ch) symbols.push_back(byte_id[static_cast<unsigned char>(c)]);
  return true;
}

int32_t BpeModel::char_id(std::string_view ch, char32_t cp) const {
  if (cp < small_char_id.size()) return small_char_id[cp];
  auto it = vocab.find(ch);
  return it == vocab.end() ? -1 : it->second;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  symbols.clear();
  bool pending_unk = false;  // an unknown run not yet written (fuse_unk joins a run into one)
  size_t i = 0;
  while (i < word.size()) {
    const size_t begin = i;
    const char32_t cp = utf8_next(word, i);
    const std::string_view ch = word.substr(begin, i - begin);
    const int32_t id = char_id(ch, cp);
    if (id >= 0) {
      if (pending_unk) symbols.push_back(*unk_id);
      pending_unk = false;
      symbols.push_back(id);
    } else if (byte_fallback && push_fallback_bytes(ch, symbols)) {
      // As in the library, a pending <unk> is not written before the bytes: it follows them
      // (only possible when some <0xNN> tokens are missing).
    } else if (unk_id) {
      if (pending_unk && !fuse_unk) symbols.push_back(*unk_id);
      pending_unk = true;
    }
  }
  if (pending_unk) symbols.push_back(*unk_id);
}

void BpeModel::merge_short(BpeScratch& s) const {
  std::vector<int32_t>& sym = s.symbols;
  std::vector<int32_t>& ranks = s.ranks;
  auto rank_of = [&](size_t i) {
    const MergeTable::Merge* m = merges.find(sym[i], sym[i + 1]);
    return m ? m->rank : INT32_MAX;
  };
  ranks.resize(sym.size() - 1);
  for (size_t i = 0; i + 1 < sym.size(); ++i) ranks[i] = rank_of(i);
  while (sym.size() > 1) {
    // Lowest rank wins; the strict < keeps the leftmost of equal ranks (the same pair repeated).
    size_t best = 0;
    for (size_t i = 1; i < ranks.size(); ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == INT32_MAX) break;
    sym[best] = merges.find(sym[best], sym[best + 1])->merged_id;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(best));
    if (best < ranks.size()) ranks[best] = rank_of(best);
    if (best > 0) ranks[best - 1] = rank_of(best - 1);
  }
}

void BpeModel::merge_long(BpeScratch& s) const {
  std::vector<int32_t>& sym = s.symbols;  // -1 marks a symbol merged into its left neighbour
  const auto n = static_cast<int32_t>(sym.size());
  s.prev.resize(sym.size());
  s.next.resize(sym.size());
  for (int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  using Candidate = BpeScratch::Candidate;
  // std heap functions build a max-heap, so "greater" puts the lowest (rank, pos) on top.
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  auto& heap = s.heap;
  heap.clear();
  auto push = [&](int32_t pos, int32_t right) {
    if (const MergeTable::Merge* m = merges.find(sym[pos], sym[right])) {
      heap.push_back({m->rank, pos, m->merged_id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    if (sym[top.pos] < 0) continue;
    const int32_t right = s.next[top.pos];
    if (right < 0) continue;
    // A candidate is stale when either side has changed since it was queued; the merged id
    // tells, because a token's string (hence id) changes whenever a symbol grows.
    const MergeTable::Merge* m = merges.find(sym[top.pos], sym[right]);
    if (!m || m->merged_id != top.merged_id) continue;
    sym[top.pos] = top.merged_id;
    sym[right] = -1;
    s.next[top.pos] = s.next[right];
    if (s.next[right] >= 0) s.prev[s.next[right]] = top.pos;
    if (s.prev[top.pos] >= 0) push(s.prev[top.pos], top.pos);
    if (s.next[top.pos] >= 0) push(top.pos, s.next[top.pos]);
  }
  sym.erase(std::remove(sym.begin(), sym.end(), -1), sym.end());
}

void BpeModel::encode_word(std::string_view word, BpeScratch& scratch,
                           std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = vocab.find(word);
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  initial_symbols(word, scratch.symbols);
  if (scratch.symbols.size() > 1) {
    if (scratch.symbols.size() <= kShortWord) {
      merge_short(scratch);
    } else {
      merge_long(scratch);
    }
  }
  out.insert(out.end(), scratch.symbols.begin(), scratch.symbols.end());
}

}  // namespace sbp::tokenizer_detail

#include "dist/rank_agreement.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <span>

namespace sbp {

namespace {

// Values longer than this, or with bytes that would break the one-line message (control
// characters, anything outside printable ASCII), are shown as their digest.
constexpr size_t kShownValueChars = 100;

std::string shown(const std::string& v) {
  bool plain = v.size() <= kShownValueChars;
  for (unsigned char ch : v) plain = plain && ch >= 0x20 && ch < 0x7f;
  if (plain) return v.empty() ? "\"\"" : v;
  return "digest " + hex_digest(fnv1a64(v.data(), v.size()));
}

const std::string* find(const std::vector<AgreedSetting>& s, const std::string& key) {
  for (const AgreedSetting& e : s)
    if (e.key == key) return &e.value;
  return nullptr;
}

bool same(const AgreedSetting& a, const AgreedSetting& b) {
  return a.key == b.key && a.value == b.value;
}

void put_length(std::string& out, size_t n) {
  out += std::to_string(n);
  out += ':';
}

// A length-prefixed field of `text` at `at` ("<decimal length>:<bytes>").
std::string take_field(const std::string& text, size_t& at) {
  const size_t colon = text.find(':', at);
  if (colon == std::string::npos || colon == at || colon - at > 19)
    throw Error("rank agreement: malformed settings list at byte " + std::to_string(at));
  size_t n = 0;
  for (size_t i = at; i < colon; ++i) {
    if (text[i] < '0' || text[i] > '9')
      throw Error("rank agreement: malformed settings list at byte " + std::to_string(i));
    n = n * 10 + static_cast<size_t>(text[i] - '0');
  }
  if (n > text.size() - colon - 1)
    throw Error("rank agreement: settings list cut short at byte " + std::to_string(colon));
  at = colon + 1 + n;
  return text.substr(colon + 1, n);
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::string hex_digest(uint64_t x) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

uint64_t settings_digest(const std::vector<AgreedSetting>& s) {
  const std::string text = encode_settings(s);  // lengths included: "ab"+"c" != "a"+"bc"
  return fnv1a64(text.data(), text.size());
}

std::string encode_settings(const std::vector<AgreedSetting>& s) {
  std::string out;
  for (const AgreedSetting& e : s) {
    put_length(out, e.key.size());
    out += e.key;
    put_length(out, e.value.size());
    out += e.value;
  }
  return out;
}

std::vector<AgreedSetting> decode_settings(const std::string& text) {
  std::vector<AgreedSetting> s;
  size_t at = 0;
  while (at < text.size()) {
    AgreedSetting e;
    e.key = take_field(text, at);
    if (at >= text.size())
      throw Error("rank agreement: settings list ends after key '" + e.key + "'");
    e.value = take_field(text, at);
    s.push_back(std::move(e));
  }
  return s;
}

std::optional<std::string> first_disagreement(
    const std::vector<std::vector<AgreedSetting>>& lists) {
  if (lists.size() < 2) return std::nullopt;
  const std::vector<AgreedSetting>& zero = lists[0];
  size_t longest = 0;
  for (const auto& l : lists) longest = std::max(longest, l.size());
  for (size_t i = 0; i < longest; ++i) {
    for (size_t r = 1; r < lists.size(); ++r) {
      const std::vector<AgreedSetting>& other = lists[r];
      const bool in_zero = i < zero.size(), in_other = i < other.size();
      if (in_zero && in_other && same(zero[i], other[i])) continue;
      // The key: rank 0's here, unless both ranks hold it alike elsewhere (an entry the other
      // rank lacks was inserted before it): then the other rank's.
      std::string key = in_zero ? zero[i].key : other[i].key;
      const std::string* a = find(zero, key);
      const std::string* b = find(other, key);
      if (a && b && *a == *b && in_other) {
        key = other[i].key;
        a = find(zero, key);
        b = find(other, key);
      }
      return "ranks disagree on " + key + " (rank 0: " + (a ? shown(*a) : "(none)") + ", rank " +
             std::to_string(r) + ": " + (b ? shown(*b) : "(none)") + ")";
    }
  }
  return std::nullopt;
}

void check_ranks_agree(Communicator& comm, const std::vector<AgreedSetting>& mine) {
  if (comm.size() < 2) return;
  // A fixed-size first exchange, the same on every rank whatever its settings: the maximum of
  // (digest, count) and of their negations is this rank's own on every rank exactly when all
  // ranks hold the same. The digest is split in 32-bit halves so that negation cannot overflow.
  const uint64_t d = settings_digest(mine);
  const int64_t hi = static_cast<int64_t>(d >> 32), lo = static_cast<int64_t>(d & 0xffffffffu);
  const int64_t n = static_cast<int64_t>(mine.size());
  const std::array<int64_t, 3> own = {hi, lo, n};
  std::array<int64_t, 6> v = {hi, lo, n, -hi, -lo, -n};
  comm.max(std::span<int64_t>(v));
  bool agree = true;
  for (size_t j = 0; j < own.size(); ++j) agree = agree && v[j] == own[j] && -v[j + 3] == own[j];
  if (agree) return;  // the same answer on every rank: max == min everywhere
  // They differ (every rank knows it): every rank's list, so that each can name the same key.
  const std::vector<std::string> all = comm.allgather(encode_settings(mine));
  std::vector<std::vector<AgreedSetting>> lists;
  for (const std::string& text : all) lists.push_back(decode_settings(text));
  const std::optional<std::string> msg = first_disagreement(lists);
  // Equal lists with different digests cannot happen; say so rather than run on.
  throw RanksDisagree(msg ? *msg : "ranks disagree on their settings (the digests differ)");
}

}  // namespace sbp

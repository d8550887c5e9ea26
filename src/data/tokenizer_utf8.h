#pragma once
// UTF-8 and character-class helpers for the tokenizer, plus GPT-2's byte-level alphabet.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sbp::tokenizer_detail {

// Length of the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte).
inline size_t utf8_char_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

// Decodes the code point starting at s[i] of a valid UTF-8 string and moves i past it.
char32_t utf8_next(std::string_view s, size_t& i);
// Decodes the code point that ends at s[end] (exclusive) of a valid UTF-8 string; sets `begin`.
char32_t utf8_prev(std::string_view s, size_t end, size_t& begin);
void utf8_append(std::string& out, char32_t cp);

// Byte offset of the first byte that does not start a well-formed UTF-8 sequence, or npos.
size_t utf8_find_invalid(std::string_view s);

// Replaces every maximal ill-formed subsequence with one U+FFFD (the Unicode "maximal subpart"
// practice, which is what Rust's String::from_utf8_lossy does, so decode output matches).
std::string utf8_repair(std::string_view bytes);

// Unicode White_Space, the set Rust's char::is_whitespace uses (lstrip / rstrip of added tokens).
bool is_white_space(char32_t cp);
// A character of the Rust regex crate's \w (Alphabetic, marks, decimal digits, connector
// punctuation, Join_Control): what the single_word rule of added tokens looks for on either side.
bool is_word_char(char32_t cp);

// The character classes the library's normalizers and pre-tokenizers test, by general category
// (utf8proc's tables stand in for Rust's).
bool is_other(char32_t cp);            // Cc, Cf, Cs, Co (not unassigned: the library's crate)
bool is_mark(char32_t cp);             // M*: StripAccents' combining marks
bool is_nonspacing_mark(char32_t cp);  // Mn: what BertNormalizer's strip_accents drops
bool is_numeric(char32_t cp);          // N*: Rust's char::is_numeric (Digits)
bool is_punctuation(char32_t cp);      // ASCII punctuation or P* (Punctuation, Bert)
// Appends Rust's char::to_lowercase(cp): the simple mapping, except U+0130 -> "i\u0307".
void append_lowercase(std::string& out, char32_t cp);

// GPT-2's reversible byte <-> printable character map: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order. Every such code point is < 0x144.
struct ByteLevelAlphabet {
  static constexpr char32_t kMaxCodePoint = 0x144;
  char32_t byte_to_cp[256];
  std::string byte_to_utf8[256];
  int16_t cp_to_byte[kMaxCodePoint];  // -1: not a byte-level character
};
const ByteLevelAlphabet& byte_level_alphabet();

}  // namespace sbp::tokenizer_detail

#include "data/masked_encoding.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace sbp {

namespace {

// GPT-2's byte-level alphabet: bytes 33-126, 161-172 and 174-255 are their own code points, the
// other 68 bytes are U+0100..U+0143. A token string made only of these characters stands for one
// byte per character.
bool in_byte_level_alphabet(uint32_t cp) {
  return (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 323);
}

// Bytes a token stands for, as the ByteLevel decoder sees it: one per character when every
// character is in the alphabet, else the token's own UTF-8 (an added token such as "<|im_end|>"
// would count the same either way; one with other characters is its raw text).
int32_t token_byte_length(const std::string& token) {
  int32_t chars = 0;
  for (size_t i = 0; i < token.size();) {
    const auto c = static_cast<unsigned char>(token[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : 4;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1fu) : len == 3 ? (c & 0x0fu) : (c & 0x07u);
    for (size_t k = 1; k < len && i + k < token.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(token[i + k]) & 0x3fu);
    if (!in_byte_level_alphabet(cp)) return static_cast<int32_t>(token.size());
    ++chars;
    i += len;
  }
  return chars;
}

}  // namespace

MaskedEncoder::MaskedEncoder(Tokenizer tok) : tok_(std::move(tok)) {
  // SentencePiece-style tokenizers (Gemma) know their own token lengths ("▁" is one space).
  if (std::optional<std::vector<int32_t>> lengths = tok_.sentencepiece_text_lengths()) {
    byte_len_ = std::move(*lengths);
    return;
  }
  const int64_t vocab = tok_.vocab_size();
  byte_len_.assign(static_cast<size_t>(vocab), -1);
  for (int64_t id = 0; id < vocab; ++id) {
    try {
      const std::string token = tok_.id_to_token(static_cast<int32_t>(id));
      byte_len_[static_cast<size_t>(id)] = tok_.is_special(static_cast<int32_t>(id))
                                               ? static_cast<int32_t>(token.size())
                                               : token_byte_length(token);
    } catch (const InputError&) {
      // an id with no token (a gap in the vocabulary) never comes out of encode
    }
  }
}

MaskedTokens MaskedEncoder::encode(std::string_view text,
                                   std::span<const std::pair<size_t, size_t>> trained) const {
  MaskedTokens out;
  out.ids = tok_.encode(text);
  out.mask.assign(out.ids.size(), 0.0f);
  size_t offset = 0, range = 0;
  for (size_t k = 0; k < out.ids.size(); ++k) {
    const int32_t len = byte_len_[static_cast<size_t>(out.ids[k])];
    if (len < 0) return encode_by_ranges(text, trained);
    const size_t begin = offset, end = offset + static_cast<size_t>(len);
    while (range < trained.size() && trained[range].second <= begin) ++range;
    // Touches a trained range: [begin, end) overlaps [b, e), or is an empty token inside it.
    if (range < trained.size() && trained[range].first < std::max(end, begin + 1) &&
        begin < trained[range].second) {
      out.mask[k] = 1.0f;
    }
    offset = end;
  }
  if (offset != text.size()) return encode_by_ranges(text, trained);
  return out;
}

MaskedTokens MaskedEncoder::encode_by_ranges(
    std::string_view text, std::span<const std::pair<size_t, size_t>> trained) const {
  MaskedTokens out;
  out.exact = false;
  auto piece = [&](size_t b, size_t e, float m) {
    if (e <= b) return;
    const std::vector<int32_t> ids = tok_.encode(text.substr(b, e - b));
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.mask.insert(out.mask.end(), ids.size(), m);
  };
  size_t at = 0;
  for (const auto& [b, e] : trained) {
    piece(at, b, 0.0f);
    piece(b, e, 1.0f);
    at = e;
  }
  piece(at, text.size(), 0.0f);
  return out;
}

}  // namespace sbp

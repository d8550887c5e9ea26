// Encoding and decoding with a loaded tokenizer (loading is in tokenizer_load.cpp).
#include "data/tokenizer.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "data/tokenizer_impl.h"
#include "data/tokenizer_utf8.h"

namespace sbp {

using namespace tokenizer_detail;

namespace tokenizer_detail {

void TokenizerImpl::finish() {
  model.build_char_table();

  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const AddedToken& t : added_tokens) {
    if (t.normalized) {
      // A normalized token is looked for in normalized text, so its pattern is normalized too.
      std::string buffer;
      normalized.push_back(t);
      normalized_patterns.emplace_back(normalizer.apply(t.content, buffer));
    } else {
      raw.push_back(t);
      raw_patterns.push_back(t.content);
    }
  }
  raw_matcher.build(raw, raw_patterns);
  normalized_matcher.build(normalized, normalized_patterns);

  int64_t size = 0;
  for (const auto& [token, id] : model.vocab) size = std::max<int64_t>(size, int64_t{id} + 1);
  for (const AddedToken& t : added_tokens) size = std::max<int64_t>(size, int64_t{t.id} + 1);
  id_to_token.assign(static_cast<size_t>(size), std::string());
  has_token.assign(static_cast<size_t>(size), 0);
  special.assign(static_cast<size_t>(size), 0);
  for (const auto& [token, id] : model.vocab) {
    id_to_token[id] = token;
    has_token[id] = 1;
  }
  for (const AddedToken& t : added_tokens) {
    // The library maps the id of a normalized added token back to its normalized form (while
    // token_to_id still takes the content as written); decode follows it.
    std::string buffer;
    id_to_token[t.id] = t.normalized ? std::string(normalizer.apply(t.content, buffer)) : t.content;
    has_token[t.id] = 1;
    special[t.id] = t.special ? 1 : 0;
    added_to_id.emplace(t.content, t.id);
  }

  if (decoder == DecoderKind::ByteLevel) {
    // A token made only of byte-level characters decodes to those bytes; any other token
    // (e.g. an added token with a character outside the alphabet) decodes to its own UTF-8.
    const ByteLevelAlphabet& alphabet = byte_level_alphabet();
    decoded_bytes.assign(static_cast<size_t>(size), std::string());
    for (size_t id = 0; id < id_to_token.size(); ++id) {
      const std::string& token = id_to_token[id];
      std::string bytes;
      bool all_mapped = true;
      for (size_t i = 0; i < token.size() && all_mapped;) {
        const char32_t cp = utf8_next(token, i);
        const int b = cp < ByteLevelAlphabet::kMaxCodePoint ? alphabet.cp_to_byte[cp] : -1;
        if (b < 0) all_mapped = false;
        bytes += static_cast<char>(b);
      }
      decoded_bytes[id] = all_mapped ? bytes : token;
    }
  }
}

}  // namespace tokenizer_detail

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  const TokenizerImpl& t = *impl_;
  if (const size_t bad = utf8_find_invalid(text); bad != std::string_view::npos) {
    throw InputError("tokenizer: text is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 1);
  BpeScratch scratch;
  const std::function<void(std::string_view)> emit = [&](std::string_view pre_token) {
    t.model.encode_word(pre_token, scratch, ids);
  };

  // The library's order: added tokens in the raw text, then per remaining piece: normalize,
  // added tokens in the normalized text, pre-tokenize, BPE.
  std::vector<Segment> raw_segments, normalized_segments;
  if (t.raw_matcher.empty()) {
    if (!text.empty()) raw_segments.push_back({0, text.size(), -1});
  } else {
    t.raw_matcher.split(text, allow_special, raw_segments);
  }
  std::string buffer;
  for (const Segment& raw : raw_segments) {
    if (raw.token_id >= 0) {
      ids.push_back(raw.token_id);
      continue;
    }
    const std::string_view piece =
        t.normalizer.apply(text.substr(raw.begin, raw.end - raw.begin), buffer);
    // Metaspace's "first" scheme needs to know which piece starts the original text. (The
    // loader refuses normalizers that could delete leading text, which would move that start.)
    const bool starts_text = raw.begin == 0;
    if (t.normalized_matcher.empty()) {
      t.pre_tokenizer.run(piece, starts_text, emit);
      continue;
    }
    normalized_segments.clear();
    t.normalized_matcher.split(piece, allow_special, normalized_segments);
    for (const Segment& s : normalized_segments) {
      if (s.token_id >= 0) {
        ids.push_back(s.token_id);
      } else {
        t.pre_tokenizer.run(piece.substr(s.begin, s.end - s.begin), starts_text && s.begin == 0,
                            emit);
      }
    }
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const TokenizerImpl& t = *impl_;
  std::string out;
  std::vector<std::string> tokens;  // DecoderKind::Chain
  bool first = true;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || !t.has_token[id]) {
      throw InputError("tokenizer: token id " + std::to_string(id) +
                       (id >= 0 && id < vocab_size() ? " has no token"
                                                     : " is out of range (vocab size " +
                                                           std::to_string(vocab_size()) + ")"));
    }
    if (skip_special && t.special[id]) continue;
    if (t.decoder == DecoderKind::ByteLevel) {
      out += t.decoded_bytes[id];
    } else if (t.decoder == DecoderKind::Chain) {
      tokens.push_back(t.id_to_token[id]);
    } else {
      // Without a decoder the library joins the tokens with spaces.
      if (!first) out += ' ';
      out += t.id_to_token[id];
    }
    first = false;
  }
  if (t.decoder == DecoderKind::Chain) return decode_chain(t.decoder_steps, tokens);
  return t.decoder == DecoderKind::ByteLevel ? utf8_repair(out) : out;
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->id_to_token.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_to_id.find(token); it != impl_->added_to_id.end()) return it->second;
  if (auto it = impl_->model.vocab.find(token); it != impl_->model.vocab.end()) return it->second;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !impl_->has_token[id]) {
    throw InputError("tokenizer: token id " + std::to_string(id) + " has no token (vocab size " +
                     std::to_string(vocab_size()) + ")");
  }
  return impl_->id_to_token[id];
}

std::optional<std::vector<int32_t>> Tokenizer::sentencepiece_text_lengths() const {
  const TokenizerImpl& t = *impl_;
  if (!t.model.byte_fallback || t.decoder != DecoderKind::Chain) return std::nullopt;
  // The one character that stands for a space in tokens; "" while none is known.
  std::string space;
  for (const NormalizerStep& n : t.normalizer.steps) {
    if (n.kind != NormalizerStep::Kind::Replace || n.pattern != " " || !space.empty())
      return std::nullopt;
    space = n.content;
  }
  for (const PreTokenizerStep& p : t.pre_tokenizer.steps) {
    // Splitting keeps every byte unless the delimiters are removed (UnicodeScripts drops a
    // leading ' ', so it does not count).
    using Kind = PreTokenizerStep::Kind;
    const bool keeps_bytes = ((p.kind == Kind::Split || p.kind == Kind::CharSplit) &&
                              p.behavior != SplitBehavior::Removed) ||
                             p.kind == Kind::FixedLength;
    if (keeps_bytes) continue;
    if (p.kind != PreTokenizerStep::Kind::Metaspace || p.prepend != PrependScheme::Never ||
        (!space.empty() && space != p.replacement))
      return std::nullopt;
    space = p.replacement;
  }
  size_t space_chars = 0;
  if (!space.empty()) {
    size_t i = 0;
    utf8_next(space, i);
    if (i != space.size()) return std::nullopt;  // a multi-character replacement
    space_chars = 1;
  }
  std::vector<int32_t> out(t.id_to_token.size(), -1);
  for (const auto& [token, id] : t.model.vocab) {
    int64_t n = 0;
    for (size_t i = 0; i < token.size();) {
      const size_t at = i;
      utf8_next(token, i);
      const bool is_space = space_chars && token.compare(at, i - at, space) == 0;
      n += is_space ? 1 : static_cast<int64_t>(i - at);
    }
    out[static_cast<size_t>(id)] = static_cast<int32_t>(n);
  }
  for (int b = 0; b < 256; ++b)
    if (t.model.byte_id[static_cast<size_t>(b)] >= 0)
      out[static_cast<size_t>(t.model.byte_id[static_cast<size_t>(b)])] = 1;
  // A byte token that a merge can also build (from the text "<0x41>") covers 6 bytes there.
  for (const int32_t merged : t.model.merges.merged_ids()) {
    for (int b = 0; b < 256; ++b)
      if (t.model.byte_id[static_cast<size_t>(b)] == merged) out[static_cast<size_t>(merged)] = -1;
  }
  if (t.model.unk_id) out[static_cast<size_t>(*t.model.unk_id)] = -1;
  for (const AddedToken& a : t.added_tokens)
    out[static_cast<size_t>(a.id)] = static_cast<int32_t>(a.content.size());
  return out;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}

}  // namespace sbp

#pragma once
// The loaded state behind sbp::Tokenizer (shared, immutable after loading) and the encoding
// pipeline's internals. Only tokenizer*.cpp include this.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer_added.h"
#include "data/tokenizer_bpe.h"
#include "data/tokenizer_decoder.h"
#include "data/tokenizer_normalize.h"
#include "data/tokenizer_pretokenize.h"

namespace sbp::tokenizer_detail {

// None: tokens joined by spaces. ByteLevel: bytes back from the byte-level alphabet. Chain: the
// SentencePiece-style steps in decoder_steps (a Sequence, or a single one of them).
enum class DecoderKind { None, ByteLevel, Chain };

struct TokenizerImpl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  DecoderKind decoder = DecoderKind::None;
  std::vector<DecoderStep> decoder_steps;  // DecoderKind::Chain

  std::vector<AddedToken> added_tokens;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized=false, found in raw text
  AddedTokenMatcher normalized_matcher;  // normalized=true ones, found after normalization
  TokenMap added_to_id;

  // Indexed by id, 0 .. vocab_size-1 (a gap in the ids has has_token = 0).
  std::vector<std::string> id_to_token;
  std::vector<uint8_t> has_token;
  std::vector<uint8_t> special;
  std::vector<std::string> decoded_bytes;  // ByteLevel decoder: the raw bytes each token stands for

  // Builds the matchers and per-id tables once vocab, merges and added tokens are in place.
  void finish();
};

}  // namespace sbp::tokenizer_detail

#pragma once
// A Hugging Face `tokenizer.json` tokenizer (byte-level BPE as used by Qwen, GPT-2, Llama 3, ...;
// SentencePiece-style BPE with byte fallback as used by Gemma, Llama 2, Mistral), matching the
// `tokenizers` library id for id: encode(text) here equals
// `Tokenizer.encode(text, add_special_tokens=False).ids` there, and decode equals its decode.
//
// The pipeline, as in the library: added tokens are cut out of the raw text first; the pieces in
// between are normalized, split into pre-tokens and each pre-token is run through BPE; decoding
// runs the decoder's steps over the tokens. Every normalizer, pre-tokenizer and decoder type the
// library has for BPE models is supported, in any Sequence, except the Precompiled normalizer;
// docs/TOKENIZER.md lists them and the few combinations refused. Anything unsupported in a
// tokenizer.json is rejected with an InputError naming the file and the field.
//
// A Tokenizer is immutable after loading; copies share the loaded tables, and every const method
// may be called from several threads at once.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sbp {

namespace tokenizer_detail {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // Loads a tokenizer.json. Throws InputError naming the file and the field when it is malformed
  // or uses a component this implementation does not support.
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  // Loads dir/tokenizer.json; a directory with only GPT-2's encoder.json + vocab.bpe is loaded
  // with from_gpt2_files.
  static Tokenizer from_dir(const std::string& dir);
  // Builds GPT-2's tokenizer from the original OpenAI files, exactly as the `tokenizers` library
  // does with BPE.from_file(encoder.json, vocab.bpe), a ByteLevel pre-tokenizer
  // (add_prefix_space=false), a ByteLevel decoder and <|endoftext|> as a special added token.
  static Tokenizer from_gpt2_files(const std::string& encoder_json_path,
                                   const std::string& vocab_bpe_path);

  // Text (UTF-8) to token ids. With allow_special = false, added tokens marked special
  // (<|im_start|>, <|endoftext|>, ...) are not recognised and are tokenized as plain text, as the
  // library does with encode_special_tokens=True; non-special added tokens still match.
  // Throws InputError if the text is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;

  // Token ids to text. Bytes that do not form valid UTF-8 (a cut multi-byte character) become
  // U+FFFD, as in the library. Throws InputError naming the first id that has no token.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  int64_t vocab_size() const;  // largest id + 1, added tokens included
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // throws InputError for an id without a token
  bool is_special(int32_t id) const;

  // For every id, how many bytes of the text given to encode() the token covers, when a token
  // says so on its own: SentencePiece-style tokenizers whose only normalizer is
  // Replace(" " -> one character) (Gemma) or that have none, with no ByteLevel and no Metaspace
  // that prepends. There a "▁" stands for one space, <0xNN> for one byte, an added token for its
  // content, anything else for its own UTF-8. -1 for ids whose cover varies (<unk>, a byte token
  // some merge also builds, gaps). nullopt for other tokenizers (byte-level ones included).
  std::optional<std::vector<int32_t>> sentencepiece_text_lengths() const;

 private:
  explicit Tokenizer(std::shared_ptr<const tokenizer_detail::TokenizerImpl> impl);
  std::shared_ptr<const tokenizer_detail::TokenizerImpl> impl_;
};

}  // namespace sbp

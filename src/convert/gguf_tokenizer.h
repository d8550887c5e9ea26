#pragma once
// Tokenizers between GGUF metadata (tokenizer.ggml.*) and Hugging Face files.
//
// GGUF -> HF: tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, merges, token types, the
// pre-tokenizer named by tokenizer.ggml.pre) becomes a tokenizer.json with a BPE model, the
// pre-tokenizer llama.cpp runs for that name, a ByteLevel decoder, and every control token
// (token type 3) and user-defined token (type 4) as an added token; tokenizer.ggml.model
// "llama" (SentencePiece: tokens, scores, types with <0xNN> byte tokens) becomes a BPE with
// byte_fallback whose merges are built from the scores as transformers does (every split of a
// token into two tokens, ordered by the whole token's score). tokenizer_config.json carries the
// special tokens, add_bos_token / add_eos_token and tokenizer.chat_template.
//
// HF -> GGUF: a byte-level BPE tokenizer.json (the families this engine trains) to
// tokenizer.ggml.* with the pre-tokenizer's llama.cpp name, and tokenizer_config.json's special
// tokens and chat template.
#include <string>
#include <utility>
#include <vector>

#include "model/gguf_file.h"

namespace sbp {

struct HfTokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};

// InputError naming the file and the key when the metadata is missing, malformed or of a kind
// not supported. `max_len`: model_max_length (the context length).
HfTokenizerFiles gguf_tokenizer_to_hf(const GgufFile& f, int64_t max_len);

// tokenizer.ggml.* and tokenizer.chat_template from a model directory's tokenizer.json and
// tokenizer_config.json; `vocab_size` is the embedding's row count (tokens past the tokenizer's
// are filled with "[PAD<i>]" as llama.cpp's converter does).
std::vector<std::pair<std::string, GgufValue>> hf_tokenizer_to_gguf(const std::string& dir,
                                                                    int64_t vocab_size);

}  // namespace sbp

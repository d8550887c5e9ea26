#pragma once
// Prompts for generation: a prompt's text or conversation to the token ids the policy continues,
// as the trainer encodes the prompt part of a record (example_encoder.h): a conversation is
// rendered by the chat template with the generation prompt ("<|im_start|>assistant\n", ...);
// plain text is [bos] + text, bos as the trainer decides it (tokenizer_config.json's
// add_bos_token, else on for Llama 3 templates). Also what ends a completion: the eos token and
// the template's end-of-turn token.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "data/records.h"
#include "data/tokenizer.h"

namespace sbp {

class PromptEncoder {
 public:
  // Loads dir's tokenizer.json and tokenizer_config.json; `chat` overrides the template the
  // config carries, `add_bos` the bos decision for plain text (data/template_choice.h: the
  // trainer's rules). Throws InputError naming the file.
  static PromptEncoder from_dir(const std::string& dir, std::optional<ChatTemplate> chat = {},
                                std::optional<bool> add_bos = {});

  // Throws InputError prefixed by `where` for a conversation without a chat template.
  std::vector<int32_t> encode(const TextOrChat& prompt, const std::string& where) const;
  // Completion text: special tokens (eos, end of turn) and ids past the tokenizer's vocabulary
  // (a model's padding rows) left out.
  std::string decode(const std::vector<int32_t>& ids) const;
  // GenerationConfig::stop_after for stop strings: true once the completion's text contains one
  // of `stops` (empty strings ignored); an empty function when there are none. Only the
  // completion's last (longest stop + 2) tokens are decoded per call: a stop string that the
  // newest token completes lies within them (every token but a special one adds at least a
  // byte), so a check per new token costs O(1), not O(length). The function refers to this
  // encoder, which must outlive it.
  std::function<bool(std::span<const int32_t>)> stop_strings(std::vector<std::string> stops) const;
  // eos and the chat template's end-of-turn token, those the vocabulary has.
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  const Tokenizer& tokenizer() const { return tok_; }
  // The bos token plain text starts with (none when the tokenizer's rules add none).
  std::optional<int32_t> bos() const { return bos_; }

 private:
  PromptEncoder(Tokenizer tok) : tok_(std::move(tok)) {}
  Tokenizer tok_;
  std::optional<ChatTemplate> chat_;
  std::optional<int32_t> bos_;
  std::vector<int32_t> stop_ids_;
  std::string source_;
};

}  // namespace sbp

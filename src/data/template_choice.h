#pragma once
// What a tokenizer directory implies for rendering prompts, decided in one place for the trainer
// (train/train_data.cpp) and for generation (data/prompt_encoder.h): the chat template (a named
// one, else the one tokenizer_config.json / chat_template.jinja carries, with the tokenizer's
// bos token) and whether plain text starts with bos.
#include <optional>
#include <string>

#include "data/chat_template.h"
#include "data/hf_tokenizer_config.h"

namespace sbp {

struct TemplateChoice {
  std::optional<ChatTemplate> chat;
  std::string source;  // "named" when given, else the file it was detected in ("" if none)
};

// `named` wins; else detected from `hf` (read from `dir`). The tokenizer's bos_token is set on it.
TemplateChoice choose_chat_template(const HfTokenizerConfig& hf, const std::string& dir,
                                    std::optional<ChatTemplate> named);

// Plain text starts with bos when `override` says so, else as tokenizer_config.json's
// add_bos_token says, else only under a Llama 3 template (whose tokenizer adds it).
bool plain_text_wants_bos(const HfTokenizerConfig& hf, const std::optional<ChatTemplate>& chat,
                          std::optional<bool> override);

}  // namespace sbp

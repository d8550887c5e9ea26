#pragma once
// Records to token sequences with their loss masks (HF `labels` semantics: mask[t] weights the
// prediction of token t).
//
//   conversations      rendered by the chat template; trained = the assistant turns the
//                      template renderer marks (all of them for "messages", the completion's for
//                      prompt/completion, chosen, rejected)
//   plain text         [bos] prompt completion [eos]; trained = completion + eos (all of "text")
//
// bos is prepended to plain text only (chat templates write their own); eos is appended to plain
// text only (chat templates end turns with their own end-of-turn token), as TRL does.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "data/masked_encoding.h"
#include "data/records.h"

namespace sbp {

struct TokenizedSequence {
  std::vector<int32_t> ids;
  std::vector<float> mask;  // (ids) 1 on trained tokens
  bool exact = true;        // false: tokenized range by range (see masked_encoding.h)
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  // Tokens that are predicted with weight (the first token has no predecessor).
  int64_t loss_tokens() const;
};

struct PlainTextTokens {
  std::optional<int32_t> bos;  // prepended to plain-text sequences when set
  std::optional<int32_t> eos;  // appended (and trained) when set
  std::string eos_problem;     // non-empty: eos is wanted but unknown; plain text fails with this
};

class ExampleEncoder {
 public:
  // `chat` may be empty when the tokenizer has no template: conversations then fail with
  // `no_chat_reason`.
  ExampleEncoder(MaskedEncoder encoder, std::optional<ChatTemplate> chat, PlainTextTokens plain,
                 std::string no_chat_reason = "no chat template");

  // 1 sequence for messages, prompt_completion, text and rollout records; 2 (chosen, rejected)
  // for preference records.
  std::vector<TokenizedSequence> encode(const Record& r) const;

  const std::optional<ChatTemplate>& chat_template() const { return chat_; }
  const MaskedEncoder& encoder() const { return encoder_; }

 private:
  TokenizedSequence conversation(const std::vector<ChatMessage>& msgs, size_t train_from) const;
  TokenizedSequence plain(const std::string& prompt, const std::string& completion) const;
  TokenizedSequence prompt_and_completion(const TextOrChat& prompt,
                                          const TextOrChat& completion) const;

  MaskedEncoder encoder_;
  std::optional<ChatTemplate> chat_;
  PlainTextTokens plain_;
  std::string no_chat_reason_;
};

}  // namespace sbp

#include "data/example_encoder.h"

#include "core/error.h"

namespace sbp {

int64_t TokenizedSequence::loss_tokens() const {
  int64_t n = 0;
  for (size_t t = 1; t < mask.size(); ++t) n += mask[t] > 0.0f;
  return n;
}

ExampleEncoder::ExampleEncoder(MaskedEncoder encoder, std::optional<ChatTemplate> chat,
                               PlainTextTokens plain, std::string no_chat_reason)
    : encoder_(std::move(encoder)),
      chat_(std::move(chat)),
      plain_(std::move(plain)),
      no_chat_reason_(std::move(no_chat_reason)) {}

TokenizedSequence ExampleEncoder::conversation(const std::vector<ChatMessage>& msgs,
                                               size_t train_from) const {
  if (!chat_) throw InputError(no_chat_reason_);
  RenderOptions opts;
  opts.train_from = train_from;
  const RenderedChat r = render_chat(*chat_, msgs, opts);
  MaskedTokens t = encoder_.encode(r.text, r.trained);
  return TokenizedSequence{std::move(t.ids), std::move(t.mask), t.exact};
}

TokenizedSequence ExampleEncoder::plain(const std::string& prompt,
                                        const std::string& completion) const {
  if (!plain_.eos_problem.empty()) throw InputError(plain_.eos_problem);
  const std::string text = prompt + completion;
  const std::pair<size_t, size_t> trained{prompt.size(), text.size()};
  MaskedTokens t = encoder_.encode(text, std::span(&trained, completion.empty() ? 0 : 1));
  TokenizedSequence s;
  s.exact = t.exact;
  if (plain_.bos) {
    s.ids.push_back(*plain_.bos);
    s.mask.push_back(0.0f);
  }
  s.ids.insert(s.ids.end(), t.ids.begin(), t.ids.end());
  s.mask.insert(s.mask.end(), t.mask.begin(), t.mask.end());
  if (plain_.eos) {
    s.ids.push_back(*plain_.eos);
    s.mask.push_back(1.0f);
  }
  return s;
}

TokenizedSequence ExampleEncoder::prompt_and_completion(const TextOrChat& prompt,
                                                        const TextOrChat& completion) const {
  if (!prompt.is_chat) return plain(prompt.text, completion.text);
  std::vector<ChatMessage> all = prompt.messages;
  all.insert(all.end(), completion.messages.begin(), completion.messages.end());
  return conversation(all, prompt.messages.size());
}

std::vector<TokenizedSequence> ExampleEncoder::encode(const Record& r) const {
  switch (r.format) {
    case DataFormat::messages: return {conversation(r.messages, 0)};
    case DataFormat::text: return {plain("", r.text)};
    case DataFormat::prompt_completion:
    case DataFormat::unpaired_preference:
    case DataFormat::rollout: return {prompt_and_completion(r.prompt, r.completion)};
    case DataFormat::preference:
      return {prompt_and_completion(r.prompt, r.chosen),
              prompt_and_completion(r.prompt, r.rejected)};
  }
  return {};
}

}  // namespace sbp

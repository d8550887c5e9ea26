#include "data/prompt_encoder.h"

#include <algorithm>
#include <cstddef>

#include "data/hf_tokenizer_config.h"
#include "data/template_choice.h"

namespace sbp {

namespace {

// The token that ends an assistant turn in each family's rendering (chat_template.h).
const char* end_of_turn(ChatFamily f) {
  switch (f) {
    case ChatFamily::llama3:
    case ChatFamily::llama3_0: return "<|eot_id|>";
    case ChatFamily::gemma: return "<end_of_turn>";
    case ChatFamily::chatml:
    case ChatFamily::qwen3: return "<|im_end|>";
  }
  return "<|im_end|>";
}

}  // namespace

PromptEncoder PromptEncoder::from_dir(const std::string& dir, std::optional<ChatTemplate> chat,
                                      std::optional<bool> add_bos) {
  PromptEncoder p(Tokenizer::from_dir(dir));
  p.source_ = dir;
  const HfTokenizerConfig hf = HfTokenizerConfig::load_dir(dir);
  p.chat_ = choose_chat_template(hf, dir, std::move(chat)).chat;
  if (plain_text_wants_bos(hf, p.chat_, add_bos) && hf.bos_token)
    p.bos_ = p.tok_.token_to_id(*hf.bos_token);
  const auto add_stop = [&](const std::optional<std::string>& token) {
    if (!token) return;
    const std::optional<int32_t> id = p.tok_.token_to_id(*token);
    if (id && std::find(p.stop_ids_.begin(), p.stop_ids_.end(), *id) == p.stop_ids_.end())
      p.stop_ids_.push_back(*id);
  };
  add_stop(hf.eos_token);
  if (p.chat_) add_stop(std::string(end_of_turn(p.chat_->family)));
  return p;
}

std::vector<int32_t> PromptEncoder::encode(const TextOrChat& prompt,
                                           const std::string& where) const {
  if (prompt.is_chat) {
    if (!chat_)
      throw InputError(where + ": a conversation prompt needs a chat template, but " + source_ +
                       " has none (no chat_template in tokenizer_config.json)");
    RenderOptions opts;
    opts.add_generation_prompt = true;
    return tok_.encode(render_chat(*chat_, prompt.messages, opts).text);
  }
  std::vector<int32_t> ids;
  if (bos_) ids.push_back(*bos_);
  const std::vector<int32_t> text = tok_.encode(prompt.text);
  ids.insert(ids.end(), text.begin(), text.end());
  return ids;
}

std::string PromptEncoder::decode(const std::vector<int32_t>& ids) const {
  // A model's embedding is often padded past the tokenizer (vocab_size 151936 for 151669
  // tokens): a sampled padding id has no text, as in transformers' decode.
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < tok_.vocab_size()) known.push_back(id);
  return tok_.decode(known, /*skip_special=*/true);
}

std::function<bool(std::span<const int32_t>)> PromptEncoder::stop_strings(
    std::vector<std::string> stops) const {
  std::erase_if(stops, [](const std::string& s) { return s.empty(); });
  if (stops.empty()) return {};
  size_t longest = 0;
  for (const std::string& s : stops) longest = std::max(longest, s.size());
  const size_t tail = longest + 2;
  return [this, stops = std::move(stops), tail](std::span<const int32_t> ids) {
    const size_t from = ids.size() > tail ? ids.size() - tail : 0;
    const std::string text =
        decode(std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end()));
    for (const std::string& s : stops)
      if (text.find(s) != std::string::npos) return true;
    return false;
  };
}

}  // namespace sbp

#include "data/template_choice.h"

#include <filesystem>

namespace sbp {

TemplateChoice choose_chat_template(const HfTokenizerConfig& hf, const std::string& dir,
                                    std::optional<ChatTemplate> named) {
  TemplateChoice out;
  if (named) {
    out.chat = std::move(named);
    out.source = "named";
  } else if (!hf.chat_template.empty()) {
    const std::string file = hf.source.empty() ? dir + "/chat_template.jinja" : hf.source;
    out.chat = detect_chat_template(hf.chat_template, hf.source.empty() ? dir : hf.source);
    out.source = std::filesystem::path(file).filename().string();
  }
  if (out.chat && hf.bos_token) out.chat->bos_token = *hf.bos_token;
  return out;
}

bool plain_text_wants_bos(const HfTokenizerConfig& hf, const std::optional<ChatTemplate>& chat,
                          std::optional<bool> override) {
  const bool llama =
      chat && (chat->family == ChatFamily::llama3 || chat->family == ChatFamily::llama3_0);
  return override.value_or(hf.add_bos_token.value_or(llama));
}

}  // namespace sbp

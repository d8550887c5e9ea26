#pragma once
// The parts of a Hugging Face tokenizer_config.json (and chat_template.jinja) that training needs:
// the chat template and the special tokens around plain text.
#include <optional>
#include <string>

namespace sbp {

struct HfTokenizerConfig {
  std::string source;         // the file read, "" when the directory has none
  std::string chat_template;  // Jinja source, "" when there is none
  std::optional<std::string> bos_token, eos_token, pad_token;  // absent or null: nullopt
  std::optional<bool> add_bos_token, add_eos_token;

  // Reads dir/tokenizer_config.json (absent: an empty config) and, when that has no
  // chat_template, dir/chat_template.jinja (how transformers >= 4.47 saves it). A token may be a
  // string or an AddedToken object {"content": ...}; chat_template may be a string or a list of
  // {"name", "template"} (the one named "default" is used). Throws InputError naming the file.
  static HfTokenizerConfig load_dir(const std::string& dir);
};

}  // namespace sbp

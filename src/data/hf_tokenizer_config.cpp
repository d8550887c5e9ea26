#include "data/hf_tokenizer_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/untrusted_json.h"
#include "core/input_file.h"

namespace sbp {

namespace {

std::optional<std::string> token_field(const nlohmann::json& j, const char* key,
                                       const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw InputError(where + ": " + key + " must be a string, null or {\"content\": ...}");
}

std::optional<bool> bool_field(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) throw InputError(where + ": " + key + " must be true or false");
  return it->get<bool>();
}

}  // namespace

HfTokenizerConfig HfTokenizerConfig::load_dir(const std::string& dir) {
  HfTokenizerConfig c;
  const std::filesystem::path base(dir);
  const std::string config_path = (base / "tokenizer_config.json").string();
  if (std::filesystem::exists(config_path)) {
    c.source = config_path;
    nlohmann::json j;
    try {
      j = parse_untrusted_json(read_input_file(config_path), config_path);
    } catch (const nlohmann::json::exception& e) {  // also out_of_range: 1e999
      throw InputError(config_path + ": not valid JSON: " + e.what());
    }
    if (!j.is_object()) throw InputError(config_path + ": expected a JSON object");
    c.bos_token = token_field(j, "bos_token", config_path);
    c.eos_token = token_field(j, "eos_token", config_path);
    c.pad_token = token_field(j, "pad_token", config_path);
    c.add_bos_token = bool_field(j, "add_bos_token", config_path);
    c.add_eos_token = bool_field(j, "add_eos_token", config_path);
    if (auto it = j.find("chat_template"); it != j.end() && !it->is_null()) {
      if (it->is_string()) {
        c.chat_template = it->get<std::string>();
      } else if (it->is_array()) {
        for (const auto& t : *it) {
          if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
              t["template"].is_string())
            c.chat_template = t["template"].get<std::string>();
        }
        if (c.chat_template.empty())
          throw InputError(config_path + ": chat_template is a list without a \"default\" entry");
      } else {
        throw InputError(config_path + ": chat_template must be a string or a list");
      }
    }
  }
  const std::string jinja_path = (base / "chat_template.jinja").string();
  if (c.chat_template.empty() && std::filesystem::exists(jinja_path)) {
    c.chat_template = read_input_file(jinja_path);
  }
  return c;
}

}  // namespace sbp

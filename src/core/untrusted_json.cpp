#include "core/untrusted_json.h"

#include <iterator>

#include "core/error.h"

namespace sbp {

namespace {

// Offset of the bracket that opens level kMaxJsonDepth + 1, or npos.
size_t too_deep_at(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped byte cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

}  // namespace

void check_json_depth(std::string_view text, const std::string& where) {
  const size_t at = too_deep_at(text);
  if (at == std::string_view::npos) return;
  // Line and column as an editor counts them; a one-line text (a JSONL record, whose `where`
  // names the line already) gets the column alone.
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < at; ++i)
    if (text[i] == '\n') ++line, line_start = i + 1;
  const std::string column = "column " + std::to_string(at - line_start + 1);
  throw InputError(where + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                   " levels (at " + (line > 1 ? "line " + std::to_string(line) + ", " : "") +
                   column + ")");
}

nlohmann::json parse_untrusted_json(std::string_view text, const std::string& where) {
  check_json_depth(text, where);
  return nlohmann::json::parse(text);
}

nlohmann::json parse_untrusted_json(std::istream& in, const std::string& where) {
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_untrusted_json(text, where);
}

nlohmann::ordered_json parse_untrusted_ordered_json(
    std::string_view text, const std::string& where,
    nlohmann::ordered_json::parser_callback_t callback) {
  check_json_depth(text, where);
  return nlohmann::ordered_json::parse(text, std::move(callback));
}

nlohmann::json parse_untrusted_json_or_discarded(std::string_view text) {
  if (too_deep_at(text) != std::string_view::npos) return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace sbp

#pragma once
// The one reader for JSON that comes from outside: data files, prompt records, model, tokenizer
// and adapter files, safetensors headers, reward programs' answers, metrics files.
//
// Why a depth limit: nlohmann parses without recursion, but copying, comparing, dump() and
// our own walks of the parsed value recurse once per level, so a 200k-deep array in one field
// of a prompt record (400 KB) overflowed the stack in generate and GRPO, far from the read. The
// depth is bounded where the text enters, with an error that names where.
#include <istream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace sbp {

// The deepest nesting accepted. Real inputs stay far below: HF configs and tokenizer.json use
// about 5 levels, chat records 4, JSON-schema tool definitions about 20. 256 levels of any
// recursive walk of the parsed value take well under 1 MiB of stack, even in sanitizer builds
// and on worker threads, so every later copy, comparison and dump() is safe.
inline constexpr int kMaxJsonDepth = 256;

// Throws InputError "WHERE: JSON nested deeper than 256 levels (at line L, column C)" when an
// array or object in `text` opens below kMaxJsonDepth others. One linear pass over the bytes,
// strings skipped; text that is not JSON is left to the parser.
void check_json_depth(std::string_view text, const std::string& where);

// check_json_depth, then nlohmann::json::parse. Syntax errors stay nlohmann's json::exception
// (also out_of_range for 1e999), so each reader keeps its own wording for them.
nlohmann::json parse_untrusted_json(std::string_view text, const std::string& where);
nlohmann::json parse_untrusted_json(std::istream& in, const std::string& where);  // all of `in`
nlohmann::ordered_json parse_untrusted_ordered_json(
    std::string_view text, const std::string& where,
    nlohmann::ordered_json::parser_callback_t callback = nullptr);

// For readers that skip what they cannot use: a discarded value (is_discarded()) for text that
// is not JSON or is nested too deep.
nlohmann::json parse_untrusted_json_or_discarded(std::string_view text);

}  // namespace sbp

#pragma once
// The script of a code point, as the `tokenizers` library's UnicodeScripts pre-tokenizer sees it.
#include <cstdint>

namespace sbp::tokenizer_detail {

constexpr int32_t kScriptAny = 0;  // ' ' and code points outside the table: no script

// The library's fixed_script: its table's script, except ' ' (Any) and U+30FC, Hiragana and
// Katakana (all Han, so Japanese text stays one piece).
int32_t fixed_script(char32_t cp);

}  // namespace sbp::tokenizer_detail

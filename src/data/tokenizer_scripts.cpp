#include "data/tokenizer_scripts.h"

#include <algorithm>
#include <iterator>

namespace sbp::tokenizer_detail {

namespace {

struct ScriptRange {
  char32_t first, last;
  int32_t script;
};

#include "data/tokenizer_scripts_table.inc"

int32_t table_script(char32_t cp) {
  // The last range starting at or before cp.
  const auto* it = std::upper_bound(std::begin(kScriptRanges), std::end(kScriptRanges), cp,
                                    [](char32_t c, const ScriptRange& r) { return c < r.first; });
  if (it == std::begin(kScriptRanges)) return kScriptAny;
  --it;
  return cp <= it->last ? it->script : kScriptAny;
}

}  // namespace

int32_t fixed_script(char32_t cp) {
  if (cp == 0x30FC) return kScriptHan;
  if (cp == ' ') return kScriptAny;
  const int32_t script = table_script(cp);
  return script == kScriptHiragana || script == kScriptKatakana ? kScriptHan : script;
}

}  // namespace sbp::tokenizer_detail

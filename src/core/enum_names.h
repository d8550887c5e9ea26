#pragma once
// Closed sets of settings (objective kinds, loss types, schedules, chat templates, ...) are enums
// with one table of spellings each. A spelling is parsed once, where a config file or a command
// line is read, and printed back by name; nothing downstream compares strings.
//
//   constexpr EnumName<DpoLoss> kDpoLossNames[] = {{DpoLoss::sigmoid, "sigmoid"}, ...};
//   DpoLoss t = parse_enum<DpoLoss>(kDpoLossNames, "hinge", "DPO loss type");
//   enum_name<DpoLoss>(kDpoLossNames, t)  -> "hinge"
#include <span>
#include <string>

#include "core/error.h"

namespace sbp {

template <class E>
struct EnumName {
  E value;
  const char* name;
  bool alias = false;  // accepted when parsing, never printed (e.g. "true" for "group")
};

// "a, b or c": the table's names in order, aliases left out.
template <class E>
std::string enum_choices(std::span<const EnumName<E>> table) {
  std::string s;
  size_t printed = 0, total = 0;
  for (const EnumName<E>& e : table) total += e.alias ? 0 : 1;
  for (const EnumName<E>& e : table) {
    if (e.alias) continue;
    if (printed > 0) s += printed + 1 == total ? " or " : ", ";
    s += e.name;
    ++printed;
  }
  return s;
}

// The value spelled `name`, or false.
template <class E>
bool try_parse_enum(std::span<const EnumName<E>> table, const std::string& name, E* out) {
  for (const EnumName<E>& e : table) {
    if (name == e.name) {
      *out = e.value;
      return true;
    }
  }
  return false;
}

// The value spelled `name`; InputError "unknown <what> '<name>' (use a, b or c)" otherwise.
template <class E>
E parse_enum(std::span<const EnumName<E>> table, const std::string& name, const std::string& what) {
  E v{};
  if (!try_parse_enum(table, name, &v))
    throw InputError("unknown " + what + " '" + name + "' (use " + enum_choices(table) + ")");
  return v;
}

// The first (non-alias) spelling of `v`.
template <class E>
const char* enum_name(std::span<const EnumName<E>> table, E v) {
  for (const EnumName<E>& e : table)
    if (e.value == v && !e.alias) return e.name;
  return "?";
}

}  // namespace sbp

#pragma once
// The `accuracy` reward's rules: which part of a completion is its final answer, and when two
// answers are the same (docs/REWARDS.md, "accuracy").
//
// Final answer, first rule that applies:
//  1. the contents of the last \boxed{...} (braces balanced, so \boxed{\frac{1}{2}} is whole);
//  2. the text after the last "####" marker (GSM8K style), else after the last "answer:"
//     (any case), up to the end of that line;
//  3. the last number in the text (optional sign, digits with optional thousands commas, an
//     optional decimal part, or a fraction a/b).
// None of them: no answer (the reward is 0).
//
// Normalisation of both sides: surrounding whitespace, '$' signs, a trailing '.', and an
// enclosing \text{...} are removed; inner whitespace runs become one space. Two answers match
// when both normalised strings parse as numbers (thousands commas, a/b fractions and a trailing
// '%' allowed) that agree to a relative 1e-6 (absolute 1e-9 near zero), or else when the
// normalised strings are equal ignoring ASCII case.
#include <optional>
#include <string>
#include <string_view>

namespace sbp {

std::optional<std::string> extract_final_answer(std::string_view completion);
std::string normalize_answer(std::string_view answer);
// The number an answer spells, after normalisation; nullopt if it is not one number.
std::optional<double> parse_answer_number(std::string_view normalized);
bool answers_match(std::string_view predicted, std::string_view reference);

}  // namespace sbp

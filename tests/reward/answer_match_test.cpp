// The accuracy reward's rules (reward/answer_match.h): extraction order, normalisation and
// numeric comparison, each rule with a case that would pass under a wrong rule.
#include "reward/answer_match.h"

#include <gtest/gtest.h>

namespace sbp {
namespace {

std::string extracted(std::string_view text) {
  const auto a = extract_final_answer(text);
  return a ? *a : std::string("<none>");
}

TEST(AnswerMatch, LastBoxedWinsOverMarkersAndNumbers) {
  EXPECT_EQ(extracted("first \\boxed{3}, then \\boxed{4}. answer: 5, and 6"), "4");
  // Balanced braces: the fraction is kept whole.
  EXPECT_EQ(extracted("so \\boxed{\\frac{1}{2}} is it"), "\\frac{1}{2}");
  // An unbalanced (truncated) last box falls back to the one before it.
  EXPECT_EQ(extracted("\\boxed{7} and then \\boxed{8"), "7");
}

TEST(AnswerMatch, MarkersThenLastNumber) {
  EXPECT_EQ(extracted("work 12 + 30\n#### 42\nnote 7"), "42");
  EXPECT_EQ(extracted("x = 3. The Answer: 17 apples\nbye 9"), "17 apples");
  // #### is preferred to answer: wherever they are.
  EXPECT_EQ(extracted("#### 1\nanswer: 2"), "1");
  EXPECT_EQ(extracted("we get 3 - 5 = -2, so 1,234.5 in total"), "1,234.5");
  EXPECT_EQ(extracted("half is 1/2"), "1/2");
  EXPECT_EQ(extracted("a difference 10-4"), "4");
  EXPECT_EQ(extracted("no digits here"), "<none>");
  EXPECT_EQ(extracted("answer:   \nthen 5"), "5");  // an empty marked answer falls through
  EXPECT_EQ(extracted(""), "<none>");
}

TEST(AnswerMatch, Normalisation) {
  EXPECT_EQ(normalize_answer("  $42$.  "), "42");
  EXPECT_EQ(normalize_answer("\\text{ New   York }"), "New York");
  EXPECT_EQ(normalize_answer("a\n\tb"), "a b");
}

TEST(AnswerMatch, NumbersCompareByValue) {
  EXPECT_TRUE(answers_match("42", "42.0"));
  EXPECT_TRUE(answers_match("1,234", "1234"));
  EXPECT_TRUE(answers_match("0.5", "1/2"));
  EXPECT_TRUE(answers_match("$3.50", "3.5"));
  EXPECT_TRUE(answers_match("50%", "50"));
  EXPECT_TRUE(answers_match("-7", " -7. "));
  EXPECT_FALSE(answers_match("42", "43"));
  EXPECT_FALSE(answers_match("0.333", "1/3"));  // 1e-6 relative, not "close enough"
  EXPECT_TRUE(answers_match("0.3333333", "1/3"));
  EXPECT_FALSE(answers_match("1/0", "0"));
}

TEST(AnswerMatch, StringsCompareIgnoringCaseOnly) {
  EXPECT_TRUE(answers_match("Paris", "paris"));
  EXPECT_TRUE(answers_match("\\text{Paris}.", "PARIS"));
  EXPECT_FALSE(answers_match("Paris, France", "Paris"));
  EXPECT_FALSE(answers_match("x = 4", "4"));  // no algebra: the marker rules pick the value
}

}  // namespace
}  // namespace sbp

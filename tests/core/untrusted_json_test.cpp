// core/untrusted_json.h: the depth limit of every read of untrusted JSON (issue 35).
#include "core/untrusted_json.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "core/error.h"

namespace sbp {
namespace {

std::string arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string error_of(const std::string& text) {
  try {
    (void)parse_untrusted_json(text, "f.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(UntrustedJson, LimitIsInclusive) {
  EXPECT_EQ(kMaxJsonDepth, 256);
  EXPECT_TRUE(parse_untrusted_json(arrays(256), "f.json").is_array());
  EXPECT_EQ(error_of(arrays(257)), "f.json: JSON nested deeper than 256 levels (at column 257)");
  // Objects count as arrays do, and the outer object is a level.
  EXPECT_NE(error_of("{\"x\": " + arrays(256) + "}"), "");
  EXPECT_EQ(error_of("{\"x\": " + arrays(255) + "}"), "");
}

TEST(UntrustedJson, TheIssuesCaseIsRefusedCheaply) {
  const std::string deep = "{\"prompt\": \"a\", \"answer\": " + arrays(200000) + "}";
  EXPECT_EQ(error_of(deep), "f.json: JSON nested deeper than 256 levels (at column 282)");
  EXPECT_TRUE(parse_untrusted_json_or_discarded(deep).is_discarded());
}

TEST(UntrustedJson, BracketsInStringsDoNotCount) {
  const std::string s = "[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]";
  EXPECT_EQ(parse_untrusted_json(s, "f.json")[0].get<std::string>().size(), 2001u);
  // An escaped backslash ends before the quote: the string closes there.
  EXPECT_NE(error_of("[\"\\\\\"" + arrays(300) + "]"), "");
}

TEST(UntrustedJson, MultiLineTextNamesLineAndColumn) {
  EXPECT_EQ(error_of("{\n  \"a\": 1,\n  \"b\": " + arrays(300) + "\n}"),
            "f.json: JSON nested deeper than 256 levels (at line 3, column 263)");
}

TEST(UntrustedJson, SyntaxErrorsStayNlohmanns) {
  EXPECT_THROW((void)parse_untrusted_json("{", "f.json"), nlohmann::json::parse_error);
  EXPECT_THROW((void)parse_untrusted_json("[1e999]", "f.json"), nlohmann::json::exception);
  EXPECT_TRUE(parse_untrusted_json_or_discarded("nope").is_discarded());
  EXPECT_EQ(parse_untrusted_json_or_discarded("{\"a\": [1]}")["a"][0], 1);
}

TEST(UntrustedJson, OrderedKeepsOrderAndCallback) {
  int keys = 0;
  const auto j = parse_untrusted_ordered_json(
      "{\"b\": 1, \"a\": 2}", "f.json",
      [&](int, nlohmann::ordered_json::parse_event_t ev, nlohmann::ordered_json&) {
        keys += ev == nlohmann::ordered_json::parse_event_t::key;
        return true;
      });
  EXPECT_EQ(j.begin().key(), "b");
  EXPECT_EQ(keys, 2);
  EXPECT_THROW((void)parse_untrusted_ordered_json(arrays(300), "f.json"), InputError);
}

TEST(UntrustedJson, StreamOverload) {
  std::istringstream in(arrays(300));
  EXPECT_THROW((void)parse_untrusted_json(in, "f.json"), InputError);
}

}  // namespace
}  // namespace sbp

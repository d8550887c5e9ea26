// Every normalizer, pre-tokenizer and decoder type of the `tokenizers` library, alone and in
// generated Sequences, against the library itself: tools/tokenizer_fixtures.py writes
// compositions.jsonl (a tiny vocabulary behind other pipeline fields, and per text a digest of
// the library's ids and decodes), and each composition must give the same digests here.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/tokenizer.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using nlohmann::json;
using test::read_text;
using test::TempDir;
using test::write_text;

std::string fixtures() { return test::source_dir() + "/tests/fixtures/tokenizer"; }

// The fixture's digest: FNV-1a 64 over the ids (int32 little-endian), 0xFF, the decode, 0xFF,
// the decode without special tokens; folded to 32 bits, as 8 hex digits.
std::string digest(const std::vector<int32_t>& ids, const std::string& decoded,
                   const std::string& decoded_skip) {
  uint64_t h = 0xCBF29CE484222325ull;
  auto add = [&](unsigned char b) { h = (h ^ b) * 0x100000001B3ull; };
  for (const int32_t id : ids)
    for (int k = 0; k < 4; ++k)
      add(static_cast<unsigned char>(static_cast<uint32_t>(id) >> (8 * k)));
  add(0xFF);
  for (const char c : decoded) add(static_cast<unsigned char>(c));
  add(0xFF);
  for (const char c : decoded_skip) add(static_cast<unsigned char>(c));
  char out[9];
  std::snprintf(out, sizeof out, "%08x", static_cast<unsigned>((h >> 32) ^ (h & 0xFFFFFFFFu)));
  return out;
}

std::string shorten(const std::string& s) { return s.size() > 100 ? s.substr(0, 100) + "..." : s; }

TEST(TokenizerCompositions, MatchLibraryOnEveryText) {
  std::istringstream lines(read_text(fixtures() + "/compositions.jsonl"));
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  const std::vector<std::string> texts =
      json::parse(line).at("texts").get<std::vector<std::string>>();
  ASSERT_GT(texts.size(), 250u);
  std::map<std::string, json> bases;
  TempDir dir;
  int64_t compositions = 0, checked = 0, failed_compositions = 0;
  while (std::getline(lines, line)) {
    const json row = json::parse(line);
    const std::string name = row.at("name").get<std::string>();
    const std::string base = row.at("base").get<std::string>();
    if (!bases.count(base)) bases[base] = json::parse(read_text(fixtures() + "/" + base + ".json"));
    json doc = bases[base];
    for (auto it = row["changes"].begin(); it != row["changes"].end(); ++it)
      doc[it.key()] = it.value();
    write_text(dir.file(name + ".json"), doc.dump());
    const std::string digests = row.at("digests").get<std::string>();
    ASSERT_EQ(digests.size(), 8 * texts.size()) << name;
    ++compositions;
    std::optional<Tokenizer> tok;
    try {
      tok.emplace(Tokenizer::from_file(dir.file(name + ".json")));
    } catch (const InputError& e) {
      ADD_FAILURE() << name << ": does not load: " << e.what();
      ++failed_compositions;
      continue;
    }
    int64_t mismatches = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::vector<int32_t> ids = tok->encode(texts[i]);
      const std::string decoded = tok->decode(ids), skip = tok->decode(ids, true);
      ++checked;
      if (digest(ids, decoded, skip) == digests.substr(8 * i, 8)) continue;
      // Only the first few per composition: one bug tends to hit many texts.
      if (++mismatches <= 3) {
        ADD_FAILURE() << name << " (" << row["changes"].dump() << ") text " << i << " "
                      << json(shorten(texts[i])).dump() << ": ids " << json(ids).dump()
                      << " decoded " << json(shorten(decoded)).dump()
                      << " differ from the library's";
      }
    }
    if (mismatches) ++failed_compositions;
    if (mismatches > 3) ADD_FAILURE() << name << ": " << mismatches << " texts differ in all";
  }
  EXPECT_EQ(failed_compositions, 0);
  EXPECT_GE(compositions, 70);
  std::printf("%lld compositions x %zu texts: %lld checked\n", static_cast<long long>(compositions),
              texts.size(), static_cast<long long>(checked));
}

// The decoder transformers writes for a model converted from GGUF, on tiny_gemma.json's vocabulary;
// expected ids and texts recorded with the library (tokenizers 0.23.3).
TEST(TokenizerCompositions, GgufDecoderSequence) {
  json doc = json::parse(read_text(fixtures() + "/tiny_gemma.json"));
  doc["decoder"] = json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}]})");
  TempDir dir;
  write_text(dir.file("tokenizer.json"), doc.dump());
  const Tokenizer tok = Tokenizer::from_file(dir.file("tokenizer.json"));
  const std::string text = "Hello w\xC3\xB6rld \xF0\x9F\x91\x8D";  // "Hello wörld 👍"
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{303, 1064, 450, 201, 188, 342, 336, 328, 1392}));
  EXPECT_EQ(tok.decode(ids), text);  // a token with a space is not all byte-level: kept as UTF-8
  // One fused token made only of byte-level characters is read as bytes: "é" is byte 0xE9 and
  // "Ġ" a space, so "caféĠx" comes back as "caf\uFFFD x", as in the library.
  const std::vector<int32_t> cafe = tok.encode("caf\xC3\xA9\xC4\xA0x");
  EXPECT_EQ(cafe, (std::vector<int32_t>{565, 330, 201, 175, 202, 166, 348}));
  EXPECT_EQ(tok.decode(cafe), "caf\xEF\xBF\xBD x");
}

// What is still refused is refused at load, naming the field and the type.
TEST(TokenizerCompositions, UnsupportedPartsAreNamed) {
  const json base = json::parse(read_text(fixtures() + "/tiny_gemma.json"));
  TempDir dir;
  auto expect_error = [&](const json& changes, const std::vector<std::string>& words) {
    json doc = base;
    for (auto it = changes.begin(); it != changes.end(); ++it) doc[it.key()] = it.value();
    write_text(dir.file("tokenizer.json"), doc.dump());
    try {
      Tokenizer::from_file(dir.file("tokenizer.json"));
      ADD_FAILURE() << "expected InputError for " << changes.dump();
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(dir.file("tokenizer.json")), std::string::npos) << msg;
      for (const std::string& w : words) EXPECT_NE(msg.find(w), std::string::npos) << msg;
    }
  };
  expect_error(json::parse(R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"},
                   {"type": "Precompiled", "precompiled_charsmap": "AAAA"}]}})"),
               {"normalizer.normalizers[1]", "unsupported normalizer Precompiled"});
  expect_error(json::parse(R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                   {"type": "Digits", "individual_digits": true}, {"type": "Jieba"}]}})"),
               {"pre_tokenizer.pretokenizers[1]", "unsupported pre_tokenizer Jieba"});
  expect_error(json::parse(R"({"decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"},
                   {"type": "Sequence", "decoders": [{"type": "Reverse"}]}]}})"),
               {"decoder.decoders[1].decoders[0]", "unsupported decoder Reverse"});
  expect_error(json::parse(R"({"pre_tokenizer": {"type": "FixedLength", "length": 0}})"),
               {"pre_tokenizer.length", "at least 1"});
  expect_error(
      json::parse(R"({"pre_tokenizer": {"type": "CharDelimiterSplit", "delimiter": "ab"}})"),
      {"pre_tokenizer.delimiter", "one character"});
  expect_error(json::parse(R"({"pre_tokenizer": {"type": "Punctuation", "behavior": "Sideways"}})"),
               {"pre_tokenizer.behavior", "Sideways"});
  expect_error(
      json::parse(R"({"decoder": {"type": "Replace", "pattern": {"Regex": "(x"}, "content": ""}})"),
      {"decoder.pattern.Regex", "does not compile"});
  // Metaspace "first" asks where a piece began in the original text; combinations where we could
  // not answer as the library does are refused (docs/TOKENIZER.md).
  const json first = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}};
  expect_error({{"normalizer", {{"type", "Nmt"}}}, {"pre_tokenizer", first}},
               {"normalizer", "deletes characters", "first"});
  expect_error(
      {{"normalizer", {{"type", "NFD"}}},
       {"pre_tokenizer",
        {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "Digits"}}, first})}}}},
      {"pre_tokenizer", "after another pre-tokenizer", "normalizer"});
}

}  // namespace
}  // namespace sbp

// dist/weight_digest.h: XXH64 against the reference implementation's published values, and the
// per-tensor entries ranks compare (a change of one byte names its tensor).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cli/hostile_support.h"
#include "dist/weight_digest.h"
#include "support/test_support.h"

namespace sbp {
namespace {

uint64_t xxh(const std::string& s, uint64_t seed = 0) { return xxh64(s.data(), s.size(), seed); }

TEST(WeightDigest, Xxh64MatchesTheReference) {
  EXPECT_EQ(xxh(""), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh("a"), 0xD24EC4F1A98C6E5Bull);
  EXPECT_EQ(xxh("abc"), 0x44BC2CF5AD770999ull);
  // 39 bytes: the 32-byte stripes, an 8-byte word, no 4-byte word, 7 single bytes.
  EXPECT_EQ(xxh("Nobody inspects the spammish repetition"), 0xFBCEA83C8A378BF1ull);
}

TEST(WeightDigest, OneEntryPerTensorAndAChangedByteNamesItsTensor) {
  test::TempDir tmp;
  std::string data(4 * 6, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i);
  const nlohmann::json header = {
      {"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
      {"b", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {8, 24}}}}};
  const std::string path = tmp.file("w.safetensors");
  hostile::write_bytes(path, hostile::safetensors_bytes(header, data));
  std::vector<AgreedSetting> before;
  append_tensor_digests(before, "model", path);
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[0].key, "model: a");
  EXPECT_EQ(before[0].value, "F32 (2) xxh64 " + hex_digest(xxh64(data.data(), 8)));
  EXPECT_EQ(before[1].key, "model: b");
  data[20] ^= 1;
  hostile::write_bytes(path, hostile::safetensors_bytes(header, data));
  std::vector<AgreedSetting> after;
  append_tensor_digests(after, "model", path);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].value, before[0].value);
  EXPECT_NE(after[1].value, before[1].value);
  const std::optional<std::string> msg = first_disagreement({before, after});
  ASSERT_TRUE(msg.has_value());
  EXPECT_EQ(msg->rfind("ranks disagree on model: b (rank 0: F32 (4) xxh64 ", 0), 0u) << *msg;
  // Not safetensors: one entry saying so, no throw.
  hostile::write_bytes(path, "not a safetensors file");
  std::vector<AgreedSetting> bad;
  append_tensor_digests(bad, "model", path);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].key, "model: (tensors)");
}

}  // namespace
}  // namespace sbp

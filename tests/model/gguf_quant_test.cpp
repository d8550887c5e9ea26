// GGUF block formats against the gguf Python package (llama.cpp's own library), to the bit:
// tests/fixtures/gguf/quants.json holds random blocks of every type we read with
// gguf.quants.dequantize()'s fp32 values, and fp32 inputs with gguf.quants.quantize()'s bytes for
// the types we write (tools/gguf_fixtures.py wrote them).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gguf_file.h"
#include "model/gguf_quant.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using json = nlohmann::json;

std::vector<unsigned char> unhex(const std::string& s) {
  std::vector<unsigned char> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<unsigned char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return out;
}

const json& fixtures() {
  static const json j = json::parse(
      test::read_text(test::source_dir() + "/tests/fixtures/gguf/quants.json"));
  return j;
}

GgmlType type_named(const std::string& name) {
  for (uint32_t t = 0; t < 64; ++t) {
    const auto info = ggml_type_info(t);
    if (info && name == info->name) return static_cast<GgmlType>(t);
  }
  ADD_FAILURE() << "no type " << name;
  return GgmlType::F32;
}

TEST(GgufQuant, DequantizeEqualsTheGgufPackageToTheBit) {
  const json& d = fixtures().at("dequantize");
  for (const char* name : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(d.contains(name));
    const std::vector<unsigned char> blocks = unhex(d[name]["bytes"].get<std::string>());
    const std::vector<unsigned char> want = unhex(d[name]["values"].get<std::string>());
    const int64_t n = d[name]["n"].get<int64_t>();
    const GgmlType t = type_named(name);
    const auto info = ggml_type_info(static_cast<uint32_t>(t));
    ASSERT_TRUE(info && info->readable);
    ASSERT_EQ(static_cast<int64_t>(blocks.size()), n / info->block_elems * info->block_bytes);
    ASSERT_EQ(static_cast<int64_t>(want.size()), 4 * n);
    std::vector<float> got(static_cast<size_t>(n));
    dequantize(t, blocks.data(), got.data(), n);
    int64_t differ = 0, first = -1;
    for (int64_t i = 0; i < n; ++i)
      if (std::memcmp(&got[static_cast<size_t>(i)], want.data() + 4 * i, 4) != 0) {
        ++differ;
        if (first < 0) first = i;
      }
    EXPECT_EQ(differ, 0) << "first differing value " << first;
  }
}

TEST(GgufQuant, QuantizeEqualsTheGgufPackageToTheBit) {
  const json& q = fixtures().at("quantize");
  for (const char* name : {"F16", "BF16", "Q8_0"}) {
    SCOPED_TRACE(name);
    const std::vector<unsigned char> in = unhex(q[name]["values"].get<std::string>());
    const std::vector<unsigned char> want = unhex(q[name]["bytes"].get<std::string>());
    const int64_t n = q[name]["n"].get<int64_t>();
    std::vector<float> x(static_cast<size_t>(n));
    std::memcpy(x.data(), in.data(), in.size());
    std::vector<unsigned char> got(want.size());
    quantize(type_named(name), x.data(), got.data(), n);
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i] && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << "first differing byte " << first;
  }
}

// A file the gguf package wrote: its metadata and tensor table as the package reads them.
TEST(GgufFile, ReadsTheGgufPackagesFile) {
  const GgufFile f(test::source_dir() + "/tests/fixtures/gguf/tiny_llama.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.require_string("general.architecture"), "llama");
  EXPECT_EQ(f.require_int("llama.block_count"), 2);
  EXPECT_EQ(f.require_int("llama.attention.head_count_kv"), 1);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->strs.size(), 289u);
  EXPECT_EQ(f.tensors().size(), 21u);
  const GgufTensorInfo* e = f.find_tensor("token_embd.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->type, static_cast<uint32_t>(GgmlType::Q8_0));
  EXPECT_EQ(e->hf_shape(), (std::vector<int64_t>{289, 32}));
  const GgufTensorInfo* down = f.find_tensor("blk.1.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->type, static_cast<uint32_t>(GgmlType::Q6_K));
  EXPECT_EQ(down->hf_shape(), (std::vector<int64_t>{32, 256}));
}

// write_gguf -> GgufFile: metadata of every kind and tensors of every written type come back.
TEST(GgufFile, WriteThenReadRoundTrips) {
  test::TempDir tmp;
  const std::string path = tmp.file("x.gguf");
  std::vector<float> a(2 * 64), b(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.01f * static_cast<float>(i) - 0.3f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) + 0.5f;
  std::vector<std::pair<std::string, GgufValue>> meta = {
      {"general.architecture", GgufValue::str("llama")},
      {"x.u32", GgufValue::u32(7)},
      {"x.f32", GgufValue::f32(0.25f)},
      {"x.bool", GgufValue::boolean(true)},
      {"x.strs", GgufValue::str_array({"a", "", "c d"})},
      {"x.ints", GgufValue::i32_array({-1, 2, 3})},
      {"x.floats", GgufValue::f32_array({0.5, -1.0})}};
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
    SCOPED_TRACE(ggml_type_name(static_cast<uint32_t>(t)));
    write_gguf(path, meta, {{"a", {2, 64}, t, a.data()}, {"b", {5}, GgmlType::F32, b.data()}});
    const GgufFile f(path);
    EXPECT_EQ(*f.get_int("x.u32"), 7);
    EXPECT_EQ(*f.get_float("x.f32"), 0.25);
    EXPECT_EQ(*f.get_bool("x.bool"), true);
    EXPECT_EQ(f.find("x.strs")->strs, (std::vector<std::string>{"a", "", "c d"}));
    EXPECT_EQ(f.find("x.ints")->ints, (std::vector<int64_t>{-1, 2, 3}));
    EXPECT_EQ(f.find("x.floats")->floats, (std::vector<double>{0.5, -1.0}));
    ASSERT_EQ(f.tensors().size(), 2u);
    const GgufTensorInfo& ta = f.tensors()[0];
    EXPECT_EQ(ta.hf_shape(), (std::vector<int64_t>{2, 64}));
    std::vector<float> got(a.size()), want(a.size());
    f.dequantize_into(ta, got.data());
    // The expected values: the same type's quantize then dequantize (both checked above).
    const auto info = ggml_type_info(static_cast<uint32_t>(t));
    std::vector<unsigned char> q(static_cast<size_t>(128 / info->block_elems * info->block_bytes));
    quantize(t, a.data(), q.data(), 128);
    dequantize(t, q.data(), want.data(), 128);
    EXPECT_EQ(got, want);
    std::vector<float> gb(5);
    f.dequantize_into(f.tensors()[1], gb.data());
    EXPECT_EQ(gb, b);
  }
}

}  // namespace
}  // namespace sbp

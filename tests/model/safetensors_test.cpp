// safetensors reader/writer: exact round trips, dtype conversions, and every malformed
// header we can think of (files built byte by byte here, not with our own writer).
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A raw safetensors file: 8-byte little-endian length, header text, data bytes.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(s.data(), &n, 8);
  return s + header + data;
}

// `n` bytes of F32 data 0, 1, 2, ... (n a multiple of 4).
std::string f32_bytes(int64_t count) {
  std::string s(static_cast<size_t>(count) * 4, '\0');
  for (int64_t i = 0; i < count; ++i) {
    const float f = static_cast<float>(i);
    std::memcpy(s.data() + 4 * i, &f, 4);
  }
  return s;
}

// Opens `path` and expects an InputError whose message names the file and contains `what`.
void expect_error(const std::string& path, const std::string& what) {
  try {
    SafetensorsFile f(path);
    FAIL() << "expected InputError containing '" << what << "' for " << path;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "wanted '" << what << "' in: " << msg;
  }
}

class SafetensorsBad : public ::testing::Test {
 protected:
  // Writes header + data to a fresh file and expects opening it to fail with `what`.
  void check(const std::string& header, const std::string& data, const std::string& what) {
    const std::string p = dir.file("bad" + std::to_string(counter++) + ".safetensors");
    test::write_text(p, raw_file(header, data));
    expect_error(p, what);
  }
  test::TempDir dir;
  int counter = 0;
};

TEST(Safetensors, RoundTripF32IsBitExact) {
  test::TempDir dir;
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  Buffer a = pool.allocate(Category::weights, DType::F32, {3, 5});  // (3, 5)
  Buffer b = pool.allocate(Category::weights, DType::F32, {7});     // (7)
  Buffer c = pool.allocate(Category::weights, DType::F32, {2, 2, 2});
  Rng rng(1, "st");
  test::fill_normal(a.view(), rng);
  test::fill_normal(c.view(), rng);
  // Specials must survive untouched: NaN payload, infinities, subnormals, -0.
  const float specials[7] = {
      from_bits(0x7fc01234u), INFINITY, -INFINITY, from_bits(1u), -0.0f, 1e-40f, 3.4e38f};
  b.view().memory->upload(b.view(), specials);
  const std::string p = dir.file("m.safetensors");
  write_safetensors(p, {{"z.first", a.view()}, {"a.second", b.view()}, {"m.third", c.view()}},
                    DType::F32, {{"note", "hello"}});

  SafetensorsFile f(p);
  ASSERT_EQ(f.entries().size(), 3u);
  // Header order is the order given, not alphabetical.
  EXPECT_EQ(f.entries()[0].name, "z.first");
  EXPECT_EQ(f.entries()[1].name, "a.second");
  EXPECT_EQ(f.entries()[2].name, "m.third");
  EXPECT_EQ(f.entries()[0].begin, 0u);
  EXPECT_EQ(f.entries()[0].end, 60u);
  EXPECT_EQ(f.entries()[1].begin, 60u);
  EXPECT_EQ(f.entries()[2].end, 60u + 28u + 32u);
  EXPECT_EQ(f.entries()[2].shape, (Shape{2, 2, 2}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "hello");
  EXPECT_EQ(f.find("nope"), nullptr);

  for (const auto& [name, src] : std::vector<std::pair<std::string, const Buffer*>>{
           {"z.first", &a}, {"a.second", &b}, {"m.third", &c}}) {
    Buffer got = pool.allocate(Category::other, DType::F32, src->view().shape);
    f.read_into(name, got.view());
    EXPECT_EQ(test::bytes_of(got.view()), test::bytes_of(src->view())) << name;
  }

  // Layout details the reference relies on: header length a multiple of 8, space padding.
  const std::string raw = test::read_text(p);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 120);
  const std::string header = raw.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_TRUE(nlohmann::json::accept(header));
  // No temporary file is left next to it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(Safetensors, Bf16WriteRoundsToNearestEven) {
  test::TempDir dir;
  // Representable in bf16 (8 significant bits) -> exact; others rounded to nearest even.
  const std::vector<float> exact = {1.0f, -2.0f, 0.15625f, 3.0f, -0.0f, 65280.0f, INFINITY};
  const std::vector<std::pair<uint32_t, uint32_t>> rounded = {
      {0x3f808000u, 0x3f800000u},  // halfway, lower neighbour even: down
      {0x3f818000u, 0x3f820000u},  // halfway, lower neighbour odd: up
      {0x3f808001u, 0x3f810000u},  // just above halfway: up
      {0x3f807fffu, 0x3f800000u},  // just below halfway: down
      {0xbf818000u, 0xbf820000u},  // negative, halfway to odd: away from zero
      {0x7f7fffffu, 0x7f800000u},  // FLT_MAX rounds up to infinity
  };
  std::vector<float> src = exact;
  for (auto [in, out] : rounded) src.push_back(from_bits(in));
  const int64_t n = static_cast<int64_t>(src.size());
  const std::string p = dir.file("b.safetensors");
  write_safetensors(p, {{"w", Tensor(src.data(), DType::F32, Shape{n})}}, DType::BF16);

  SafetensorsFile f(p);
  EXPECT_EQ(f.find("w")->dtype, DType::BF16);
  EXPECT_EQ(f.find("w")->end - f.find("w")->begin, static_cast<uint64_t>(2 * n));
  std::vector<float> got(static_cast<size_t>(n));
  f.read_into("w", Tensor(got.data(), DType::F32, Shape{n}));
  for (size_t i = 0; i < exact.size(); ++i) EXPECT_EQ(bits(got[i]), bits(exact[i])) << i;
  for (size_t i = 0; i < rounded.size(); ++i)
    EXPECT_EQ(bits(got[exact.size() + i]), rounded[i].second) << std::hex << rounded[i].first;

  // F32 -> BF16 on read uses the same rounding.
  const std::string p32 = dir.file("f.safetensors");
  write_safetensors(p32, {{"w", Tensor(src.data(), DType::F32, Shape{n})}}, DType::F32);
  std::vector<uint16_t> b16(static_cast<size_t>(n));
  SafetensorsFile(p32).read_into("w", Tensor(b16.data(), DType::BF16, Shape{n}));
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(b16[static_cast<size_t>(i)], f32_to_bf16(src[static_cast<size_t>(i)])) << i;
  // ... and BF16 -> BF16 is a copy of the stored bits.
  std::vector<uint16_t> again(static_cast<size_t>(n));
  f.read_into("w", Tensor(again.data(), DType::BF16, Shape{n}));
  EXPECT_EQ(again, b16);
}

TEST(Safetensors, ReadsHandWrittenF16AndBf16) {
  test::TempDir dir;
  // F16: 1, -2, 65504 (max), 2^-24 (smallest subnormal), +inf, 0.5
  const uint16_t h[6] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x3800};
  const float want_h[6] = {1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), INFINITY, 0.5f};
  // BF16: 1, -1.5, 2^-133 (subnormal)
  const uint16_t b[3] = {0x3f80, 0xbfc0, 0x0001};
  const float want_b[3] = {1.0f, -1.5f, std::ldexp(1.0f, -133)};
  std::string data(reinterpret_cast<const char*>(h), 12);
  data += std::string(reinterpret_cast<const char*>(b), 6);
  data += std::string(2, '\0');  // a scalar F16 zero, shape []
  const std::string header = R"({"h":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},)"
                             R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[12,18]},)"
                             R"("s":{"dtype":"F16","shape":[],"data_offsets":[18,20]},)"
                             R"("e":{"dtype":"F32","shape":[0,4],"data_offsets":[20,20]}})";
  const std::string p = dir.file("h.safetensors");
  test::write_text(p, raw_file(header, data));  // unpadded header: readers must not care

  SafetensorsFile f(p);
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.find("h")->shape, (Shape{2, 3}));
  EXPECT_EQ(f.find("s")->shape, (Shape{1}));  // scalars read as (1)
  EXPECT_EQ(f.find("e")->shape.numel(), 0);
  float got_h[6], got_b[3], got_s = 7.0f;
  f.read_into("h", Tensor(got_h, DType::F32, Shape{6}));
  f.read_into("b", Tensor(got_b, DType::F32, Shape{3}));
  f.read_into("s", Tensor(&got_s, DType::F32, Shape{1}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(got_h[i], want_h[i]) << i;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got_b[i], want_b[i]) << i;
  EXPECT_EQ(got_s, 0.0f);
  // Row ranges of a tensor (used to compare big tensors in pieces).
  float part[2];
  f.read_range_into("h", 3, Tensor(part, DType::F32, Shape{2}));
  EXPECT_EQ(part[0], want_h[3]);
  EXPECT_EQ(part[1], want_h[4]);
}

TEST(Safetensors, LargeF16AndBf16ConversionsMatchScalarHelpers) {
  // Above the table / threading thresholds, every 16-bit pattern at least once.
  test::TempDir dir;
  const int64_t n = 70000;
  std::vector<uint16_t> pat(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pat[static_cast<size_t>(i)] = static_cast<uint16_t>(i * 7919);
  const std::string data(reinterpret_cast<const char*>(pat.data()), static_cast<size_t>(2 * n));
  const std::string ns = std::to_string(2 * n);
  const std::string header = R"({"h":{"dtype":"F16","shape":[)" + std::to_string(n) +
                             R"(],"data_offsets":[0,)" + ns +
                             R"(]},"b":{"dtype":"BF16","shape":[)" + std::to_string(n) +
                             R"(],"data_offsets":[)" + ns + "," + std::to_string(4 * n) + "]}}";
  const std::string p = dir.file("big.safetensors");
  test::write_text(p, raw_file(header, data + data));
  SafetensorsFile f(p);
  std::vector<float> h(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  f.read_into("h", Tensor(h.data(), DType::F32, Shape{n}));
  f.read_into("b", Tensor(b.data(), DType::F32, Shape{n}));
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    const float wh = f16_to_f32(pat[k]), wb = bf16_to_f32(pat[k]);
    ASSERT_TRUE(bits(h[k]) == bits(wh) || (std::isnan(h[k]) && std::isnan(wh))) << i;
    ASSERT_EQ(bits(b[k]), bits(wb)) << i;
  }
}

TEST(Safetensors, F16WriteRoundTrip) {
  test::TempDir dir;
  const float src[5] = {1.0f, -0.333251953125f, 65504.0f, 0.0f, std::ldexp(1.0f, -20)};
  const std::string p = dir.file("h.safetensors");
  write_safetensors(p, {{"x", Tensor(const_cast<float*>(src), DType::F32, Shape{5})}}, DType::F16);
  float got[5];
  SafetensorsFile(p).read_into("x", Tensor(got, DType::F32, Shape{5}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i], src[i]) << i;  // all representable in f16
}

TEST(Safetensors, ReadIntoChecksNameAndSize) {
  test::TempDir dir;
  float v[4] = {1, 2, 3, 4};
  const std::string p = dir.file("m.safetensors");
  write_safetensors(p, {{"x", Tensor(v, DType::F32, Shape{2, 2})}}, DType::F32);
  SafetensorsFile f(p);
  float out[6];
  try {
    f.read_into("y", Tensor(out, DType::F32, Shape{4}));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'y'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.read_into("x", Tensor(out, DType::F32, Shape{6})), InputError);
  f.read_into("x", Tensor(out, DType::F32, Shape{4, 1}));  // same numel, other shape: fine
  EXPECT_EQ(out[3], 4.0f);
}

TEST(Safetensors, WriteFailureLeavesNothingBehind) {
  test::TempDir dir;
  float v[2] = {1, 2};
  const Tensor t(v, DType::F32, Shape{2});
  // Duplicate names are refused before anything is created.
  EXPECT_THROW(write_safetensors(dir.file("d.safetensors"), {{"a", t}, {"a", t}}, DType::F32),
               InputError);
  // A directory that does not exist: error naming the path.
  const std::string missing = dir.file("no/such/dir/m.safetensors");
  try {
    write_safetensors(missing, {{"a", t}}, DType::F32);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  // A target that cannot be replaced (a non-empty directory): the temp file is removed.
  const std::string target = dir.file("occupied");
  fs::create_directories(target + "/x");
  EXPECT_THROW(write_safetensors(target, {{"a", t}}, DType::F32), InputError);
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  // An existing file is replaced whole.
  const std::string p = dir.file("m.safetensors");
  test::write_text(p, "old junk");
  write_safetensors(p, {{"a", t}}, DType::F32);
  EXPECT_EQ(SafetensorsFile(p).entries().size(), 1u);
}

// ---- malformed files ------------------------------------------------------------------------

TEST_F(SafetensorsBad, MissingAndTinyFiles) {
  expect_error(dir.file("absent.safetensors"), "cannot open");
  const std::string tiny = dir.file("tiny.safetensors");
  test::write_text(tiny, "abc");
  expect_error(tiny, "shorter than the 8-byte");
  const std::string empty = dir.file("empty.safetensors");
  test::write_text(empty, "");
  expect_error(empty, "shorter than the 8-byte");
  expect_error(dir.path(), "not a regular file");
}

TEST_F(SafetensorsBad, TruncatedFiles) {
  float v[16] = {};
  const std::string good = dir.file("good.safetensors");
  write_safetensors(good, {{"w", Tensor(v, DType::F32, Shape{4, 4})}}, DType::F32);
  const std::string raw = test::read_text(good);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  // Cut inside the data region: the last tensor ends past the end of the file.
  const std::string cut_data = dir.file("cut_data.safetensors");
  test::write_text(cut_data, raw.substr(0, raw.size() - 5));
  expect_error(cut_data, "beyond the data region");
  expect_error(cut_data, "'w'");
  // Cut inside the header: the header length exceeds what is left.
  const std::string cut_header = dir.file("cut_header.safetensors");
  test::write_text(cut_header, raw.substr(0, 8 + n / 2));
  expect_error(cut_header, "header size " + std::to_string(n));
  expect_error(cut_header, "truncated");
}

TEST_F(SafetensorsBad, HeaderSize) {
  std::string s(8, '\0');
  const uint64_t huge = uint64_t{1} << 40;  // 1 TiB: past the cap, never allocated
  std::memcpy(s.data(), &huge, 8);
  const std::string p = dir.file("huge.safetensors");
  test::write_text(p, s + "{}");
  expect_error(p, "exceeds the 100000000-byte limit");
  const uint64_t big = 1000;  // under the cap but larger than the file
  std::memcpy(s.data(), &big, 8);
  test::write_text(p, s + "{}");
  expect_error(p, "header size 1000 bytes is larger than");
}

TEST_F(SafetensorsBad, HeaderJson) {
  check("{\"w\": {\"dtype\": ", "", "not valid JSON");
  check("not json at all!", "", "not valid JSON");
  check("{} trailing", "", "not valid JSON");
  check("[1, 2, 3]", "", "header must be a JSON object");
  check(R"({"w": [1, 2]})", "", "tensor 'w': header entry must be an object");
  check(R"({"__metadata__": [1]})", "", "__metadata__ must be an object");
  check(R"({"__metadata__": {"k": 3}})", "", "__metadata__ value for 'k' must be a string");
}

TEST_F(SafetensorsBad, MissingFields) {
  check(R"({"w": {"shape": [4], "data_offsets": [0, 16]}})", f32_bytes(4),
        "tensor 'w': missing 'dtype'");
  check(R"({"w": {"dtype": "F32", "data_offsets": [0, 16]}})", f32_bytes(4),
        "tensor 'w': missing 'shape'");
  check(R"({"w": {"dtype": "F32", "shape": [4]}})", f32_bytes(4),
        "tensor 'w': missing 'data_offsets'");
  check(R"({"w": {"dtype": 32, "shape": [4], "data_offsets": [0, 16]}})", f32_bytes(4),
        "'dtype' must be a string");
  check(R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})", f32_bytes(4),
        "'shape' must be an array");
  check(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})", f32_bytes(4),
        "'data_offsets' must be two non-negative integers");
  check(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [-4, 16]}})", f32_bytes(4),
        "'data_offsets' must be two non-negative integers");
}

TEST_F(SafetensorsBad, Dtypes) {
  check(R"({"w": {"dtype": "Q7", "shape": [4], "data_offsets": [0, 16]}})", f32_bytes(4),
        "tensor 'w': unknown dtype 'Q7'");
  check(R"({"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", f32_bytes(4),
        "tensor 'w': unsupported dtype 'F64'");
  check(R"({"w": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", f32_bytes(4),
        "unsupported dtype 'I64'");
  check(R"({"w": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]}})", f32_bytes(4),
        "unsupported dtype 'U8'");
}

TEST_F(SafetensorsBad, Shapes) {
  check(R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", f32_bytes(4),
        "shape entries must be non-negative integers");
  check(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 16]}})", f32_bytes(4),
        "shape entries must be non-negative integers");
  check(R"({"w": {"dtype": "F32", "shape": ["4"], "data_offsets": [0, 16]}})", f32_bytes(4),
        "shape entries must be non-negative integers");
  check(R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 16]}})",
        f32_bytes(4), "overflows");
  check(R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 16]}})",
        f32_bytes(4), "overflows the byte size");
  check(R"({"w": {"dtype": "F32", "shape": [1,1,1,1,4], "data_offsets": [0, 16]}})", f32_bytes(4),
        "rank 5 is not supported");
}

TEST_F(SafetensorsBad, Offsets) {
  // begin after end
  check(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [16, 0]}})", f32_bytes(4),
        "tensor 'w': data_offsets begin 16 is after end 0");
  // out of range
  check(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", f32_bytes(4),
        "tensor 'w': data_offsets end 24 is beyond the data region of 16 bytes");
  // an offset past 2^64 (parsed as a float by the JSON reader)
  check(R"({"w": {"dtype": "F32", "shape": [1], )"
        R"("data_offsets": [18446744073709551612, 18446744073709551616]}})",
        f32_bytes(4), "tensor 'w'");
  // byte length disagrees with shape x dtype
  check(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", f32_bytes(4),
        "length mismatch");
  check(R"({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 16]}})", f32_bytes(4),
        "tensor 'w': data_offsets cover 16 bytes but dtype BF16 and shape [4] need 8 bytes");
  // overlap
  check(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},)"
        R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
        f32_bytes(4), "tensor 'b' data_offsets [8, 16) overlap tensor 'a' [0, 12)");
  // the same range twice is an overlap too (two names aliasing one buffer)
  check(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
        R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
        f32_bytes(4), "overlap");
  // hole between tensors
  check(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
        R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
        f32_bytes(4), "hole in the data region: bytes [4, 8)");
  // hole at the start
  check(R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", f32_bytes(4),
        "hole in the data region: bytes [0, 8)");
  // uncovered trailing bytes
  check(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}})", f32_bytes(4),
        "bytes [12, 16) at the end belong to no tensor");
}

TEST_F(SafetensorsBad, DuplicateNames) {
  check(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
        R"( "w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
        f32_bytes(4), "duplicate tensor name 'w'");
  check(R"({"w": {"dtype": "F32", "shape": [4], "shape": [2], "data_offsets": [0, 16]}})",
        f32_bytes(4), "duplicate key 'shape' in header entry 'w'");
}

}  // namespace
}  // namespace sbp

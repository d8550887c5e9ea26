// Checked size arithmetic (core/checked_math.h) and the sizes built on it: a product or sum that
// does not fit int64 is an InputError naming the quantity and its operands, at the exact
// boundary (the largest representable value is fine, one more is not).
#include "core/checked_math.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace sbp {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// `fn` must throw InputError whose message contains every part.
template <class Fn>
void expect_overflow(Fn fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    FAIL() << "expected an overflow error";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("size overflow"), std::string::npos) << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "wanted '" << p << "' in: " << msg;
  }
}

TEST(CheckedMath, MulAtTheBoundary) {
  EXPECT_EQ(checked_mul(kMax, 1, "x"), kMax);
  EXPECT_EQ(checked_mul(0, kMax, "x"), 0);
  // floor(sqrt(2^63 - 1)) = 3037000499: its square fits, the next one does not.
  EXPECT_EQ(checked_mul(3037000499, 3037000499, "x"), int64_t{9223372030926249001});
  expect_overflow([] { checked_mul(3037000500, 3037000500, "the bytes of q_proj"); },
                  {"the bytes of q_proj", "3037000500 * 3037000500"});
  EXPECT_EQ(checked_mul(int64_t{1} << 62, 1, "x"), int64_t{1} << 62);
  expect_overflow([] { checked_mul(int64_t{1} << 62, 2, "x"); }, {"4611686018427387904 * 2"});
}

TEST(CheckedMath, AddAtTheBoundary) {
  EXPECT_EQ(checked_add(kMax - 1, 1, "x"), kMax);
  expect_overflow([] { checked_add(kMax, 1, "the ledger total"); },
                  {"the ledger total", "9223372036854775807 + 1"});
  EXPECT_EQ(checked_add(-5, 3, "x"), -2);
}

TEST(CheckedMath, ProductOfManyFactors) {
  EXPECT_EQ(checked_product({}, "x"), 1);
  EXPECT_EQ(checked_product({2, 3, 7}, "x"), 42);
  // 2^31 * 2^31 * 2 = 2^63 is one past the maximum; 2^31 * 2^31 * 1 fits.
  EXPECT_EQ(checked_product({int64_t{1} << 31, int64_t{1} << 31, 1}, "x"), int64_t{1} << 62);
  expect_overflow(
      [] {
        checked_product({int64_t{1} << 31, int64_t{1} << 31, 2}, "the element count");
      },
      {"the element count", "2147483648 * 2147483648 * 2"});
  // Exact: a zero factor makes the product 0 even after the others overflowed.
  EXPECT_EQ(checked_product({int64_t{1} << 40, int64_t{1} << 40, 0}, "x"), 0);
}

TEST(CheckedMath, ShapeNumelColsAndBytes) {
  EXPECT_EQ(Shape({kMax}).numel(), kMax);
  EXPECT_EQ(Shape({int64_t{1} << 31, int64_t{1} << 31, 0}).numel(), 0);
  expect_overflow(
      [] {
        Shape({int64_t{1} << 32, int64_t{1} << 32}).numel();
      },
      {"element count of a tensor shape", "4294967296 * 4294967296"});
  // The element count fits, the row length of (rows, cols...) is checked as well.
  const Tensor t(nullptr, DType::F32, Shape({1, int64_t{1} << 32, int64_t{1} << 32}));
  expect_overflow([&] { t.cols(); }, {"row length"});
  // 2^61 F32 elements are 2^63 bytes: the count fits, the bytes do not; 2^61 BF16 bytes fit.
  const Tensor big(nullptr, DType::F32, Shape({int64_t{1} << 61}));
  EXPECT_EQ(big.numel(), int64_t{1} << 61);
  expect_overflow([&] { big.nbytes(); }, {"byte size of a tensor", "2305843009213693952 * 4"});
  const Tensor half(nullptr, DType::BF16, Shape({int64_t{1} << 61}));
  EXPECT_EQ(half.nbytes(), size_t{1} << 62);
}

}  // namespace
}  // namespace sbp

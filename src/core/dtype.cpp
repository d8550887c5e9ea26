#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace sbp {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
  }
  return 0;
}

const char* dtype_name(DType dt) {
  for (const DTypeNames& n : kDTypeNames)
    if (n.dtype == dt) return n.safetensors;
  return "?";
}

const char* torch_dtype_name(DType dt) {
  for (const DTypeNames& n : kDTypeNames)
    if (n.dtype == dt) return n.torch;
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  for (const DTypeNames& n : kDTypeNames) {
    if (s == n.safetensors || s == n.torch || s == n.flag) {
      *out = n.dtype;
      return true;
    }
  }
  // The precision names (core/dtype.h kPrecisionNames) spell fp32; fp16 alike.
  if (s == "fp32" || s == "fp16") {
    *out = s == "fp32" ? DType::F32 : DType::F16;
    return true;
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  // Straightforward round-to-nearest-even via double arithmetic; only used for tests/export.
  uint32_t sign = std::signbit(f) ? 0x8000u : 0u;
  float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < std::ldexp(1.0f, -14)) {  // subnormal range: units of 2^-24
    double q = std::nearbyint(static_cast<double>(a) * std::ldexp(1.0, 24));
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(q));
  }
  int e;
  double m = std::frexp(static_cast<double>(a), &e);  // a = m * 2^e, m in [0.5,1)
  double q = std::nearbyint(m * 2048.0);              // 11 significant bits
  if (q >= 2048.0) {
    q /= 2.0;
    e += 1;
  }
  uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  uint32_t mant = static_cast<uint32_t>(q) - 1024u;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

}  // namespace sbp

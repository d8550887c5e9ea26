#include "model/gguf_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

// Bit-exactness with numpy needs every product and sum rounded on its own: this file is compiled
// with -ffp-contract=off (CMakeLists.txt), so `d * q - m` is never fused into one FMA.
static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");

namespace sbp {

namespace {

constexpr int64_t QK_K = 256;  // values per K-quant super-block

struct TypeRow {
  GgmlType type;
  GgmlTypeInfo info;
};

// GGML_QUANT_SIZES of the gguf package (constants.py).
constexpr TypeRow kTypes[] = {
    {GgmlType::F32, {"F32", 1, 4, true}},
    {GgmlType::F16, {"F16", 1, 2, true}},
    {GgmlType::Q4_0, {"Q4_0", 32, 2 + 16, true}},
    {GgmlType::Q4_1, {"Q4_1", 32, 2 + 2 + 16, true}},
    {GgmlType::Q5_0, {"Q5_0", 32, 2 + 4 + 16, false}},
    {GgmlType::Q5_1, {"Q5_1", 32, 2 + 2 + 4 + 16, false}},
    {GgmlType::Q8_0, {"Q8_0", 32, 2 + 32, true}},
    {GgmlType::Q8_1, {"Q8_1", 32, 4 + 4 + 32, false}},
    {GgmlType::Q2_K, {"Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4, false}},
    {GgmlType::Q3_K, {"Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12, false}},
    {GgmlType::Q4_K, {"Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12, true}},
    {GgmlType::Q5_K, {"Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12, true}},
    {GgmlType::Q6_K, {"Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16, true}},
    {GgmlType::Q8_K, {"Q8_K", QK_K, 4 + QK_K + QK_K / 8, false}},
    {GgmlType::IQ2_XXS, {"IQ2_XXS", QK_K, 2 + QK_K / 4, false}},
    {GgmlType::IQ2_XS, {"IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32, false}},
    {GgmlType::IQ3_XXS, {"IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8, false}},
    {GgmlType::IQ1_S, {"IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16, false}},
    {GgmlType::IQ4_NL, {"IQ4_NL", 32, 2 + 16, false}},
    {GgmlType::IQ3_S, {"IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4, false}},
    {GgmlType::IQ2_S, {"IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16, false}},
    {GgmlType::IQ4_XS, {"IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64, false}},
    {GgmlType::I8, {"I8", 1, 1, false}},
    {GgmlType::I16, {"I16", 1, 2, false}},
    {GgmlType::I32, {"I32", 1, 4, false}},
    {GgmlType::I64, {"I64", 1, 8, false}},
    {GgmlType::F64, {"F64", 1, 8, false}},
    {GgmlType::IQ1_M, {"IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, false}},
    {GgmlType::BF16, {"BF16", 1, 2, true}},
    {GgmlType::TQ1_0, {"TQ1_0", QK_K, 2 + 4 * 13, false}},
    {GgmlType::TQ2_0, {"TQ2_0", QK_K, 2 + 64, false}},
    {GgmlType::MXFP4, {"MXFP4", 32, 1 + 16, false}},
};

inline uint16_t load_u16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float load_f16(const unsigned char* p) { return f16_to_f32(load_u16(p)); }

// Q4_K / Q5_K: eight 6-bit scales and eight 6-bit mins packed into 12 bytes (get_scale_min).
//   bytes 0-3: scales 0-3 (low 6 bits), high 2 bits of scales 4-7
//   bytes 4-7: mins 0-3 (low 6 bits), high 2 bits of mins 4-7
//   bytes 8-11: low 4 bits of scales 4-7 (low nibble) and mins 4-7 (high nibble)
void scale_min_k4(const unsigned char* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3F;
    mn[j] = s[4 + j] & 0x3F;
    sc[4 + j] = static_cast<uint8_t>((s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30));
    mn[4 + j] = static_cast<uint8_t>((s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30));
  }
}

// One block of each type: src is the block, y its block_elems outputs.

void deq_q4_0(const unsigned char* b, float* y) {  // d f16, qs[16]
  const float d = load_f16(b);
  const unsigned char* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

void deq_q4_1(const unsigned char* b, float* y) {  // d f16, m f16, qs[16]
  const float d = load_f16(b), m = load_f16(b + 2);
  const unsigned char* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

void deq_q8_0(const unsigned char* b, float* y) {  // d f16, qs int8[32]
  const float d = load_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// Q4_K: d f16, dmin f16, scales[12], qs[128]. Sub-block j (32 values) of 8: byte group j/2,
// low nibble for even j, high for odd; value = d*sc[j] * q - dmin*m[j].
void deq_q4_k(const unsigned char* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  uint8_t sc[8], mn[8];
  scale_min_k4(b + 4, sc, mn);
  const unsigned char* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    const float dj = d * static_cast<float>(sc[j]);
    const float mj = dmin * static_cast<float>(mn[j]);
    const unsigned char* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int i = 0; i < 32; ++i)
      y[32 * j + i] = dj * static_cast<float>((q[i] >> shift) & 0x0F) - mj;
  }
}

// Q5_K: d, dmin, scales[12], qh[32], qs[128]: Q4_K's nibbles plus bit j of qh[i] as bit 4.
void deq_q5_k(const unsigned char* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  uint8_t sc[8], mn[8];
  scale_min_k4(b + 4, sc, mn);
  const unsigned char* qh = b + 16;
  const unsigned char* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    const float dj = d * static_cast<float>(sc[j]);
    const float mj = dmin * static_cast<float>(mn[j]);
    const unsigned char* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int i = 0; i < 32; ++i) {
      const int v = ((q[i] >> shift) & 0x0F) | (((qh[i] >> j) & 1) << 4);
      y[32 * j + i] = dj * static_cast<float>(v) - mj;
    }
  }
}

// Q6_K: ql[128], qh[64], scales int8[16], d f16. Value e (0..255) in half g = e/128:
// low 4 bits from ql[64g + e%64] (nibble (e%128)/64), high 2 bits from qh[32g + e%32]
// (bits 2*((e%128)/32)); q - 32 scaled by d*scales[e/16].
void deq_q6_k(const unsigned char* b, float* y) {
  const unsigned char* ql = b;
  const unsigned char* qh = b + 128;
  const unsigned char* sc = b + 192;
  const float d = load_f16(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 128, r = e % 128;
    const int lo = (ql[64 * g + e % 64] >> (4 * (r / 64))) & 0x0F;
    const int hi = (qh[32 * g + e % 32] >> (2 * (r / 32))) & 0x03;
    const float ds = d * static_cast<float>(static_cast<int8_t>(sc[e / 16]));
    y[e] = ds * static_cast<float>((lo | (hi << 4)) - 32);
  }
}

// Round half away from zero, as gguf's np_roundf (and ggml's roundf) do.
inline float round_away(float x) { return std::round(x); }

void q8_0_block(const float* x, unsigned char* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  const uint16_t dh = f32_to_f16(d);
  std::memcpy(b, &dh, 2);
  for (int j = 0; j < 32; ++j) {
    const float q = round_away(x[j] * id);
    b[2 + j] = static_cast<unsigned char>(static_cast<int8_t>(q));
  }
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type) {
  for (const TypeRow& r : kTypes)
    if (static_cast<uint32_t>(r.type) == type) return r.info;
  return std::nullopt;
}

std::string ggml_type_name(uint32_t type) {
  const auto t = ggml_type_info(type);
  return t ? std::string(t->name) : "type " + std::to_string(type);
}

void dequantize(GgmlType type, const unsigned char* src, float* dst, int64_t n) {
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  SBP_CHECK(info && info->readable, "dequantize: unsupported type " +
                                        ggml_type_name(static_cast<uint32_t>(type)));
  SBP_CHECK(n >= 0 && n % info->block_elems == 0,
            "dequantize: " + std::to_string(n) + " values is not a whole number of blocks");
  const int64_t nb = n / info->block_elems;
  const int64_t be = info->block_elems, bb = info->block_bytes;
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
      return;
    default: break;
  }
  void (*block)(const unsigned char*, float*) = nullptr;
  switch (type) {
    case GgmlType::Q4_0: block = deq_q4_0; break;
    case GgmlType::Q4_1: block = deq_q4_1; break;
    case GgmlType::Q8_0: block = deq_q8_0; break;
    case GgmlType::Q4_K: block = deq_q4_k; break;
    case GgmlType::Q5_K: block = deq_q5_k; break;
    case GgmlType::Q6_K: block = deq_q6_k; break;
    default: SBP_CHECK(false, "dequantize: no block routine");
  }
#pragma omp parallel for schedule(static) if (nb >= 4096)
  for (int64_t i = 0; i < nb; ++i) block(src + i * bb, dst + i * be);
}

int64_t first_unrepresentable(GgmlType type, const float* x, int64_t n) {
  constexpr float kF16Inf = 65520.0f;  // the first magnitude f32_to_f16 rounds to inf
  switch (type) {
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i)
        if (std::fabs(x[i]) >= kF16Inf && std::isfinite(x[i])) return i;
      return -1;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i)
        if ((f32_to_bf16(x[i]) & 0x7f80) == 0x7f80 && std::isfinite(x[i])) return i;
      return -1;
    case GgmlType::Q8_0:
      // q8_0_block's scale: amax / 127 in f32, then f16.
      for (int64_t b = 0; b + 32 <= n; b += 32) {
        int64_t arg = b;
        for (int64_t j = b; j < b + 32; ++j)
          if (std::fabs(x[j]) > std::fabs(x[arg])) arg = j;
        if (std::isfinite(x[arg]) && std::fabs(x[arg]) / 127.0f >= kF16Inf) return arg;
      }
      return -1;
    default: return -1;
  }
}

void quantize(GgmlType type, const float* src, unsigned char* dst, int64_t n) {
  SBP_CHECK(n >= 0, "quantize: negative count");
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::Q8_0: {
      SBP_CHECK(n % 32 == 0, "quantize: Q8_0 needs a multiple of 32 values");
      const int64_t nb = n / 32;
#pragma omp parallel for schedule(static) if (nb >= 4096)
      for (int64_t i = 0; i < nb; ++i) q8_0_block(src + 32 * i, dst + 34 * i);
      return;
    }
    default:
      SBP_CHECK(false, "quantize: unsupported type " + ggml_type_name(static_cast<uint32_t>(type)));
  }
}

}  // namespace sbp

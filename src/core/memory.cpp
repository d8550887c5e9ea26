#include "core/memory.h"

#include <cstring>

#include "core/error.h"

namespace sbp {

void MemorySpace::check_owner(const Tensor& t, const char* what) const {
  SBP_CHECK(t.memory == this,
            std::string(what) + ": tensor " + t.describe() + " does not live in this memory space");
  SBP_CHECK(t.data != nullptr || !holds_data() || t.numel() == 0,
            std::string(what) + ": tensor " + t.describe() + " has no bytes");
  if (const char* busy = in_flight(t.data, t.nbytes()))
    SBP_CHECK(false, std::string(what) + ": tensor " + t.describe() + " " + busy);
}

void MemorySpace::upload(const Tensor& dst, const void* host) {
  check_owner(dst, "upload");
  if (!holds_data() || dst.nbytes() == 0) return;
  Access access(*this);
  upload_impl(dst.data, host, dst.nbytes());
}

void MemorySpace::download(void* host, const Tensor& src) {
  check_owner(src, "download");
  if (src.nbytes() == 0) return;
  if (!holds_data()) {
    std::memset(host, 0, src.nbytes());
    return;
  }
  Access access(*this);
  download_impl(host, src.data, src.nbytes());
}

void MemorySpace::zero(const Tensor& t) {
  check_owner(t, "zero");
  if (!holds_data() || t.nbytes() == 0) return;
  Access access(*this);
  zero_impl(t);
}

void MemorySpace::poison(const Tensor& t) {
  check_owner(t, "poison");
  if (!holds_data() || t.nbytes() == 0) return;
  Access access(*this);
  poison_impl(t);
}

namespace {

// Elements of a float tensor's storage to fp32, and back (rounding to nearest even).
void to_f32(const void* src, DType dt, float* out, int64_t n) {
  switch (dt) {
    case DType::F32: std::memcpy(out, src, static_cast<size_t>(n) * 4); return;
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::I32: break;
  }
  SBP_CHECK(false, "download_f32: an I32 tensor is not a float tensor");
}

void from_f32(const float* in, DType dt, void* dst, int64_t n) {
  switch (dt) {
    case DType::F32: std::memcpy(dst, in, static_cast<size_t>(n) * 4); return;
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(in[i]);
      return;
    }
    case DType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(in[i]);
      return;
    }
    case DType::I32: break;
  }
  SBP_CHECK(false, "upload_f32: an I32 tensor is not a float tensor");
}

}  // namespace

std::vector<float> download_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()), 0.0f);
  if (t.numel() == 0) return out;
  if (!t.memory) {
    to_f32(t.data, t.dtype, out.data(), t.numel());
    return out;
  }
  if (t.dtype == DType::F32) {
    t.memory->download(out.data(), t);
    return out;
  }
  std::vector<unsigned char> raw(t.nbytes());
  t.memory->download(raw.data(), t);
  to_f32(raw.data(), t.dtype, out.data(), t.numel());
  return out;
}

void upload_f32(const Tensor& t, std::span<const float> values) {
  SBP_CHECK(static_cast<int64_t>(values.size()) == t.numel(),
            "upload_f32: " + std::to_string(values.size()) + " values for " + t.describe());
  if (t.numel() == 0) return;
  if (!t.memory) {
    from_f32(values.data(), t.dtype, t.data, t.numel());
    return;
  }
  if (t.dtype == DType::F32) {
    t.memory->upload(t, values.data());
    return;
  }
  std::vector<unsigned char> raw(t.nbytes());
  from_f32(values.data(), t.dtype, raw.data(), t.numel());
  t.memory->upload(t, raw.data());
}

std::vector<int32_t> download_i32(const Tensor& t) {
  SBP_CHECK(t.dtype == DType::I32, "download_i32: " + t.describe() + " is not I32");
  std::vector<int32_t> out(static_cast<size_t>(t.numel()), 0);
  if (t.numel() == 0) return out;
  if (t.memory)
    t.memory->download(out.data(), t);
  else
    std::memcpy(out.data(), t.data, t.nbytes());
  return out;
}

void upload_i32(const Tensor& t, std::span<const int32_t> values) {
  SBP_CHECK(t.dtype == DType::I32 && static_cast<int64_t>(values.size()) == t.numel(),
            "upload_i32: " + std::to_string(values.size()) + " values for " + t.describe());
  if (t.numel() == 0) return;
  if (t.memory)
    t.memory->upload(t, values.data());
  else
    std::memcpy(t.data, values.data(), t.nbytes());
}

}  // namespace sbp

// libFuzzer harness: a safetensors file (8-byte header length, JSON header, data region) opened
// and every tensor read, as a model's weights are.
#include <vector>

#include "fuzz/fuzz_support.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = sbp::fuzz::write_input("model.safetensors", data, size);
  sbp::fuzz::expect_clean([&] {
    const sbp::SafetensorsFile file(path);
    for (const sbp::SafetensorsEntry& e : file.entries()) {
      const int64_t n = e.shape.numel();
      // The header was validated against the file's size, so n is bounded by the input.
      std::vector<float> out(static_cast<size_t>(n));
      file.read_into(e.name, sbp::Tensor(out.data(), sbp::DType::F32, sbp::Shape{n}));
      if (n > 1) {
        std::vector<float> tail(1);
        file.read_range_into(e.name, n - 1, sbp::Tensor(tail.data(), sbp::DType::F32, {1}));
      }
    }
  });
  return 0;
}

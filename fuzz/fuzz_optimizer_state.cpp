// libFuzzer harness: a checkpoint's optimizer.safetensors read into the AdamW moments of a
// two-parameter model ("a" of 6 elements, "b" of 4), with the shape, step and finiteness checks
// a resume runs.
#include <vector>

#include "fuzz/fuzz_support.h"
#include "optim/optimizer_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)sbp::fuzz::write_input("optimizer.safetensors", data, size);
  std::vector<float> store(2 * (6 + 4));
  auto slice = [&](const char* name, int64_t numel, float* m) {
    sbp::MomentSlice s;
    s.name = name;
    s.numel = numel;
    s.range = sbp::ShardRange{0, numel};
    s.m = sbp::Tensor(m, sbp::DType::F32, sbp::Shape{numel});
    s.v = sbp::Tensor(m + numel, sbp::DType::F32, sbp::Shape{numel});
    return s;
  };
  const std::vector<sbp::MomentSlice> into = {slice("a", 6, store.data()),
                                              slice("b", 4, store.data() + 12)};
  sbp::fuzz::expect_clean([&] { (void)sbp::read_optimizer_state(sbp::fuzz::input_dir(), into); });
  return 0;
}

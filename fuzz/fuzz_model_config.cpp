// libFuzzer harness: config.json as `--model DIR` reads it, then what every command derives from
// it before allocating (validation, parameter count, RoPE frequencies).
#include "fuzz/fuzz_support.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = sbp::fuzz::write_input("config.json", data, size);
  sbp::fuzz::expect_clean([&] {
    const sbp::ModelConfig cfg = sbp::ModelConfig::from_file(path);
    (void)cfg.num_parameters();
    (void)cfg.rope_inv_freq();
  });
  return 0;
}

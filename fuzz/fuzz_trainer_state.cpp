// libFuzzer harness: a checkpoint's trainer_state.json read and range-checked as `--resume` does.
#include "fuzz/fuzz_support.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)sbp::fuzz::write_input("trainer_state.json", data, size);
  sbp::fuzz::expect_clean([&] { (void)sbp::read_trainer_state(sbp::fuzz::input_dir()); });
  return 0;
}

// libFuzzer harness: a trainer YAML file and `key=value` overrides, parsed and validated as
// `streambp train CONFIG key=value...` does. The input is "<yaml>\n#OVERRIDES#\n<one per line>".
#include <vector>

#include "fuzz/fuzz_support.h"
#include "train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [yaml, rest] = sbp::fuzz::split_once(data, size, "\n#OVERRIDES#\n");
  const std::string path = sbp::fuzz::write_input(
      "train.yaml", reinterpret_cast<const uint8_t*>(yaml.data()), yaml.size());
  std::vector<std::string> overrides;
  for (std::string_view r = rest; !r.empty();) {
    const size_t nl = r.find('\n');
    overrides.emplace_back(r.substr(0, nl));
    r = nl == std::string_view::npos ? std::string_view() : r.substr(nl + 1);
  }
  sbp::fuzz::expect_clean([&] {
    const sbp::TrainConfig c = sbp::load_train_config(path, overrides);
    (void)c.to_json();
    (void)c.exec();
  });
  return 0;
}

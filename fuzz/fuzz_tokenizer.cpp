// libFuzzer harness: tokenizer.json loaded, then a text encoded and decoded with it. The input is
// "<tokenizer.json>\n#TEXT#\n<text>"; without the marker a fixed text is used.
#include "data/tokenizer.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Not a structured binding: clang 14 cannot capture one in the lambda below.
  const std::pair<std::string_view, std::string_view> parts =
      sbp::fuzz::split_once(data, size, "\n#TEXT#\n");
  const std::string_view json = parts.first, text = parts.second;
  const std::string path = sbp::fuzz::write_input(
      "tokenizer.json", reinterpret_cast<const uint8_t*>(json.data()), json.size());
  sbp::fuzz::expect_clean([&] {
    const sbp::Tokenizer tok = sbp::Tokenizer::from_file(path);
    const std::string_view sample =
        text.empty() ? std::string_view("Hello world! <sep> café 123\n\tword  x") : text;
    for (const bool special : {true, false}) {
      const std::vector<int32_t> ids = tok.encode(sample, special);
      (void)tok.decode(ids);
    }
    (void)tok.sentencepiece_text_lengths();
  });
  return 0;
}

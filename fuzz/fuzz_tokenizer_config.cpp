// libFuzzer harness: tokenizer_config.json (special tokens, chat_template as a string or a
// list) as the trainer reads it, and the chat template it names recognised or refused.
#include "data/chat_template.h"
#include "data/hf_tokenizer_config.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)sbp::fuzz::write_input("tokenizer_config.json", data, size);
  sbp::fuzz::expect_clean([&] {
    const sbp::HfTokenizerConfig hf = sbp::HfTokenizerConfig::load_dir(sbp::fuzz::input_dir());
    if (!hf.chat_template.empty()) (void)sbp::detect_chat_template(hf.chat_template, hf.source);
  });
  return 0;
}

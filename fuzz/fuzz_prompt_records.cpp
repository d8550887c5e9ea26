// libFuzzer harness: a prompt-record JSONL file (data/prompt_records.h) read as `generate` and
// online GRPO/PPO `train` read their prompts: text, conversation and prompt_ids records, with
// the tiny-chat tokenizer and chat template, ids checked against a vocabulary; every record's
// kept fields are then copied and dumped as a reward request is (the walks that a deep value
// overflowed). The first input byte: bit 0 reads without a tokenizer (prompt_ids only), bits
// 1-7 pick the vocabulary size; the rest is the file, read from disk and from memory (the same
// prompts or error). looks_like_prompt_records runs on both too.
#include "data/prompt_records.h"
#include "fuzz/fuzz_support.h"

namespace {

const sbp::PromptEncoder& encoder() {
  static const sbp::PromptEncoder enc =
      sbp::PromptEncoder::from_dir(STREAMBP_SOURCE_DIR "/examples/tiny-chat");
  return enc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string path = sbp::fuzz::write_input("prompts.jsonl", data + 1, size - 1);
  const std::string label = "prompts (in memory)";
  const auto memory = std::make_shared<const std::string>(reinterpret_cast<const char*>(data + 1),
                                                          size - 1);
  if (sbp::looks_like_prompt_records(path) !=
      sbp::looks_like_prompt_records(sbp::DataSource(label, memory)))
    std::abort();  // the file and the same bytes in memory disagree
  sbp::fuzz::expect_clean([&] {
    const sbp::PromptEncoder* enc = (pick & 1) ? nullptr : &encoder();
    const int64_t vocab = 1 + (pick >> 1) * 8;  // 1..1017: ids past it must be refused
    // From the file and from memory alike (fuzz_support.h): the same prompts or error.
    sbp::fuzz::expect_same_from_memory(
        path, data + 1, size - 1, label, [&](const sbp::DataSource& source) {
          std::string s;
          for (const sbp::PromptRecord& p : sbp::read_prompt_records(source, enc, vocab)) {
            nlohmann::json request = p.fields;  // as reward/command_reward.cpp builds a request
            request["prompt"] = p.text;
            s += request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
            for (int32_t id : p.ids) s += std::to_string(id) + ' ';
          }
          return s;
        });
  });
  return 0;
}

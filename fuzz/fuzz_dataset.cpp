// libFuzzer harness: a JSONL data file read and tokenized as `train` does (records of every
// schema, chat-template rendering, masked tokenization, truncation), with the tiny-chat
// tokenizer. The first input byte picks the chat template (bit 0x20: gemma, else bits 0-1) and
// the truncation rule; the rest is the file, read from disk and from memory (the same result).
#include "data/dataset.h"
#include "data/example_encoder.h"
#include "fuzz/fuzz_support.h"

namespace {

const sbp::Tokenizer& tokenizer() {
  static const sbp::Tokenizer tok =
      sbp::Tokenizer::from_file(STREAMBP_SOURCE_DIR "/examples/tiny-chat/tokenizer.json");
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string path = sbp::fuzz::write_input("train.jsonl", data + 1, size - 1);
  static constexpr sbp::ChatTemplateName kTemplates[] = {
      sbp::ChatTemplateName::chatml, sbp::ChatTemplateName::qwen3, sbp::ChatTemplateName::llama3,
      sbp::ChatTemplateName::llama3_0};
  sbp::fuzz::expect_clean([&] {
    sbp::PlainTextTokens plain;
    plain.eos = tokenizer().token_to_id("<|im_end|>");
    if (pick & 0x10) plain.bos = plain.eos;
    const sbp::ChatTemplateName name =
        (pick & 0x20) ? sbp::ChatTemplateName::gemma : kTemplates[pick & 3];
    const sbp::ExampleEncoder encoder(sbp::MaskedEncoder(tokenizer()), sbp::chat_template_for(name),
                                      plain);
    sbp::DatasetOptions opts;
    opts.max_seq_len = 48;
    opts.max_tokens = 96;
    opts.truncation = static_cast<sbp::Truncation>((pick >> 2) % 3);
    // Read from the file and from memory alike (fuzz_support.h): the same tokens or error.
    sbp::fuzz::expect_same_from_memory(
        path, data + 1, size - 1, "data.train (in memory)", [&](const sbp::DataSource& source) {
          const sbp::Dataset ds = sbp::load_dataset(source, encoder, opts);
          std::string s = ds.summary().substr(ds.path.size());
          for (const sbp::Example& e : ds.examples)
            for (const sbp::TokenizedSequence& q : e.sequences)
              for (size_t t = 0; t < q.ids.size(); ++t)
                s += ' ' + std::to_string(q.ids[t]) + (q.mask[t] > 0.0f ? "*" : "");
          return s;
        });
  });
  return 0;
}

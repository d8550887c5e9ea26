// libFuzzer harness: a GGUF file opened and validated, every readable tensor dequantized, and the
// converter's metadata steps run on it (config.json from <arch>.*, the tokenizer from
// tokenizer.ggml.*), as `streambp convert` does before it writes anything.
#include <vector>

#include "convert/gguf_arch.h"
#include "convert/gguf_tokenizer.h"
#include "fuzz/fuzz_support.h"
#include "model/config.h"
#include "model/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = sbp::fuzz::write_input("model.gguf", data, size);
  sbp::fuzz::expect_clean([&] {
    const sbp::GgufFile file(path);
    for (const sbp::GgufTensorInfo& t : file.tensors()) {
      const auto info = sbp::ggml_type_info(t.type);
      if (!info || !info->readable) continue;
      // Validated against the file's size: numel is at most 32 values per byte of the file.
      std::vector<float> out(static_cast<size_t>(t.numel()));
      file.dequantize_into(t, out.data());
    }
    const auto arch = file.get_string("general.architecture");
    if (arch) {
      const sbp::GgufArch& a = sbp::gguf_arch_by_name(*arch, path);
      const sbp::ModelConfig cfg =
          sbp::ModelConfig::from_json(sbp::gguf_to_config_json(file, a), path);
      (void)cfg;
    }
    if (file.find("tokenizer.ggml.model")) (void)sbp::gguf_tokenizer_to_hf(file, 2048);
  });
  return 0;
}

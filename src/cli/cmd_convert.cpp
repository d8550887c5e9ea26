// streambp convert: a GGUF file (llama.cpp, Ollama) to a Hugging Face model directory, or a
// model directory to a GGUF file (src/convert/).
//   streambp convert model.gguf --out hf_dir [--dtype f32|bf16]
//   streambp convert hf_dir --to gguf --type f16|bf16|q8_0 --out model.gguf
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "convert/gguf_convert.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/output_paths.h"

namespace sbp::cli {

namespace {
namespace fs = std::filesystem;
struct Args {
  std::string input, out, to, type = "f16", dtype = "f32";
};
}  // namespace

void register_convert(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "convert", "Convert a GGUF file to a Hugging Face directory, or a directory to GGUF");
  c->add_option("input", a->input, "A .gguf file, or a model directory (with --to gguf)")
      ->required();
  c->add_option("--out", a->out, "Output directory (to hf) or .gguf file (to gguf)")->required();
  c->add_option("--to", a->to, "hf or gguf (default: hf for a file, gguf for a directory)")
      ->check(CLI::IsMember({"hf", "gguf"}));
  std::vector<std::string> types;
  for (const EnumName<GgmlType>& n : kGgufOutputTypeNames) types.push_back(n.name);
  c->add_option("--type", a->type, "GGUF type of the matrices: f32, f16, bf16, q8_0")
      ->check(CLI::IsMember(types));
  c->add_option("--dtype", a->dtype, "Weights dtype of the Hugging Face output: f32, bf16")
      ->check(weight_dtype_names());
  c->callback([a, c] {
    const bool is_dir = fs::is_directory(a->input);
    if (!is_dir && !fs::exists(a->input))
      throw InputError("convert: input " + a->input + " does not exist");
    const std::string to = a->to.empty() ? (is_dir ? "gguf" : "hf") : a->to;
    refuse_output_over_inputs({"--out", a->out}, {{"input", a->input}});
    if (to == "hf") {
      if (is_dir)
        throw InputError("convert: --to hf needs a .gguf file, " + a->input + " is a directory");
      if (c->count("--type"))
        throw InputError("convert: --type is for --to gguf (use --dtype for a directory)");
      std::printf("%s\n", convert_gguf_to_hf(a->input, a->out, weight_dtype_from_flag(a->dtype)).c_str());
    } else {
      if (!is_dir)
        throw InputError("convert: --to gguf needs a model directory, " + a->input +
                         " is not a directory");
      if (c->count("--dtype"))
        throw InputError("convert: --dtype is for --to hf (use --type for GGUF)");
      const GgmlType type = parse_enum<GgmlType>(kGgufOutputTypeNames, a->type, "--type");
      std::printf("%s\n", convert_hf_to_gguf(a->input, a->out, type).c_str());
    }
  });
}

}  // namespace sbp::cli

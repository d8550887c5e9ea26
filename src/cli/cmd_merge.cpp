// streambp merge: a base model and a LoRA adapter (PEFT format) folded into one Hugging Face
// checkpoint, W' = W + s B A for every adapted projection (PEFT's merge_and_unload()). The output
// is a whole Hugging Face directory: the tokenizer files (the adapter's, as a training checkpoint
// carries them, else the base's) and the base's generation_config.json go with the weights.
#include <cstdio>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/model_source.h"
#include "core/error.h"
#include "core/output_paths.h"
#include "model/checkpoint_io.h"
#include "model/lora_io.h"
#include "model/lora_merge.h"

namespace sbp::cli {

namespace {
struct Args {
  std::string model, adapter, out, tokenizer, dtype = "f32";
};
}  // namespace

void register_merge(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "merge", "Fold a LoRA adapter (PEFT directory) into its base model; write a full checkpoint");
  c->add_option("--model", a->model, "Base model directory")->required();
  c->add_option("--adapter", a->adapter,
                "Adapter directory (adapter_config.json + "
                "adapter_model.safetensors)")
      ->required();
  c->add_option("--out", a->out, "Output model directory")->required();
  c->add_option("--tokenizer", a->tokenizer,
                "Directory whose tokenizer files are copied (default: --adapter if it has a "
                "tokenizer, else --model)");
  c->add_option("--dtype", a->dtype, "Weights dtype on disk: f32, bf16")
      ->check(weight_dtype_names());
  c->callback([a] {
    // The base, the adapter and the tokenizer are read while --out is replaced.
    refuse_output_over_inputs({"--out", a->out}, {{"--model", a->model},
                                                  {"--adapter", a->adapter},
                                                  {"--tokenizer", a->tokenizer}});
    const ModelSource src = resolve_model(a->model);
    if (!src.has_weights) throw InputError("merge: --model " + a->model + " has no weights");
    const LoraConfig lc = read_lora_config(a->adapter);
    const DType dt = weight_dtype_from_flag(a->dtype);
    const std::unique_ptr<Backend> be = make_backend(BackendSpec{});
    Ledger ledger;
    Pool pool(ledger, *be);
    // fp32 weights whatever the checkpoint's dtype: the sum W + s B A is formed in fp32 and
    // rounded once, on save.
    ParameterSet w = materialize_weights(src, pool, 0);
    LoraSet ad(src.cfg, lc, pool, Category::weights, DType::F32, false);
    load_lora_weights(a->adapter, ad);
    merge_lora(w, ad, *be);
    check_merged_weights(w, ad, dt);
    std::string tokenizer = a->tokenizer;
    if (tokenizer.empty())
      tokenizer = has_tokenizer_files(a->adapter) ? a->adapter : src.dir;
    else if (!has_tokenizer_files(tokenizer))
      throw InputError("merge: --tokenizer " + tokenizer +
                       " has no tokenizer.json or tokenizer_config.json");
    const std::vector<std::string> companions = companion_files(tokenizer, src.dir);
    save_model_dir(a->out, src.cfg, w, dt, 0, companions);
    std::printf(
        "merge: %s + %s (%s, %zu adapter tensors) -> %s (%s, %zu files beside the "
        "weights, the tokenizer's from %s)\n",
        a->model.c_str(), a->adapter.c_str(), lc.describe().c_str(), ad.size(), a->out.c_str(),
        dtype_name(dt), companions.size(), tokenizer.c_str());
  });
}

}  // namespace sbp::cli

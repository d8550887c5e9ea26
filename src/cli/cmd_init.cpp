// streambp init: a randomly initialised model written as a Hugging Face directory.
#include <cstdio>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "core/output_paths.h"
#include "core/error.h"
#include "model/checkpoint_io.h"
#include "model/parameters.h"

namespace sbp::cli {

namespace {
struct Args {
  std::string preset, config, out, dtype = "f32";
  uint64_t seed = 0;
  int64_t layers = 0;
  float std = 0.02f;
  bool test_init = false;
};
}  // namespace

void register_init(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("init", "Write a randomly initialised model directory");
  auto* p = c->add_option("--preset", a->preset, "Built-in model shape");
  auto* f = c->add_option("--config", a->config, "A Hugging Face config.json");
  p->excludes(f);
  c->add_option("--out", a->out, "Output directory")->required();
  c->add_option("--seed", a->seed, "Random seed")->check(uint64_flag());
  c->add_option("--layers", a->layers, "Override the number of layers")
      ->check(int_in(1, kMaxFlagInt));
  c->add_option("--dtype", a->dtype, "Weights dtype on disk: f32, bf16")
      ->check(weight_dtype_names());
  c->add_option("--init-std", a->std, "Standard deviation of matrix weights")
      ->check(positive_finite(1e6));
  c->add_flag("--test-init", a->test_init, "Also randomise norms and biases (for tests)");
  c->callback([a] {
    if (a->preset.empty() == a->config.empty())
      throw InputError("init: give exactly one of --preset or --config");
    refuse_output_over_inputs({"--out", a->out}, {{"--config", a->config}});
    ModelConfig cfg =
        a->preset.empty() ? ModelConfig::from_file(a->config) : preset_config(a->preset);
    if (a->layers > 0) {
      cfg.set_num_layers(a->layers);
      cfg.validate("--layers");  // the override is bounded like the config's own value
    }
    const DType dt = weight_dtype_from_flag(a->dtype);
    const std::unique_ptr<Backend> be = make_backend(BackendSpec{});
    Ledger ledger;
    Pool pool(ledger, *be);
    ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
    init_parameters(w, a->seed, a->test_init ? InitStyle::test : InitStyle::hf, a->std);
    save_model_dir(a->out, cfg, w, dt);
    std::printf("init: wrote %s (%s, %lld layers, %.3fM parameters, %s)\n", a->out.c_str(),
                model_type_name(cfg.model_type), static_cast<long long>(cfg.num_hidden_layers),
                static_cast<double>(w.numel()) / 1e6, dtype_name(dt));
  });
}

}  // namespace sbp::cli

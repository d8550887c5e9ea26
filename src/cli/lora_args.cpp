#include "cli/lora_args.h"

#include "cli/flag_checks.h"

namespace sbp::cli {

void LoraArgs::add_flags(CLI::App* c) {
  c->add_option("--lora-r", r, "LoRA rank: train adapters on the frozen base (0: full weights)")
      ->check(int_in(0, 65536));
  c->add_option("--lora-alpha", alpha, "LoRA alpha (scale alpha / r)");
  c->add_option("--lora-targets", targets,
                "Comma-separated PEFT module names (q_proj,k_proj,v_proj,o_proj,gate_proj,"
                "up_proj,down_proj) or all-linear");
  c->add_flag("--lora-rslora", rslora, "Scale alpha / sqrt(r) (rsLoRA)");
}

LoraConfig LoraArgs::config() const {
  LoraConfig lc;
  lc.r = r;
  if (r == 0) return lc;
  lc.alpha = alpha;
  lc.use_rslora = rslora;
  lc.target_modules = parse_lora_targets(targets);
  lc.validate();
  return lc;
}

}  // namespace sbp::cli

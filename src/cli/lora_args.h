#pragma once
// The LoRA flags of gradcheck, bench and plan: --lora-r, --lora-alpha, --lora-targets,
// --lora-rslora (model/lora.h). Without --lora-r (or with 0) no adapters.
#include <string>

#include <CLI/CLI.hpp>

#include "model/lora.h"

namespace sbp::cli {

struct LoraArgs {
  int64_t r = 0;
  double alpha = 16.0;
  std::string targets = "all-linear";
  bool rslora = false;

  void add_flags(CLI::App* c);
  // r = 0 when no --lora-r; validated otherwise (throws InputError).
  LoraConfig config() const;
};

}  // namespace sbp::cli

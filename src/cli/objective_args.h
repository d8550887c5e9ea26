#pragma once
// The objective as `gradcheck`, `bench` and `plan` name it on the command line (--objective,
// --dpo-loss, --beta, ...), parsed once into the typed setup the step runner takes.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "objective/objective_setup.h"

namespace sbp::cli {

struct ObjectiveArgs {
  std::string objective = "sft";     // sft | dpo | grpo | ppo | orpo | kto
  std::string dpo_loss = "sigmoid";  // sigmoid | hinge | ipo
  double label_smoothing = 0.0;
  std::string grpo_loss = "dapo";  // grpo | bnpo | dr_grpo | dapo
  std::string scale_rewards = "group";
  double beta = -1.0;  // DPO beta / GRPO KL coefficient / PPO kl_coef / ORPO, KTO
                      // beta; < 0: 0.1 / 0.04 / 0.05 / 0.1
  int64_t group_size = 4;
  double entropy_coef = 0.0;

  // Adds the flags to a subcommand.
  void add_flags(CLI::App* c);
  // Parses and validates; InputError naming the flag. GRPO's beta defaults to 0.04 (TRL's is 0)
  // so that a GRPO step includes its reference model.
  ObjectiveSetup setup() const;
  // "grpo (dapo, beta 0.04, scale_rewards group), group 4"
  std::string describe() const;
};

}  // namespace sbp::cli

#pragma once
// The objective as `gradcheck`, `bench` and `plan` name it on the command line (--objective,
// --dpo-loss, --beta, ...), parsed once into the typed setup the step runner takes.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "objective/objective_setup.h"

namespace sbp::cli {

struct ObjectiveArgs {
  std::string objective = "sft";     // a registered objective's name (objective_traits.h)
  std::string dpo_loss = "sigmoid";  // sigmoid | hinge | ipo
  double label_smoothing = 0.0;
  std::string grpo_loss = "dapo";  // grpo | bnpo | dr_grpo | dapo
  std::string scale_rewards = "group";
  double beta = -1.0;  // the objective's setting row marked beta_flag (dpo.beta, ppo.beta = its
                       // kl_coef, ...); < 0: that row's beta_flag_default, else its default
  int64_t group_size = 4;
  double entropy_coef = 0.0;

  // Adds the flags to a subcommand.
  void add_flags(CLI::App* c);
  // Parses and validates; InputError naming the flag. GRPO's beta defaults to 0.04 (TRL's is 0)
  // so that a GRPO step includes its reference model (its row's beta_flag_default).
  ObjectiveSetup setup() const;
  // "grpo (dapo, beta 0.04, scale_rewards group), group 4"
  std::string describe() const;
};

}  // namespace sbp::cli

#pragma once
// What the rest of the program needs to know about an objective, one row per objective, so
// that step, plan, train, check and cli read the row instead of asking "which one is it?"
// (DESIGN §5). Each objective defines its row in its own file (sft.cpp, dpo.cpp, grpo.cpp,
// ppo.cpp, orpo.cpp, kto.cpp, simpo.cpp) and registers it with one line in objective_traits.cpp; how it
// runs a step and scores held-out data is the step layer's row of the same kind
// (step/objective_steps.h).
//
// Adding an objective: its enum value below, its files (loss, traits row and setting rows;
// step row), its entry in the registries objective_traits.cpp and step/objective_steps.cpp, and
// its config struct's member in ObjectiveSetup (objective_setup.h). Its setting rows
// (objective_settings.h) are its config keys and its --beta; nothing else names it.
#include <cstdint>
#include <span>
#include <string>

#include "core/enum_names.h"
#include "objective/objective_settings.h"

namespace sbp {

enum class ObjectiveKind { sft, dpo, grpo, ppo, orpo, kto, simpo };

struct ObjectiveSetup;

// Which of a micro-batch's sequences belong together: share a prompt and are packed, planned
// and scored as one unit.
enum class SequenceGroup {
  one,         // each sequence alone
  pair,        // (chosen, rejected): two consecutive sequences
  configured,  // the completions of one prompt: the configured group size of them
};

struct ObjectiveTraits {
  ObjectiveKind kind;
  const char* name;  // its spelling in a config file and on the command line

  // Data: the record formats it trains on (data/records.h kDataFormatNames spellings) and how
  // an error names them ("preference (prompt, chosen, rejected)").
  std::span<const char* const> formats;
  const char* formats_text;

  // Sequences. completions: prompt + completion sequences, loss on the completion (false:
  // plain sequences, one of T tokens is a valid micro-batch). plan_sequences: the sequences of
  // the micro-batch shape plan and bench use (0: the group size, at least 1).
  bool completions;
  SequenceGroup group;
  int64_t plan_sequences;
  // Host bytes a token of one micro-batch takes in the step's own per-token tables (token ids;
  // with completions also the loss mask, row weights, segments, log-probs, for ppo values,
  // returns and GAE terms in fp64), measured: what bounds the tokens `plan` takes
  // (plan/plan_step.h max_planning_tokens).
  int64_t host_bytes_per_token;

  // Rollouts: one reward per sequence, old log-probs of the sampling policy; trains online from
  // prompt records, has no held-out loss.
  bool rollouts;
  // One 0/1 label per sequence, carried in MicroBatch::rewards (KTO's desirable / undesirable);
  // batch sources that make their own batches (plan, gradcheck) give every sequence one.
  bool sequence_labels = false;

  // Models besides the policy: a reference model (its log-probs are constants of the step) and
  // a value model (a value head trained beside the policy's LM head; PPO).
  bool (*needs_reference)(const ObjectiveSetup& s);
  bool value_model;

  // engine/memory_model.h's analytic peak describes its step (one model, no pre-passes).
  bool analytic_memory;

  std::string (*describe)(const ObjectiveSetup& s);  // "dpo (sigmoid, beta 0.1, ...)"
  // What is wrong with its own settings, in a flag's words ("beta must be > 0"), or nullptr.
  const char* (*settings_error)(const ObjectiveSetup& s);

  // Its settings as config keys, "<name>.<setting>", in the order a config's error lists them
  // (objective_settings.h); at most one row of each model directory type.
  std::span<const ObjectiveSetting> settings = {};
};

const ObjectiveTraits& objective_traits(ObjectiveKind kind);

// Every registered objective, in enum order.
std::span<const ObjectiveTraits* const> all_objectives();

// The names table (core/enum_names.h) built from the rows, for parse_enum and config keys.
std::span<const EnumName<ObjectiveKind>> objective_names();
ObjectiveKind parse_objective(const std::string& name);  // InputError naming the choices
const char* objective_name(ObjectiveKind k);

// Sequences per group: 1, 2, or `configured` clamped to [1, sequences] (a group never holds
// more sequences than the batch has).
int64_t group_size_of(const ObjectiveTraits& t, int64_t configured, int64_t sequences);

// The sequences of plan's and bench's micro-batch shape.
int64_t plan_sequences_of(const ObjectiveTraits& t, int64_t configured);

// Whether the objective trains on records of format `format_name`.
bool accepts_format(const ObjectiveTraits& t, const char* format_name);

}  // namespace sbp

#pragma once
// The `command` reward: an external program, started once per run, scores completions over a
// line protocol, so any Python (or other) reward function plugs in (docs/REWARDS.md).
//
// Protocol: for each completion the trainer writes one JSON object on a line to the program's
// stdin — the prompt record's extra fields, then "prompt", "completion", "completion_tokens"
// and "truncated" (these four win over record fields of the same name) — and reads one line
// back from its stdout: {"reward": x} with x a finite number. Strictly one request, then its
// answer: a program may buffer nothing (print with flush=True). Its stderr is the trainer's.
//
// Failure is an error, never a default reward: a program that cannot start, exits or dies,
// answers anything but such a line (a line is at most 1 MiB), or takes longer than
// `timeout_s` for one answer makes score() throw RewardError naming the program and the cause.
// The program is then killed and reaped; a later score() throws again without restarting it.
#include <string>
#include <vector>

#include "reward/reward.h"

namespace sbp {

std::unique_ptr<RewardFunction> make_command_reward(std::vector<std::string> argv,
                                                    double timeout_s);

}  // namespace sbp

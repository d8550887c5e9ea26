#pragma once
// The `command` reward: an external program, started once per run, scores completions over a
// line protocol, so any Python (or other) reward function plugs in (docs/REWARDS.md).
//
// Protocol: for each completion the trainer writes one JSON object on a line to the program's
// stdin — the prompt record's extra fields, then "prompt", "completion", "completion_tokens"
// and "truncated" (these four win over record fields of the same name) — and reads one line
// back from its stdout: {"reward": x} with x a finite number. Strictly one request, then its
// answer: a program may buffer nothing (print with flush=True), and a line that answers no
// pending request (a second answer, lines before the first request) is an error, never the
// answer of a later one. finish(), after the run's last request, closes the program's input
// and reads its output to the end, so an extra line is an error whenever it arrives (after the
// last request of a step, or only at exit), not only when it beats the next request. Its stderr is copied to the trainer's; its tail is kept for messages.
//
// Failure is an error, never a default reward: a program that cannot start, exits or dies
// (named by its exit status or signal and its stderr's last lines), answers anything but such a
// line (a line is at most 1 MiB), or takes longer than `timeout_s` for one answer makes score()
// throw RewardError naming the program and the cause. The program runs in a process group of
// its own, which is then ended (SIGTERM, SIGKILL after a short grace, helpers included) and the
// program reaped; a later score() throws again without restarting it.
//
// SIGINT/SIGTERM (core/stop_signal.h) while an answer is pending: the group is ended the same
// way and score() throws RewardInterrupted, for the trainer's stop path (checkpoint, exit 130).
#include <string>
#include <vector>

#include "reward/reward.h"

namespace sbp {

std::unique_ptr<RewardFunction> make_command_reward(std::vector<std::string> argv,
                                                    double timeout_s);

}  // namespace sbp

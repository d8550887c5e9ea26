#!/usr/bin/env bash
# Step 2 of the GPU check (docs/FEATURES.md "CUDA backend", docs/CUDA.md "The GPU check"): run from the
# repository root on a machine with an NVIDIA GPU, after scripts/gpu-bundle.sh made
# gpu-bundle/bundle.tar.xz elsewhere. Needs only the CUDA 13 runtime, cuBLASLt, python3
# (PyTorch + transformers for the baseline stages; compute-sanitizer for the sanitizer stages).
#
#   scripts/gpu-check.sh            # the plan; the report in $OUT (default ./gpu-check-out)
#   scripts/gpu-check.sh --dry-run  # the stages in order: class, tier, limit and its basis
#
# The plan (tools/gpu_check/stages.sh): a preflight (seconds: CPU flags, ldd, the device's
# properties, driver and runtime, the environment, torch; a failure stops the run with its
# evidence), then correctness (the op suite's cuda cases, HF parity fp32 and bf16, gradcheck of
# every objective, scores, attention at 8K-32K keys, compute-sanitizer), then one profile of the
# 8K step, then speed and memory at long and 8B shapes. Stages are planned in that order while
# their limits add up to no more than DEADLINE less a reserve; the rest ("later") run only in the
# time the planned ones leave (each only if its whole limit fits), else by
# scripts/gpu-followup.sh, the prepared second run, which reads this one's report.
#
# What comes back, in $OUT (three files, so that a tool returning a handful of files takes all):
#   gpu-check.md, gpu-check.json  the report (tools/gpu_check/summarize.py), rewritten after
#                                 every stage, so a check cut short keeps what it found;
#   logs.tar.gz                   every stage's full log (each cut to its first 256 KiB and last
#                                 768 KiB), env.txt, the preflight's JSON, the plan, the stages'
#                                 JSON results and any core file, at most LOG_LIMIT bytes
#                                 (default 12 MiB; cores that do not fit are listed, not packed);
#                                 also rewritten after every stage.
#
# Time: the whole check ends within DEADLINE seconds (default 540: 9 minutes) of its start,
# even if a kernel hangs. Each stage runs in a session of its own with its own limit, capped by
# what is left of the deadline (less RESERVE, 15 s, for the last packing); past it the stage's
# processes get SIGTERM, then SIGKILL 5 s later; a process that does not die even then (stuck in
# the driver) is left behind, reported, and every later GPU stage is skipped (the GPU is wedged;
# CPU-only stages still run). A stage that failed with a launch or kernel error (a CUDA error
# name or message in its log; never a tolerance failure, a timeout or a Python stage) is run
# once more with CUDA_LAUNCH_BLOCKING=1, on the cases or items that failed, after the planned
# stages and before the later ones, time allowing.
#
# Libraries: the bundle's lib/ (and CUDA's) go on LD_LIBRARY_PATH for our programs only; the
# Python stages (PyTorch) run with the machine's own environment.
#
# For tests on a machine without a GPU (tests/scripts/gpu_check_test.sh): GPU_CHECK_BUNDLE_DIR
# (an unpacked bundle: bin/, lib/), GPU_CHECK_MAX_LIMIT (caps every stage's limit, seconds),
# GPU_CHECK_PYTHON (the interpreter of the PyTorch stages), GPU_CHECK_STAGES (a regex: plan only
# the stages whose name matches; name preflight too, or the run goes without it),
# GPU_CHECK_SKIP (a regex: leave out the stages whose name matches).
#
# GPU_CHECK_SMALL=1: every stage at a small size, for the dry run against the emulated CUDA
# backend in CI (tests/scripts/gpu_check_emulated.sh, a bundle of build-emu's programs): gtest
# stages run one of every GPU_CHECK_SMALL_SHARDS (default 8) cases (gtest sharding; the
# sanitizer filters whole), gradchecks at T = 32, bench and profile stages on tiny-qwen3 at
# T = 64, the PyTorch baseline with --small (a tiny model, on the CPU when torch has no GPU), the
# device checks of the preflight reported but not required, the sanitizer stages without
# compute-sanitizer where it is absent. Each stage's command is otherwise the one a GPU run uses.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRIPT=gpu-check.sh
DRY_RUN=0
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  "") ;;
  *) echo "usage: scripts/gpu-check.sh [--dry-run]" >&2; exit 2 ;;
esac
DEADLINE=${DEADLINE:-540}
OUT=${OUT:-$ROOT/gpu-check-out}
source tools/gpu_check/lib.sh
gc_setup
source tools/gpu_check/stages.sh
gc_collect
if ((DRY_RUN)); then
  gc_print_plan
  rm -rf "$WORK"
  exit 0
fi

# 1. The planned stages, in order. A preflight that fails (or hangs) stops the run: its report
# says why, with the evidence (results/preflight.json, env.txt).
planned() {
  [[ -z $STOPPED && ${TIER[$1]} == first ]] || return 1
  if [[ $1 != preflight && -n ${STATUS[preflight]:-} && ${STATUS[preflight]} != pass ]]; then
    STOPPED="the preflight failed"
    return 1
  fi
  return 0
}
gc_pass planned

# 2. Blocking reruns of the stages that failed with a launch or kernel error, narrowed to the
# gtest cases or stage items that failed (after a sticky fault every later case fails too: the
# first is the culprit, and the rerun stops at it).
blocking() {
  [[ -z $STOPPED && -n ${KERNEL_ERROR[$1]:-} && -z ${STATUS[$1.blocking]:-} ]] || return 1
  RUN_AS=$1.blocking RUN_VARIANT=blocking
  gc_narrow "$WORK/logs/$1.log"
}
((${#KERNEL_ERROR[@]})) && gc_pass blocking

# 3. The later stages, each only if its whole limit fits in what is left (a bench cut short
# measures nothing); those that do not are recorded as skipped, for scripts/gpu-followup.sh.
later() {
  [[ -z $STOPPED && ${TIER[$1]} == later ]] || return 1
  local avail=$(($(left) - RESERVE))
  if (($2 > avail)); then
    gc_record_skip "$1" "$3" "did not fit: ${avail}s left, limit ${2}s (scripts/gpu-followup.sh runs it)"
    return 1
  fi
  return 0
}
gc_pass later
# 4. Blocking reruns of what failed so among the later stages, with what is left.
((${#KERNEL_ERROR[@]})) && gc_pass blocking

gc_finish

#!/usr/bin/env bash
# Host waits for the device per training step, counted by the emulated CUDA runtime
# (STREAMBP_CUDA_EMULATION_REPORT=1, docs/CUDA.md "Synchronisations"): the difference between a
# 2-step and a 1-step run with backend=cuda. Each count must equal its expectation exactly, so
# that a wait added or removed shows. Part of scripts/test-emu.sh.
#
#   sft.yaml: one micro-batch of 8 head blocks per step. SFT gathers its log-probs on the device
#     (objective.h grads_without_logp) and queues their read for the step's end
#     (engine/deferred_reads.h), where the gradient norm's wait brings them: that one wait per
#     step, none inside it (there were 9, then 2).
#   kto.yaml: the reference model's and the policy's no-grad forwards read each pass's
#     log-probs once (Engine::score; they waited twice per head block: 65 a step), and the
#     gradient pass still waits once per head block (docs/CUDA.md design, steps 2 and 3): 20.
#
#   tests/scripts/emu_step_waits.sh [build-dir]     (default build-emu)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN="$ROOT/${1:-build-emu}/streambp"
T=$(mktemp -d /tmp/emu-step-waits.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$ROOT"
waits() {  # config steps -> the host waits of the whole run
  STREAMBP_CUDA_EMULATION_REPORT=1 "$BIN" train "examples/tiny-chat/$1.yaml" backend=cuda \
    max_steps="$2" save_every=0 eval_every=0 output_dir="$T/$1-$2" >"$T/log-$1-$2" 2>&1 ||
    { cat "$T/log-$1-$2" >&2; exit 1; }
  sed -n 's/^cuda emulation: \([0-9]*\) host waits.*/\1/p' "$T/log-$1-$2"
}
status=0
for case in sft:1 kto:20; do
  config=${case%%:*} expected=${case##*:}
  one=$(waits "$config" 1)
  two=$(waits "$config" 2)
  [[ -n $one && -n $two ]] || { echo "emu_step_waits: no report line (STREAMBP_CUDA_EMULATION_REPORT)" >&2; exit 1; }
  per_step=$((two - one))
  echo "emu_step_waits: $per_step host waits per $config step (1-step run $one, 2-step run $two)"
  if [[ $per_step -ne $expected ]]; then
    echo "emu_step_waits: FAIL: expected $expected per $config step" >&2
    status=1
  fi
done
exit $status

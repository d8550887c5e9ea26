#!/usr/bin/env bash
# Host waits for the device per training step, counted by the emulated CUDA runtime
# (STREAMBP_CUDA_EMULATION_REPORT=1, docs/CUDA.md "Synchronisations"): the difference between a
# 2-step and a 1-step run with backend=cuda. Each count must equal its expectation exactly, so
# that a wait added or removed shows. Part of scripts/test-emu.sh.
#
#   sft.yaml: one micro-batch of 8 head blocks per step. SFT gathers its log-probs on the device
#     (objective/head_route.h ConstantGrads) and queues their read for the step's end
#     (engine/deferred_reads.h), where the gradient norm's wait brings them: that one wait per
#     step, none inside it (there were 9, then 2).
#   kto.yaml: the KL estimate's two no-grad forwards (the policy and the reference on the
#     mismatched pairs) of every micro-batch leave their log-probs on the device, where each
#     micro-batch's part of the estimate is summed (kto_kl_part) for the gradient
#     passes to read; the reference's forward on the batch and the pre-pass stay on the device
#     too, where the backend computes the gradients from them (sequence_token_grads);
#     all of it comes back with the norm: 1 (65, then 20, then 5, then 2). With several ranks
#     the estimate is summed on the host first: one wait more (kto_step.cpp).
#   orpo.yaml: no reference; the pre-pass and its gradients on the device, the norm: 1 (17, then
#     2).
#   simpo.yaml: no reference, a SequenceRoute like ORPO's, added without an engine change: 1.
#   dpo: orpo.yaml's data and model with objective=dpo (the reference is the starting model):
#     the reference's forward, the pre-pass and the gradients on the device, the norm: 1.
#   examples/grpo.yaml and ppo.yaml on the tiny-chat model (head_chunk 16: 28 blocks): their
#     per-token formulas run on the device (policy_token_grads, value_token_grads) and
#     their statistics read the pass's numbers at the step's end. GRPO (beta 0, no reference):
#     the norm alone, 1 (57 before). grpo-kl (beta 0.04): the reference's forward leaves its
#     log-probs on the device, where the formula reads them, and the host's copy comes with the
#     norm: 1 (2 before). PPO: its rollout's three no-grad forwards (old log-probs,
#     reference log-probs, old values) of every micro-batch leave their rows on the device,
#     where the backend computes the rewards, GAE and whitenings and the two models' per-row
#     constants (ppo_rollout_rows), which the gradient passes read there; the host's
#     copies come with the norm, one for both models: 1 (88, then 4, then 2). With several ranks
#     the whitening is summed on the host first: one wait more (ppo_step.cpp).
#
#   tests/scripts/emu_step_waits.sh [build-dir]     (default build-emu)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN="$ROOT/${1:-build-emu}/streambp"
T=$(mktemp -d /tmp/emu-step-waits.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$ROOT"
config() {  # case -> the train command's config and overrides
  case $1 in
    grpo | ppo) echo "examples/$1.yaml model=examples/tiny-chat/config.json" \
      "tokenizer=examples/tiny-chat head_chunk=16 max_tokens=512" ;;
    grpo-kl) echo "$(config grpo) grpo.beta=0.04" ;;
    dpo) echo "examples/tiny-chat/orpo.yaml objective=dpo" ;;
    *) echo "examples/tiny-chat/$1.yaml" ;;
  esac
}
waits() {  # case steps -> the host waits of the whole run (every rank's, added up)
  local name=${1%@*} launch=()
  # shellcheck disable=SC2206 # mpirun's words
  [[ $1 == *@2 ]] && launch=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    STREAMBP_CUDA_EMULATION_DEVICES=2 mpirun -np 2 --oversubscribe --bind-to none
    --mca btl self,vader)
  # shellcheck disable=SC2046 # the config's words are separate arguments
  STREAMBP_CUDA_EMULATION_REPORT=1 "${launch[@]}" "$BIN" train $(config "$name") backend=cuda \
    max_steps="$2" save_every=0 eval_every=0 output_dir="$T/$1-$2" >"$T/log-$1-$2" 2>&1 ||
    { cat "$T/log-$1-$2" >&2; exit 1; }
  sed -n 's/^cuda emulation: \([0-9]*\) host waits.*/\1/p' "$T/log-$1-$2" |
    awk '{ n += $1 } END { if (NR) print n }'
}
status=0
cases=(sft:1 dpo:1 kto:1 orpo:1 simpo:1 grpo:1 grpo-kl:1 ppo:1)
# Two ranks (NCCL emulated over MPI), every rank's waits added up: SFT waits once per step on
# each rank (the gradient reductions complete on the device: NcclCommunicator::wait); PPO's rank
# with a micro-batch waits once more, before its first backward, for the whitening's sums over
# the ranks on the host (ppo_step.cpp), the other rank (an empty slot) once: 3.
command -v mpirun >/dev/null && cases+=(sft@2:2 ppo@2:3)
for case in "${cases[@]}"; do
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

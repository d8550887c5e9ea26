#!/usr/bin/env bash
# The CUDA backend on the emulated CUDA runtime (build-emu, scripts/build.sh emu; docs/FEATURES.md "CUDA
# emulation"): the op suite's ".../cuda" cases, the emulator's own tests, gradcheck of every
# objective in fp32 and bf16 (every mode) and with LoRA, and the LoRA and Hugging Face parity
# fixtures with STREAMBP_TEST_BACKEND=cuda, the NCCL communicator over emulated NCCL, and a run of
# scripts/gpu-check.sh at small sizes. Everything a CPU can check of the CUDA backend.
#   scripts/test-emu.sh            run (after scripts/build.sh emu)
#   scripts/test-emu.sh --targets  print the test programs it needs (scripts/build.sh builds them)
set -euo pipefail
cd "$(dirname "$0")/.."
# Programs whose ".../cuda" cases run here (backend_suite.h), then those that run whole.
suite=(ops_dense_test ops_head_test ops_layer_test ops_gemma_test misuse_test)
# cuda_emulation_fidelity_test: streams, concurrent blocks, pageable copies, tensor-core rounding;
# cuda_fallback_test: the second ways (cuBLASLt algorithms, fp32 attention), per-tensor arena;
# cuda_attention_long_test: attention at STREAMBP_ATTENTION_LONG_KEYS keys (512 here).
whole=(cuda_emulation_test cuda_arena_test cuda_attention_tc_test dist_nccl_emulated_test
  cuda_emulation_fidelity_test cuda_fallback_test cuda_attention_long_test)
# Programs that take the backend from STREAMBP_TEST_BACKEND (test_support.h), and their filters.
on_cuda=(lora_parity_test hf_parity_bf16_test hf_parity_test generate_test objective_parity_test
  sequence_objective_paths_test head_route_test offload_test device_init_test)
declare -A filter=(
  [lora_parity_test]='*'
  # DPO, ORPO, KTO, GRPO and PPO against TRL's numbers on transformers models; the preference
  # objectives' gradients from the device kernel (objective_kernels.h's sequence_token_grads).
  [objective_parity_test]='*'
  # That kernel's route against the host's, to the bit.
  [sequence_objective_paths_test]='*'
  # Every head route against its host version, to the bit (objective/head_route.h).
  [head_route_test]='*'
  [hf_parity_bf16_test]='*'
  # The fixtures' every-mode gradients are the slow third of this program emulated; the bf16
  # program above runs every mode on every fixture already.
  [hf_parity_test]='-*LossLogprobsAndGradientsMatchInEveryMode*'
  # Greedy decoding on the CUDA backend, token for token against transformers.
  [generate_test]='Fixtures/GreedyParity.*'
  # Host offload through the copy stream, the same bits as without: a missing
  # cudaStreamWaitEvent between the copy stream and compute fails here (streams run in the
  # emulation's adversarial order, docs/CUDA.md). SFT; the protocol's refusals.
  [offload_test]='EveryObjective/OffloadIsExact.*/sft:OffloadProtocol.*'
  # Random weights drawn on the device (bench's).
  [device_init_test]='*'
)
# The rest of the programs scripts/gpu-check.sh runs (its dry run below, on a bundle of this tree).
gpu_check_only=(cuda_math_test cuda_gemm_plan_test backend_factory_test)
if [ "${1:-}" = --targets ]; then
  echo "${suite[@]}" "${whole[@]}" "${on_cuda[@]}" "${gpu_check_only[@]}"
  exit 0
fi
dir=${STREAMBP_EMU_DIR:-build-emu}  # another emulation tree (e.g. the coverage one, docs/CUDA.md)
bin="$dir/streambp"
start=$(date +%s)
export OMP_WAIT_POLICY=passive
# Concurrent block pairs (docs/CUDA.md "Blocks of a grid"): every launch of the op suite and the
# emulator's own tests; in the whole-model programs the first 16 launches of each kernel (every
# launch there costs about 20 s of system time in all, mprotect, for kernels the op suite has
# already checked).
export STREAMBP_CUDA_EMULATION_BLOCK_PAIRS=${STREAMBP_CUDA_EMULATION_BLOCK_PAIRS:-16}
pids=()
logs=()
run() {  # name, command...: in the background, two at a time (CI has two cores)
  local log
  log=$(mktemp)
  logs+=("$1:$log")
  shift
  ( "$@" >"$log" 2>&1 ) &
  pids+=($!)
  if [ "${#pids[@]}" -ge 2 ]; then wait_one; fi
}
failed=0
wait_one() {
  local pid=${pids[0]} entry=${logs[0]}
  pids=("${pids[@]:1}")
  logs=("${logs[@]:1}")
  if ! wait "$pid"; then
    echo "test-emu: FAILED: ${entry%%:*}" >&2
    cat "${entry#*:}" >&2
    failed=1
  else
    echo "test-emu: ok: ${entry%%:*} ($(tail -n 1 "${entry#*:}"))"
  fi
  rm -f "${entry#*:}"
}
for t in "${suite[@]}"; do
  run "$t" env STREAMBP_CUDA_EMULATION_BLOCK_PAIRS=all "$dir/tests/$t" --gtest_filter='*/cuda' \
    --gtest_brief=1
done
for t in "${whole[@]}"; do
  run "$t" env STREAMBP_CUDA_EMULATION_BLOCK_PAIRS=all "$dir/tests/$t" --gtest_brief=1
done
for t in "${on_cuda[@]}"; do
  run "$t" env STREAMBP_TEST_BACKEND=cuda "$dir/tests/$t" --gtest_filter="${filter[$t]}" --gtest_brief=1
done
for o in sft dpo grpo ppo; do
  segments=2
  [ "$o" = grpo ] && segments=4
  for p in fp32 bf16; do
    run "gradcheck $o $p" "$bin" gradcheck --model tiny-qwen3 --seq-len 24 --segments "$segments" \
      --backend cuda --objective "$o" --precision "$p"
  done
done
run "gradcheck sft lora" "$bin" gradcheck --model tiny-qwen3 --seq-len 24 --segments 2 \
  --backend cuda --lora-r 4 --lora-targets all-linear
run "gradcheck sft simt attention" env STREAMBP_CUDA_ATTENTION=simt "$bin" gradcheck \
  --model tiny-qwen3 --seq-len 24 --segments 2 --backend cuda
# The second ways, whole: the first 3 algorithms of every cuBLASLt heuristic answer refused, and
# every tensor-core attention launch refused (out of resources) so that each phase runs the fp32
# kernels (tiny-llama: head_dim 16, the tensor cores' by default). Its gradients must still check.
# Both kinds of "gpu fallback: " line must be printed.
with_fallbacks() {
  local out
  out=$("$@" 2>&1) || { echo "$out"; return 1; }
  for kind in gemm attention; do
    grep -q "^gpu fallback: $kind" <<<"$out" || { echo "$out"; echo "no 'gpu fallback: $kind' line"; return 1; }
  done
  tail -n 1 <<<"$out"
}
run "gradcheck sft with gpu fallbacks" with_fallbacks env STREAMBP_CUDA_EMULATION_REFUSE_ALGOS=3 \
  STREAMBP_CUDA_EMULATION_REFUSE_LAUNCH=tc_ "$bin" gradcheck --model tiny-llama --seq-len 24 \
  --segments 2 --backend cuda
# Context parallelism on the CUDA backend, 2 ranks: K/V and dK/dV rows through host copies
# (the MPI communicator cannot address device memory), every mode against base.
if command -v mpirun >/dev/null; then
  run "gradcheck dpo cp 2 (mpirun)" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np 2 --oversubscribe --bind-to none --mca btl self,vader \
    --mca btl_vader_single_copy_mechanism none "$bin" gradcheck --model tiny-qwen3 --seq-len 24 \
    --segments 2 --backend cuda --objective dpo --cp 2 --threads 1
fi
# scripts/gpu-check.sh itself, every stage at a small size against this tree's programs.
run "gpu-check.sh, emulated" bash tests/scripts/gpu_check_emulated.sh "$dir"
run "host waits per step (sft, dpo, kto, orpo, simpo, grpo, grpo-kl, ppo; sft, ppo on 2 ranks)" bash tests/scripts/emu_step_waits.sh "$dir"
# A short training run on the CUDA backend: the trainer's loop, optimizer, checkpoint and metrics;
# beside it the same run on the CPU backend, whose losses, gradient norms and held-out losses
# the CUDA run's must equal within 1e-6 relative (measured 5e-9 and 5e-8): the SFT loss is
# read at the step's end (engine/deferred_reads.h), and a read that came too early shows here.
train_out=$(mktemp -d)
run "train sft (3 steps)" "$bin" train examples/tiny-chat/sft.yaml backend=cuda max_steps=3 \
  save_every=3 eval_every=3 output_dir="$train_out/run"
run "train sft (3 steps) on the cpu" "$bin" train examples/tiny-chat/sft.yaml backend=cpu \
  max_steps=3 save_every=0 eval_every=3 output_dir="$train_out/cpu"
# offload: optimizer on the CUDA backend (pinned host memory, the copy stream, its events): the
# AdamW state in host memory, updated by the CPU, against the CUDA kernel's update on the device;
# 3 micro-batches a step, so the host's sums go back to the device between them. The weights
# and moments must be the same bits (one formula, backend/adamw_math.h; measured equal); the
# norms are summed in another order on the host (fp64, last bits only).
for opt in none optimizer; do
  run "train sft (3 steps, grad_accum 3) on cuda, offload $opt" "$bin" train \
    examples/tiny-chat/sft.yaml backend=cuda max_steps=3 grad_accum=3 save_every=3 \
    offload=$opt output_dir="$train_out/accum-$opt"
done
while [ "${#pids[@]}" -gt 0 ]; do wait_one; done
if [ "$failed" = 0 ] && ! grep -q '"step":3' "$train_out/run/metrics.jsonl"; then
  echo "test-emu: FAILED: train sft wrote no metrics for step 3" >&2
  failed=1
fi
if [ "$failed" = 0 ] && ! python3 - "$train_out/run/metrics.jsonl" "$train_out/cpu/metrics.jsonl" <<'PY'
import json, math, sys
cuda, cpu = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
assert len(cuda) == len(cpu) == 4, (len(cuda), len(cpu))
for a, b in zip(cuda, cpu):
    for key in ("loss", "grad_norm", "eval_loss"):
        if key in b:
            rel = abs(a[key] - b[key]) / abs(b[key])
            assert math.isfinite(a[key]) and rel <= 1e-6, (a["step"], key, a[key], b[key])
print("test-emu: ok: train sft on cuda equals the cpu run (loss, grad_norm, eval_loss)")
PY
then
  echo "test-emu: FAILED: train sft on cuda differs from the cpu run" >&2
  failed=1
fi
for f in model.safetensors optimizer.safetensors; do
  if [ "$failed" = 0 ] && ! cmp -s "$train_out/accum-none/checkpoint-3/$f" \
    "$train_out/accum-optimizer/checkpoint-3/$f"; then
    echo "test-emu: FAILED: offload: optimizer on cuda: $f differs from the device optimizer's" >&2
    failed=1
  fi
done
[ "$failed" = 0 ] && echo "test-emu: ok: offload: optimizer on cuda: weights and moments bit for bit"
rm -rf "$train_out"
if [ "$failed" != 0 ]; then
  echo "test-emu: some emulated CUDA tests failed" >&2
  exit 1
fi
echo "test-emu: the emulated CUDA suite passed in $(( $(date +%s) - start )) s"

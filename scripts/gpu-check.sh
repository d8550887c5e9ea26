#!/usr/bin/env bash
# Step 2 of the GPU check (README "CUDA backend"): run from the repository root on a machine
# with an NVIDIA GPU, after scripts/gpu-bundle.sh made gpu-bundle/bundle.tar.xz elsewhere. Needs
# only the CUDA 13 runtime, cuBLASLt, python3 (PyTorch + transformers for the baseline stage).
#
# Writes $OUT/gpu-check.json and $OUT/gpu-check.md (OUT defaults to ./gpu-check-out), rewritten
# after every stage. Each stage has its own time limit, taken from a total budget (BUDGET
# seconds, default 470: the check fits 8 minutes), so one failing or slow stage does not lose
# the report; a stage past its limit is reported as `timeout`.
#
# Stages: the backend op suite on cuda (every `.../cuda` case, against float64 references;
# the attention cases once more on the fp32 kernels, STREAMBP_CUDA_ATTENTION=simt);
# the Hugging Face parity tests on cuda; `streambp score` of every HF fixture on cuda against
# its expected loss; gradcheck sft/dpo/grpo/ppo in every mode; `plan`; `bench` of Qwen3-0.6B
# (28 layers, bf16) at T = 8k / 32k / 128k with checkpoint and stream interleaved, with the
# bf16 GEMM probe and ledger/device peaks; PyTorch + transformers gradient checkpointing on the
# same step; Qwen3-8B at T = 32k and at plan's longest T; last, with what budget is left, the
# 0.6B 8k step profiled by kernel family and run with the fp32 attention kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-check-out}
BUDGET=${BUDGET:-470}
WORK=$(mktemp -d /tmp/sbp-gpu-check.XXXXXX)
mkdir -p "$OUT"
START=$(date +%s)

BUNDLE=$ROOT/gpu-bundle/bundle.tar.xz
if [[ ! -f $BUNDLE ]]; then
  echo "gpu-check.sh: $BUNDLE missing: run scripts/gpu-bundle.sh on a machine with nvcc first" >&2
  exit 2
fi
mkdir -p "$WORK/bundle"
tar -C "$WORK/bundle" -xJf "$BUNDLE"
BIN=$WORK/bundle/bin
# The bundle's libraries first, then CUDA's: the toolkit's, or the pip wheels' beside PyTorch.
cuda_libs=/usr/local/cuda/lib64
for d in $(python3 -c 'import nvidia, os; p = list(nvidia.__path__)[0]; print(" ".join(os.path.join(p, d, "lib") for d in os.listdir(p)))' 2>/dev/null); do
  cuda_libs=$cuda_libs:$d
done
export LD_LIBRARY_PATH=$WORK/bundle/lib:$cuda_libs:${LD_LIBRARY_PATH:-}
export STREAMBP_TEST_SOURCE_DIR=$ROOT STREAMBP_TEST_BINARY=$BIN/streambp
SB=$BIN/streambp

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$WORK/gpu.txt" 2>&1

summarize() { python3 "$ROOT/tools/gpu_check/summarize.py" "$WORK" "$OUT" || true; }

# stage NAME LIMIT RESULT_FILE COMMAND...: runs COMMAND with at most LIMIT seconds (less when
# the budget is nearly spent), logs to $WORK/NAME.log, records the outcome, rewrites the report.
stage() {
  local name=$1 limit=$2 result=$3
  shift 3
  local left=$((BUDGET - ($(date +%s) - START) - 5))
  ((limit > left)) && limit=$left
  local status rc t0 t1
  if ((limit < 5)); then
    status=skipped rc=-1 t0=0 t1=0 limit=0
    echo "budget spent" >"$WORK/$name.log"
  else
    echo "gpu-check: $name (at most ${limit}s)" >&2
    t0=$(date +%s.%N)
    timeout -k 5 "$limit" "$@" >"$WORK/$name.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    case $rc in
      0) status=pass ;;
      124|137) status=timeout ;;
      *) status=fail ;;
    esac
  fi
  printf '{"name": "%s", "status": "%s", "rc": %d, "seconds": %s, "limit": %d, "result_file": "%s"}\n' \
    "$name" "$status" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" "$limit" "$result" >>"$WORK/stages.jsonl"
  summarize
}

# ---- correctness ----
# cuda_cases PROGRAM FILTER: the program's cuda cases; skipped ones (no usable GPU) are a
# failure of this check, not a pass.
cuda_cases() {
  local out rc=0
  out=$("$BIN/$1" --gtest_filter="$2" --gtest_brief=1 2>&1) || rc=1
  echo "$out"
  if grep -q "SKIPPED" <<<"$out"; then
    echo "$1: the cuda cases were skipped: no usable GPU"
    rc=1
  fi
  return $rc
}
ops() {
  local rc=0
  for t in ops_dense_test ops_layer_test ops_head_test misuse_test; do
    cuda_cases "$t" '*/cuda' || rc=1
  done
  "$BIN/backend_factory_test" --gtest_brief=1 || rc=1
  return $rc
}
# timeout runs programs, not shell functions: the stage functions run in a child bash.
export BIN SB ROOT WORK
export -f cuda_cases ops
stage op_suite_cuda 90 "" bash -c ops
# The attention cases again on the fp32 CUDA-core kernels (attention.cu), which run for head
# dims the tensor-core kernels (attention_tc.cu, the default) do not take.
ops_simt() { STREAMBP_CUDA_ATTENTION=simt cuda_cases ops_layer_test '*Attention*/cuda'; }
export -f ops_simt
stage op_suite_cuda_attention_simt 30 "" bash -c ops_simt

parity() {
  STREAMBP_TEST_BACKEND=cuda "$BIN/hf_parity_test" --gtest_brief=1 &&
    STREAMBP_TEST_BACKEND=cuda "$BIN/hf_parity_bf16_test" --gtest_brief=1
}
export -f parity
stage hf_parity_cuda 60 "" bash -c parity

score_fixtures() {
  local rc=0
  for dir in "$ROOT"/tests/fixtures/hf/*/; do
    [[ -f $dir/tokens.json && -f $dir/expected.json ]] || continue
    local f
    f=$(basename "$dir")
    "$SB" score --model "$dir/model" --input "$dir/tokens.json" --backend cuda \
      --json "$WORK/score-$f.json" || { rc=1; continue; }
    python3 - "$dir/expected.json" "$WORK/score-$f.json" "$f" <<'PY' || rc=1
import json, sys
exp, got, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
rel = abs(got["loss"] - exp["loss"]) / abs(exp["loss"])
lp = max(abs(a - b) for ea, ga in zip(exp["logprobs"], got["logprobs"]) for a, b in zip(ea, ga))
ok = rel < 1e-4 and lp < 1e-3
print(f"{name}: loss {got['loss']:.7f} vs HF {exp['loss']:.7f} (rel {rel:.2e}), "
      f"max |dlogp| {lp:.2e}: {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
  done
  return $rc
}
export -f score_fixtures
stage score_hf_fixtures_cuda 40 "" bash -c score_fixtures

gradchecks() {
  local rc=0 model=$ROOT/tests/fixtures/hf/qwen3_gqa_qknorm/model
  for obj in sft dpo grpo ppo; do
    "$SB" gradcheck --model "$model" --backend cuda --objective $obj --seq-len 96 --segments 4 \
      --layer-chunk 7 --head-chunk 13 --modes checkpoint,stream,recompute+chunked \
      --json "$WORK/gradcheck-$obj.json" || rc=1
  done
  # LoRA: the adapters' gradients on the GPU, in every mode (fp32 only, as on the CPU).
  "$SB" gradcheck --model "$model" --backend cuda --objective grpo --seq-len 96 --segments 4 \
    --layer-chunk 7 --head-chunk 13 --modes checkpoint,stream,recompute+chunked --lora-r 4 \
    --json "$WORK/gradcheck-grpo-lora.json" || rc=1
  return $rc
}
export -f gradchecks
stage gradcheck_cuda 90 "" bash -c gradchecks

# ---- memory and speed ----
stage plan_qwen3_0.6b_8k 20 plan-0.6b.json "$SB" plan --model qwen3-0.6b --dtype bf16 \
  --grad-dtype bf16 --optimizer none --seq-len 8192 --json "$WORK/plan-0.6b.json"
stage plan_qwen3_8b_140GiB 30 plan-8b.json "$SB" plan --model qwen3-8b --dtype bf16 \
  --grad-dtype bf16 --optimizer none --budget 139GiB --modes stream --json "$WORK/plan-8b.json"

bench() {  # bench NAME MODEL T LIMIT
  stage "$1" "$4" "$1.json" "$SB" bench --model "$2" --backend cuda --precision bf16 \
    --seq-len "$3" --modes checkpoint,stream --repeat 1 --warmup 1 --json "$WORK/$1.json"
}
torch_ckpt() {  # torch_ckpt NAME T LIMIT
  stage "$1" "$3" "$1.json" python3 "$ROOT/tools/gpu_check/hf_checkpoint_step.py" \
    --seq-len "$2" --repeat 1 --json "$WORK/$1.json"
}
bench bench_qwen3_0.6b_8k qwen3-0.6b 8192 90
torch_ckpt torch_ckpt_qwen3_0.6b_8k 8192 60
bench bench_qwen3_0.6b_32k qwen3-0.6b 32768 90
torch_ckpt torch_ckpt_qwen3_0.6b_32k 32768 40
bench bench_qwen3_0.6b_128k qwen3-0.6b 131072 60
bench bench_qwen3_8b_32k qwen3-8b 32768 60
longest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["modes"]["stream"]["max_seq_len"])' "$WORK/plan-8b.json" 2>/dev/null || echo 0)
if [[ ${longest:-0} -gt 0 ]]; then
  bench bench_qwen3_8b_plan_longest qwen3-8b "$longest" 60
fi

# ---- diagnostics, with the budget that is left ----
# Where the 0.6B 8k step's time goes, by kernel family (each op synchronised: slower than its
# bench above).
stage profile_qwen3_0.6b_8k 60 profile_qwen3_0.6b_8k.json "$SB" bench --model qwen3-0.6b \
  --backend cuda --precision bf16 --seq-len 8192 --modes stream --repeat 1 --warmup 1 --profile \
  --json "$WORK/profile_qwen3_0.6b_8k.json"
# The same step with the fp32 attention kernels: what the tensor cores bring.
stage bench_qwen3_0.6b_8k_simt_attention 45 bench_qwen3_0.6b_8k_simt_attention.json \
  env STREAMBP_CUDA_ATTENTION=simt "$SB" bench --model qwen3-0.6b --backend cuda \
  --precision bf16 --seq-len 8192 --modes stream --repeat 1 --warmup 1 \
  --json "$WORK/bench_qwen3_0.6b_8k_simt_attention.json"

summarize
echo "gpu-check: report in $OUT/gpu-check.md" >&2
cat "$OUT/gpu-check.md"

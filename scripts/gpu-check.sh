#!/usr/bin/env bash
# Step 2 of the GPU check (README "CUDA backend"): run from the repository root on a machine
# with an NVIDIA GPU, after scripts/gpu-bundle.sh made gpu-bundle/bundle.tar.xz elsewhere. Needs
# only the CUDA 13 runtime, cuBLASLt, python3 (PyTorch + transformers for the baseline stages).
#
#   scripts/gpu-check.sh            # every stage; the report in $OUT (default ./gpu-check-out)
#   scripts/gpu-check.sh --dry-run  # the stages, their limits and estimated work; runs nothing
#
# What comes back, in $OUT (three files, so that a tool returning a handful of files takes all):
#   gpu-check.md, gpu-check.json  the report (tools/gpu_check/summarize.py), rewritten after
#                                 every stage, so a check cut short keeps what it found;
#   logs.tar.gz                   every stage's full log (each cut to its first 256 KiB and last
#                                 768 KiB), env.txt (nvidia-smi, driver, CUDA libraries, which
#                                 libraries our programs load), the stages' JSON results and
#                                 any core file, at most LOG_LIMIT bytes (default 12 MiB; cores
#                                 that do not fit are listed, not packed); also rewritten after
#                                 every stage.
#
# Time: the whole check ends within DEADLINE seconds (default 540: 9 minutes) of its start,
# even if a kernel hangs. Each stage runs one program in its own process group with its own
# limit, capped by what is left of the deadline (less a reserve for the last packing); past
# it the group gets SIGTERM, then SIGKILL 5 s later; a process that does not die even then
# (stuck in the driver) is left behind, reported, and every later GPU stage is skipped (the GPU
# is wedged; CPU-only stages still run). A stage that fails is run once more with
# CUDA_LAUNCH_BLOCKING=1 (kernel errors reported at the launch that caused them), time allowing.
#
# Libraries: the bundle's lib/ (and CUDA's) go on LD_LIBRARY_PATH for our programs only; the
# Python stages (PyTorch) run with the machine's own environment.
#
# For tests on a machine without a GPU (tests/scripts/gpu_check_test.sh): GPU_CHECK_BUNDLE_DIR
# (an unpacked bundle: bin/, lib/), GPU_CHECK_MAX_LIMIT (caps every stage's limit, seconds),
# GPU_CHECK_PYTHON (the interpreter of the PyTorch stages), GPU_CHECK_STAGES (a regex: run only
# the stages whose name matches), GPU_CHECK_SKIP (a regex: leave out the stages whose name
# matches).
#
# GPU_CHECK_SMALL=1: every stage at a small size, for the dry run against the emulated CUDA
# backend in CI (tests/scripts/gpu_check_emulated.sh, a bundle of build-emu's programs): gtest
# stages run one of every GPU_CHECK_SMALL_SHARDS (default 8) cases (gtest sharding), gradchecks
# at T = 32, bench and profile stages on tiny-qwen3 at T = 64, the PyTorch baseline with
# --small (a tiny model, on the CPU when torch has no GPU). Each stage's command is otherwise the
# one a GPU run uses: the dry run shows every stage able to pass.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DRY_RUN=0
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  "") ;;
  *) echo "usage: scripts/gpu-check.sh [--dry-run]" >&2; exit 2 ;;
esac
START=$(date +%s)
DEADLINE=${DEADLINE:-540}
RESERVE=15  # seconds kept for the last report and packing
MAX_LIMIT=${GPU_CHECK_MAX_LIMIT:-100000}
LOG_LIMIT=${LOG_LIMIT:-$((12 << 20))}
ONLY=${GPU_CHECK_STAGES:-.}
SKIP_RE=${GPU_CHECK_SKIP:-}
PY=${GPU_CHECK_PYTHON:-python3}
OUT=${OUT:-$ROOT/gpu-check-out}
SMALL=${GPU_CHECK_SMALL:-0}
if ((SMALL)); then
  export GTEST_TOTAL_SHARDS=${GPU_CHECK_SMALL_SHARDS:-8} GTEST_SHARD_INDEX=0
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sbp-gpu-check.XXXXXX")
((DRY_RUN)) || mkdir -p "$OUT"
mkdir -p "$WORK/logs" "$WORK/results" "$WORK/cores" "$WORK/run"
: >"$WORK/stages.jsonl"

now() { date +%s; }
left() { echo $((DEADLINE - ($(now) - START))); }

# ---- the bundle ----
if [[ -n ${GPU_CHECK_BUNDLE_DIR:-} ]]; then
  BUNDLE_DIR=$GPU_CHECK_BUNDLE_DIR
elif ((DRY_RUN)); then
  BUNDLE_DIR=$ROOT/gpu-bundle/unpacked  # not read in a dry run
else
  BUNDLE=$ROOT/gpu-bundle/bundle.tar.xz
  if [[ ! -f $BUNDLE ]]; then
    echo "gpu-check.sh: $BUNDLE missing: run scripts/gpu-bundle.sh on a machine with nvcc first" >&2
    exit 2
  fi
  BUNDLE_DIR=$WORK/bundle
  mkdir -p "$BUNDLE_DIR"
  tar -C "$BUNDLE_DIR" -xJf "$BUNDLE"
fi
BIN=$BUNDLE_DIR/bin
SB=$BIN/streambp
# Our programs' library path: the bundle's libraries first, then CUDA's (the toolkit's, or the
# pip wheels' beside PyTorch). Never exported: `ours` puts it on one command.
cuda_libs=/usr/local/cuda/lib64
if ((!DRY_RUN)); then
  for d in $("$PY" -c 'import nvidia, os; p = list(nvidia.__path__)[0]; print(" ".join(os.path.join(p, d, "lib") for d in os.listdir(p)))' 2>/dev/null); do
    cuda_libs=$cuda_libs:$d
  done
fi
OUR_LD=$BUNDLE_DIR/lib:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ours() { env LD_LIBRARY_PATH="$OUR_LD" STREAMBP_TEST_SOURCE_DIR="$ROOT" STREAMBP_TEST_BINARY="$SB" "$@"; }
export -f ours
export OUR_LD ROOT SB BIN PY WORK

# ---- running one stage ----
# run_limited LIMIT LOG DIR BLOCKING CMD...: runs CMD (a program or an exported function) in
# DIR, in a session and process group of its own, output to LOG, CUDA_LAUNCH_BLOCKING=1 with
# BLOCKING = 1, cores up to 256 MiB; returns its status, 124 after a kill at LIMIT seconds, 125
# if it outlived SIGKILL.
run_limited() {
  local limit=$1 log=$2 dir=$3 blocking=$4
  shift 4
  (
    cd "$dir" || exit 1
    ulimit -c $((256 * 1024)) 2>/dev/null
    ((blocking)) && export CUDA_LAUNCH_BLOCKING=1
    exec setsid -w bash -c '"$@"' gpu-check-stage "$@"
  ) >"$log" 2>&1 </dev/null &
  local pid=$! end=$(($(date +%s%N) / 1000000 + limit * 1000))
  # Any process of the stage's session still running (not a zombie): the program may ignore
  # SIGTERM while the shell that started it is gone.
  alive() { ps -e -o sid=,stat= | awk -v s="$1" '$1 == s && $2 !~ /^Z/ {f = 1} END {exit !f}'; }
  leader() { [[ -e /proc/$1 ]] && [[ $(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) != Z ]]; }
  while leader "$pid"; do
    if (($(date +%s%N) / 1000000 >= end)); then
      echo "gpu-check: past its ${limit}s limit: SIGTERM" >>"$log"
      kill -TERM -- "-$pid" 2>/dev/null
      local i
      for i in $(seq 50); do alive "$pid" || break; sleep 0.1; done
      if alive "$pid"; then
        echo "gpu-check: still running 5 s after SIGTERM: SIGKILL" >>"$log"
        kill -KILL -- "-$pid" 2>/dev/null
        for i in $(seq 50); do alive "$pid" || break; sleep 0.1; done
      fi
      if alive "$pid"; then
        echo "gpu-check: a process of session $pid survived SIGKILL (stuck in the driver?): left behind" >>"$log"
        return 125
      fi
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.2
  done
  wait "$pid"
  local rc=$?
  kill -KILL -- "-$pid" 2>/dev/null  # what the program left running in the background
  return $rc
}

GPU_WEDGED=0
# Keeps each log's head and tail (a runaway log must not crowd out the rest).
cut_log() {
  local f=$1
  if (($(stat -c %s "$f") > (1 << 20))); then
    { head -c $((256 << 10)) "$f"; printf '\n[... gpu-check: %d bytes cut ...]\n' $(($(stat -c %s "$f") - (1 << 20))); tail -c $((768 << 10)) "$f"; } >"$f.cut"
    mv "$f.cut" "$f"
  fi
}
# Packs logs, results, env and cores into $OUT/logs.tar.gz under LOG_LIMIT bytes.
pack() {
  local list=$WORK/pack.list
  (cd "$WORK" && { ls logs/* results/* 2>/dev/null; echo stages.jsonl; [[ -f env.txt ]] && echo env.txt; }) >"$list"
  local f budget size
  budget=$((LOG_LIMIT - $(cd "$WORK" && cat "$list" | xargs -r du -cb 2>/dev/null | tail -1 | cut -f1)))
  : >"$WORK/cores.txt"
  for f in "$WORK"/cores/*; do
    [[ -f $f ]] || continue
    size=$(stat -c %s "$f")
    if ((size < budget)); then
      echo "cores/$(basename "$f")" >>"$list"
      budget=$((budget - size))
      echo "$(basename "$f") $size bytes: packed" >>"$WORK/cores.txt"
    else
      echo "$(basename "$f") $size bytes: over the size limit, not packed" >>"$WORK/cores.txt"
    fi
  done
  echo cores.txt >>"$list"
  tar -C "$WORK" -czf "$OUT/logs.tar.gz.part" -T "$list" 2>/dev/null
  if (($(stat -c %s "$OUT/logs.tar.gz.part") > LOG_LIMIT)); then  # compressed logs rarely grow
    tar -C "$WORK" -czf "$OUT/logs.tar.gz.part" stages.jsonl cores.txt $(cd "$WORK" && ls env.txt 2>/dev/null)
  fi
  mv -f "$OUT/logs.tar.gz.part" "$OUT/logs.tar.gz"
}
report() {
  python3 "$ROOT/tools/gpu_check/summarize.py" "$WORK" "$OUT" >/dev/null 2>&1 ||
    echo "gpu-check: summarize.py failed" >&2
  pack
}

# stage NAME LIMIT KIND CMD...: KIND is gpu (skipped once the GPU is wedged), gpu-cases (gpu,
# and a gtest program whose skipped cases mean no usable GPU: a failure here), or cpu.
# Results go to $WORK/results/NAME.json when the command writes one there.
declare -a PLAN_NAMES=() PLAN_LIMITS=() PLAN_WORK=()
WORK_NOTE=""  # the estimate the next stage is planned with (--dry-run prints it)
stage() {
  local name=$1 limit=$2 kind=$3
  shift 3
  [[ $name =~ $ONLY ]] || return 0
  [[ -n $SKIP_RE && $name =~ $SKIP_RE ]] && return 0
  if ((DRY_RUN)); then
    PLAN_NAMES+=("$name") PLAN_LIMITS+=("$limit") PLAN_WORK+=("$WORK_NOTE")
    WORK_NOTE=""
    return 0
  fi
  WORK_NOTE=""
  ((limit > MAX_LIMIT)) && limit=$MAX_LIMIT
  run_stage "$name" "$limit" "$kind" 0 "$@"
  local status=$LAST_STATUS
  if [[ $status == fail ]]; then  # once more, with errors raised at the launch that caused them
    run_stage "$name.blocking" "$limit" "$kind" 1 "$@"
  fi
}
LAST_STATUS=""
run_stage() {
  local name=$1 limit=$2 kind=$3 rerun=$4
  shift 4
  local avail=$(($(left) - RESERVE)) status rc=-1 t0 t1 log=$WORK/logs/$name.log
  ((limit > avail)) && limit=$avail
  local dir=$WORK/run/$name
  mkdir -p "$dir"
  t0=$(date +%s.%N)
  if ((GPU_WEDGED)) && [[ $kind != cpu ]]; then
    status=skipped limit=0
    echo "skipped: an earlier stage's process could not be killed (GPU wedged)" >"$log"
  elif ((limit < 2)); then
    status=skipped limit=0
    echo "skipped: the ${DEADLINE}s deadline is spent" >"$log"
  else
    echo "gpu-check: $name (at most ${limit}s)" >&2
    run_limited "$limit" "$log" "$dir" "$rerun" "$@"
    rc=$?
    case $rc in
      0) status=pass ;;
      124) status=timeout ;;
      125) status=timeout GPU_WEDGED=1 ;;
      *) status=fail ;;
    esac
    if [[ $status == pass && $kind == gpu-cases ]] && grep -q "SKIPPED" "$log"; then
      echo "gpu-check: the cuda cases were skipped: no usable GPU" >>"$log"
      status=fail
    fi
  fi
  t1=$(date +%s.%N)
  # Core files the stage left (core_pattern "core" or "core.PID": its own directory).
  local c
  for c in "$dir"/core*; do
    [[ -f $c ]] && gzip -1 -c "$c" >"$WORK/cores/$name.$(basename "$c").gz" && rm -f "$c"
  done
  cut_log "$log"
  printf '{"name": "%s", "status": "%s", "rc": %d, "seconds": %s, "limit": %d, "rerun": %s, "result_file": "%s"}\n' \
    "$name" "$status" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" "$limit" \
    "$([[ $rerun == 1 ]] && echo true || echo false)" \
    "$([[ -f $WORK/results/${name%.blocking}.json ]] && echo "results/${name%.blocking}.json")" \
    >>"$WORK/stages.jsonl"
  LAST_STATUS=$status
  report
}
R=$WORK/results  # stage results: $R/NAME.json
SMALL_PY=""
((SMALL)) && SMALL_PY=--small
# The profile and simt-attention bench stages' model and length (GPU_CHECK_SMALL: tiny ones).
PROFILE_ARGS="--model qwen3-0.6b --seq-len 8192"
((SMALL)) && PROFILE_ARGS="--model tiny-qwen3 --seq-len 64"
export PROFILE_ARGS

# ---- the environment: what ran, on what ----
environment() {
  {
    echo "== date"; date -u
    echo "== uname"; uname -a
    echo "== nvidia-smi"; nvidia-smi
    echo "== nvidia-smi -q"; nvidia-smi -q
    echo "== driver"; cat /proc/driver/nvidia/version
    echo "== CUDA libraries (ldconfig)"; ldconfig -p | grep -E 'libcuda\.|cublas|cudart|nccl'
    echo "== /usr/local/cuda*"; ls -d /usr/local/cuda* && cat /usr/local/cuda*/version.json 2>/dev/null | head -40
    echo "== what streambp loads (with our LD_LIBRARY_PATH)"; ours ldd "$SB"
    echo "== core_pattern"; cat /proc/sys/kernel/core_pattern
    echo "== cpu, memory, disk"; nproc; free -g; df -h /tmp .
    echo "== python"; "$PY" -c 'import sys, torch, transformers; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda); print("transformers", transformers.__version__)'
  } 2>&1
}
export -f environment
# gpu.txt: one line for the report's head.
if ((!DRY_RUN)); then
  (timeout -k 2 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    >"$WORK/gpu.txt" 2>&1 &)
fi
stage environment 30 cpu bash -c 'environment >"$WORK/env.txt"; cat "$WORK/env.txt"'

# ---- correctness: one program per stage ----
# The CPU-only checks of the bundle's arithmetic (fast; they also show the bundle runs here).
stage cuda_math_test 20 cpu ours "$BIN/cuda_math_test" --gtest_brief=1
stage cuda_gemm_plan_test 20 cpu ours "$BIN/cuda_gemm_plan_test" --gtest_brief=1
stage cuda_arena_test 20 cpu ours "$BIN/cuda_arena_test" --gtest_brief=1
stage backend_factory_test 30 gpu ours "$BIN/backend_factory_test" --gtest_brief=1
# The backend op suite's cuda cases against float64 references: seconds each on the CPU
# (`ctest -L gpu` lists them); the GPU adds context creation and cuBLASLt's first calls.
for t in ops_dense_test ops_layer_test ops_head_test ops_gemma_test misuse_test; do
  WORK_NOTE="the */cuda cases of $t"
  stage "$t" 60 gpu-cases ours "$BIN/$t" --gtest_filter='*/cuda' --gtest_brief=1
done
# The attention cases again on the fp32 CUDA-core kernels (attention.cu), which run for head
# dims the tensor-core kernels (attention_tc.cu, the default) do not take.
stage ops_layer_test_attention_simt 40 gpu-cases env STREAMBP_CUDA_ATTENTION=simt \
  bash -c 'ours "$BIN/ops_layer_test" --gtest_filter="*Attention*/cuda" --gtest_brief=1'
stage hf_parity_test 60 gpu env STREAMBP_TEST_BACKEND=cuda \
  bash -c 'ours "$BIN/hf_parity_test" --gtest_brief=1'
stage hf_parity_bf16_test 60 gpu env STREAMBP_TEST_BACKEND=cuda \
  bash -c 'ours "$BIN/hf_parity_bf16_test" --gtest_brief=1'

# `streambp score` of each HF fixture against its expected loss: one stage per fixture.
score_fixture() {  # score_fixture NAME: the loss and log-probs within 1e-4 / 1e-3 of HF's
  local dir=$ROOT/tests/fixtures/hf/$1
  ours "$SB" score --model "$dir/model" --input "$dir/tokens.json" --backend cuda \
    --json "$WORK/results/score_$1.json" || return 1
  python3 - "$dir/expected.json" "$WORK/results/score_$1.json" "$1" <<'PY'
import json, sys
exp, got, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
rel = abs(got["loss"] - exp["loss"]) / abs(exp["loss"])
lp = max(abs(a - b) for ea, ga in zip(exp["logprobs"], got["logprobs"]) for a, b in zip(ea, ga))
ok = rel < 1e-4 and lp < 1e-3
print(f"{name}: loss {got['loss']:.7f} vs HF {exp['loss']:.7f} (rel {rel:.2e}), "
      f"max |dlogp| {lp:.2e}: {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
}
export -f score_fixture
for dir in "$ROOT"/tests/fixtures/hf/*/; do
  [[ -f $dir/tokens.json && -f $dir/expected.json ]] || continue
  f=$(basename "$dir")
  WORK_NOTE="a forward of a tiny fixture model"
  stage "score_$f" 20 gpu bash -c "score_fixture $f"
done

# gradcheck of each objective in every mode (T = 96, a tiny fixture model; a few seconds on
# the CPU), and LoRA's adapter gradients.
GC_MODEL=$ROOT/tests/fixtures/hf/qwen3_gqa_qknorm/model
GC_T=96
((SMALL)) && GC_T=32
for obj in sft dpo grpo ppo; do
  WORK_NOTE="gradcheck: one step per mode plus the float64 reference, T = 96"
  stage "gradcheck_$obj" 45 gpu ours "$SB" gradcheck --model "$GC_MODEL" --backend cuda \
    --objective $obj --seq-len $GC_T --segments 4 --layer-chunk 7 --head-chunk 13 \
    --modes checkpoint,stream,recompute+chunked --json "$R/gradcheck_$obj.json"
done
stage gradcheck_grpo_lora 45 gpu ours "$SB" gradcheck --model "$GC_MODEL" --backend cuda \
  --objective grpo --seq-len $GC_T --segments 4 --layer-chunk 7 --head-chunk 13 \
  --modes checkpoint,stream,recompute+chunked --lora-r 4 --json "$R/gradcheck_grpo_lora.json"
# Host offload (checkpoints and the residual-stream gradient): the copy stream, its events and
# pinned blocks; the same gradients as base.
stage gradcheck_dpo_offload 45 gpu ours "$SB" gradcheck --model "$GC_MODEL" --backend cuda \
  --objective dpo --seq-len $GC_T --segments 4 --layer-chunk 7 --head-chunk 13 \
  --modes checkpoint,stream --offload checkpoints+residual_grad --json "$R/gradcheck_dpo_offload.json"

# ---- memory and speed ----
# The plans (CPU only: the meta backend) of the bench stages below, to set beside their ledgers.
stage plan_qwen3_0.6b_8k 20 cpu ours "$SB" plan --model qwen3-0.6b --dtype bf16 \
  --grad-dtype bf16 --optimizer none --seq-len 8192 --json "$R/plan_qwen3_0.6b_8k.json"
stage plan_qwen3_8b_4layers_32k 30 cpu ours "$SB" plan --model qwen3-8b --layers 4 --dtype bf16 \
  --grad-dtype bf16 --optimizer none --seq-len 32768 --modes stream \
  --json "$R/plan_qwen3_8b_4layers_32k.json"

# bench NAME MODEL T MODE LIMIT [LAYERS]: one mode, one timed step, no warm-up (the first
# step's cuBLASLt heuristic queries are in its time: bounded, ~tens of us per shape).
# Work estimates (bf16; ~0.6B: 0.44B layer parameters, V d = 0.16B; FLOPs ~ 8 P T for a
# step with the forward recomputed, plus causal attention ~ 3.5 x 2 T^2 H h per layer).
# Start-up is mostly random weights, drawn on the host one tensor at a time: 22 ns of CPU per
# parameter (core/rng.h normal, measured on the development machine), so ~13 s for 0.6B and
# ~45 s for the 2B parameters of 8B's embeddings, head and 4 layers.
bench() {
  local name=$1 model=$2 T=$3 mode=$4 limit=$5 layers=${6:-}
  ((SMALL)) && model=tiny-qwen3 T=64 layers=""
  stage "$name" "$limit" gpu ours "$SB" bench --model "$model" --backend cuda --precision bf16 \
    --seq-len "$T" --modes "$mode" --repeat 1 --warmup 0 ${layers:+--layers "$layers"} \
    --json "$R/$name.json"
}
torch_ckpt() {  # torch_ckpt NAME T LIMIT LAYERS: PyTorch's own environment, no LD_LIBRARY_PATH
  local T=$2
  ((SMALL)) && T=64
  stage "$1" "$3" gpu "$PY" "$ROOT/tools/gpu_check/hf_checkpoint_step.py" --seq-len "$T" \
    --repeat 1 --layers "$4" ${SMALL_PY:+$SMALL_PY} --json "$R/$1.json"
}
# 0.6B, 8k, 28 layers: ~3e13 layer + 1e13 head + 3e13 attention FLOPs = 0.07 PFLOP, under 1 s
# at 100 TFLOP/s; the rest is start-up (random weights for 0.6B parameters, CUDA context).
WORK_NOTE="0.07 PFLOP + 0.6B random weights"
bench bench_qwen3_0.6b_8k_checkpoint qwen3-0.6b 8192 checkpoint 60
WORK_NOTE="0.07 PFLOP + 0.6B random weights"
bench bench_qwen3_0.6b_8k_stream qwen3-0.6b 8192 stream 60
WORK_NOTE="two PyTorch steps (warm-up + timed) of 0.07 PFLOP + import"
torch_ckpt torch_ckpt_qwen3_0.6b_8k 8192 60 28
# 32k and 128k with 8 and 4 layers: attention grows as T^2 (1.9e13 and 3.1e14 FLOPs per layer).
WORK_NOTE="8 layers: 0.2 PFLOP"
bench bench_qwen3_0.6b_32k_stream_8layers qwen3-0.6b 32768 stream 60 8
WORK_NOTE="two PyTorch steps of 0.2 PFLOP"
torch_ckpt torch_ckpt_qwen3_0.6b_32k_8layers 32768 60 8
WORK_NOTE="4 layers: 1.3 PFLOP (attention)"
bench bench_qwen3_0.6b_128k_stream_4layers qwen3-0.6b 131072 stream 60 4
# 8B shapes (d 4096, F 12288, 32 x 128 heads) at 32k, 4 of its 36 layers: ~4e13 layer and
# 1.2e14 attention FLOPs per layer, 0.7 PFLOP, plus ~2.5B random weights (embeddings and head).
WORK_NOTE="4 layers: 0.7 PFLOP + 2.5B random weights"
bench bench_qwen3_8b_32k_stream_4layers qwen3-8b 32768 stream 90 4
# The same step with and without offloaded checkpoints, interleaved (time: the copies should
# hide behind the layers), the device ledger beside the plan's two spaces.
stage plan_qwen3_8b_4layers_32k_offload 30 cpu ours "$SB" plan --model qwen3-8b --layers 4 \
  --dtype bf16 --grad-dtype bf16 --optimizer none --seq-len 32768 --modes stream \
  --offload checkpoints+residual_grad --json "$R/plan_qwen3_8b_4layers_32k_offload.json"
OFFLOAD_ARGS="--model qwen3-8b --seq-len 32768 --layers 4"
((SMALL)) && OFFLOAD_ARGS="--model tiny-qwen3 --seq-len 64"
WORK_NOTE="4 layers: 2 x 0.7 PFLOP + 2.5B random weights"
stage bench_qwen3_8b_32k_stream_4layers_offload 120 gpu ours "$SB" bench $OFFLOAD_ARGS \
  --backend cuda --precision bf16 --modes stream --repeat 1 --warmup 0 \
  --offload none,checkpoints+residual_grad --json "$R/bench_qwen3_8b_32k_stream_4layers_offload.json"

# ---- diagnostics, with the time that is left ----
# Where the 0.6B 8k step's time goes, by kernel family (each op synchronised).
WORK_NOTE="0.07 PFLOP, every op synchronised"
stage profile_qwen3_0.6b_8k_stream 60 gpu ours "$SB" bench $PROFILE_ARGS --backend cuda \
  --precision bf16 --modes stream --repeat 1 --warmup 0 --profile \
  --json "$R/profile_qwen3_0.6b_8k_stream.json"
# The same step with the fp32 attention kernels: what the tensor cores bring.
WORK_NOTE="0.07 PFLOP, attention on CUDA cores"
stage bench_qwen3_0.6b_8k_stream_simt_attention 60 gpu env STREAMBP_CUDA_ATTENTION=simt \
  bash -c 'ours "$SB" bench $PROFILE_ARGS --backend cuda --precision bf16 \
    --modes stream --repeat 1 --warmup 0 --json "$WORK/results/bench_qwen3_0.6b_8k_stream_simt_attention.json"'

if ((DRY_RUN)); then
  total=0
  printf '%-44s %6s  %s\n' stage limit "work"
  for i in "${!PLAN_NAMES[@]}"; do
    printf '%-44s %5ss  %s\n' "${PLAN_NAMES[$i]}" "${PLAN_LIMITS[$i]}" "${PLAN_WORK[$i]}"
    total=$((total + PLAN_LIMITS[i]))
  done
  echo "${#PLAN_NAMES[@]} stages; limits add up to ${total}s; the deadline (${DEADLINE}s less ${RESERVE}s) caps what runs"
  rm -rf "$WORK"
  exit 0
fi
report
[[ -z ${GPU_CHECK_BUNDLE_DIR:-} ]] && rm -rf "$WORK/bundle"  # the unpacked programs (~100 MB); logs stay
echo "gpu-check: report in $OUT/gpu-check.md, logs in $OUT/logs.tar.gz ($(stat -c %s "$OUT/logs.tar.gz") bytes), $(($(now) - START))s" >&2
cat "$OUT/gpu-check.md"
grep -q '"status": "\(fail\|timeout\)"' "$WORK/stages.jsonl" && exit 1
exit 0

# The GPU check's stages, in the order of their value (sourced after tools/gpu_check/lib.sh by
# scripts/gpu-check.sh and scripts/gpu-followup.sh): the preflight, then correctness (what a
# wrong kernel would spoil for every later number), then one profile of the 8K step (where its
# time goes: the most diagnostic number), then speed and memory at long and 8B-sized shapes.
#
# Each limit is an estimate of the stage's work on one H100 (written beside it: WORK_NOTE, which
# --dry-run prints) with a margin of about 2-3x, at least 15 s (10 for the CPU-only plans); a
# limit only bounds a hang, the stage ends when its work does. The estimates rest on these measurements (docs/CUDA.md "The GPU check"):
# - the host's part: a gtest program's float64 references and a gradcheck's float64 step run on
#   the host as in the CPU run of the same cases, timed on the 2-core development machine
#   (AMD EPYC Zen 4; the GPU machine has 16 cores: a bound from above);
# - a CUDA context, cuBLASLt's handle and the 1 GiB arena segment: ~1-3 s per process (lazy
#   module loading, CUDA 12+: only the kernels a process launches are loaded);
# - random weights drawn on the device (the backend's initialisation, issue 57 item 3): well
#   under a second even for the 2.0B parameters of an 8B model's embeddings, untied head and
#   4 layers (0.62B + 0.62B + 4 x 0.19B); the host's normal draw takes 22 ns a parameter, ~45 s
#   for those: without device-side weights the 8B stage's limit would not hold;
# - bf16 GEMMs at ~600 TFLOP/s and our tensor-core attention (TF32 split products, accumulators
#   in shared memory) at 50-100 TFLOP/s, the rest memory-bound at ~2 TB/s.
# GPU_CHECK_SMALL=1 (the emulated dry run): the same commands at tiny sizes.

PROFILE_ARGS="--model qwen3-0.6b --seq-len 8192"
GC_MODEL=$ROOT/tests/fixtures/hf/qwen3_gqa_qknorm/model
GC_T=96
if ((SMALL)); then
  PROFILE_ARGS="--model tiny-qwen3 --seq-len 64"
  GC_T=32
fi
export PROFILE_ARGS GC_MODEL GC_T

# ---- the stages' commands (exported: each stage runs in a shell of its own) ----
# The preflight (tools/gpu_check/preflight.py) and the long listing of the machine (env.txt).
preflight_stage() {
  {
    echo "== date"; date -u
    echo "== uname"; uname -a
    echo "== nvidia-smi"; timeout 20 nvidia-smi
    echo "== nvidia-smi -q"; timeout 20 nvidia-smi -q
    echo "== driver"; cat /proc/driver/nvidia/version
    echo "== CUDA libraries (ldconfig)"; ldconfig -p | grep -E 'libcuda\.|cublas|cudart|nccl'
    echo "== /usr/local/cuda*"; ls -d /usr/local/cuda* && cat /usr/local/cuda*/version.json 2>/dev/null | head -40
    echo "== what streambp loads (with our LD_LIBRARY_PATH)"; env LD_LIBRARY_PATH="$OUR_LD" ldd "$SB"
    echo "== bundle libraries"; cat "$WORK/runtime.txt" 2>/dev/null
    echo "== core_pattern"; cat /proc/sys/kernel/core_pattern
    echo "== cpu, memory, disk"; nproc; free -g; df -h "${TMPDIR:-/tmp}" .
  } >"$WORK/env.txt" 2>&1
  local small=()
  ((SMALL)) && small=(--small)
  python3 "$ROOT/tools/gpu_check/preflight.py" --bin "$BIN" --streambp "$SB" --our-ld "$OUR_LD" \
    --env-file "$WORK/env_vars.txt" --python "$PY" --json "$R/preflight.json" "${small[@]}"
}
# The CPU-only tests of the bundle's arithmetic (cuda_math, the GEMM plans, the arena's
# bookkeeping): they also show the bundle's CPU code runs on this processor.
bundle_cpu_tests() {
  local t
  for t in cuda_math_test cuda_gemm_plan_test cuda_arena_test; do
    item "$t" 15 ours "$BIN/$t" --gtest_filter='*' --gtest_brief=1
  done
  items_done
}
# score_fixture NAME: `streambp score` of an HF fixture: loss and log-probs within 1e-4 / 1e-3.
score_fixture() {
  local dir=$ROOT/tests/fixtures/hf/$1
  ours "$SB" score --model "$dir/model" --input "$dir/tokens.json" --backend cuda \
    --json "$R/score_$1.json" || return 1
  python3 - "$dir/expected.json" "$R/score_$1.json" "$1" <<'PY'
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
scores() {
  local dir
  for dir in "$ROOT"/tests/fixtures/hf/*/; do
    [[ -f $dir/tokens.json && -f $dir/expected.json ]] || continue
    item "$(basename "$dir")" 15 score_fixture "$(basename "$dir")"
  done
  items_done
}
# Every objective in every mode against the float64 reference (T = 96, a tiny fixture model),
# one JSON each: results/gradcheck_ITEM.json.
gradchecks() {
  local gc=(gradcheck --model "$GC_MODEL" --backend cuda --seq-len "$GC_T" --segments 4
            --layer-chunk 7 --head-chunk 13) every=(--modes checkpoint,stream,recompute+chunked) o
  for o in sft dpo grpo ppo kto orpo; do
    item "$o" 15 ours "$SB" "${gc[@]}" "${every[@]}" --objective "$o" --json "$R/gradcheck_$o.json"
  done
  item sft_bf16 15 ours "$SB" "${gc[@]}" "${every[@]}" --precision bf16 --json "$R/gradcheck_sft_bf16.json"
  # LoRA's adapter gradients (rank 4: bf16 parts of odd alignment in the adapters' GEMMs).
  item grpo_lora 15 ours "$SB" "${gc[@]}" "${every[@]}" --objective grpo --lora-r 4 \
    --json "$R/gradcheck_grpo_lora.json"
  # Host offload (checkpoints and the residual-stream gradient): the copy stream, its events
  # and pinned blocks; the same gradients as base.
  item dpo_offload 15 ours "$SB" "${gc[@]}" --modes checkpoint,stream --objective dpo \
    --offload checkpoints+residual_grad --json "$R/gradcheck_dpo_offload.json"
  items_done
}
# Attention at 8K and 32K keys against a float64 host reference on sampled rows
# (tests/backend/cuda_attention_long_test.cpp; its own small default on the emulated device).
attention_long() {
  local keys=()
  ((SMALL)) || keys=(STREAMBP_ATTENTION_LONG_KEYS=8192,32768)
  env -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX "${keys[@]}" bash -c \
    'ours "$BIN/cuda_attention_long_test" --gtest_filter="CudaAttentionLong.*" --gtest_brief=1'
}
# sanitize TOOL: compute-sanitizer TOOL on a few small op-suite cases, one item per program, each
# tensor its own allocation (ours). Chosen for what the emulator cannot see: attention's shared
# memory and warps (tensor-core and fp32 kernels, several head dims), the block reductions
# (norms, log-softmax, entropy, sums of squares), GEMM conversions and cuBLASLt's calls, the
# embedding's device sort, the index checks' records.
sanitize() {
  local tool=$1
  if ! command -v compute-sanitizer >/dev/null && ! ls /usr/local/cuda*/bin/compute-sanitizer >/dev/null 2>&1; then
    ((SMALL)) || { echo "gpu-check: skipped: compute-sanitizer not found (PATH, /usr/local/cuda*/bin)"; return 77; }
  fi
  export GPU_CHECK_SANITIZER=$tool
  # The whole of each filter (no GPU_CHECK_SMALL sharding: they are small already).
  unset GTEST_TOTAL_SHARDS GTEST_SHARD_INDEX
  local c='All/BackendOps.' layer dense head
  layer="${c}AttentionModelHeadDimsAcrossTiles/cuda:${c}AttentionMatchesFloat64AndFiniteDifferences/cuda:${c}RmsNormForwardBackward/cuda"
  dense="${c}GemmBf16EveryDtypeCombination/cuda:${c}SumSquaresInFloat64/cuda:${c}BiasAndReductions/cuda"
  head="${c}LogSoftmaxTargetAndLogitsGradient/cuda:${c}EntropyMatchesFloat64/cuda"
  if [[ $tool == memcheck ]]; then  # memory faults also where no shared memory is involved
    layer+=":${c}EmbeddingForwardBackwardWithRepeatedIds/cuda:${c}RopeForwardBackward/cuda"
    head+=":${c}SequenceTokenGradsMatchTheirLossInFloat64/cuda"
  fi
  item ops_layer_test 25 ours "$BIN/ops_layer_test" --gtest_brief=1 --gtest_filter="$layer"
  item ops_dense_test 15 ours "$BIN/ops_dense_test" --gtest_brief=1 --gtest_filter="$dense"
  item ops_head_test 15 ours "$BIN/ops_head_test" --gtest_brief=1 --gtest_filter="$head"
  items_done
}
# The plans (CPU only: the meta backend) of the bench stages, to set beside their ledgers.
plans() {
  local p=(plan --dtype bf16 --grad-dtype bf16 --optimizer none)
  item qwen3_0.6b_8k 10 ours "$SB" "${p[@]}" --model qwen3-0.6b --seq-len 8192 \
    --json "$R/plan_qwen3_0.6b_8k.json"
  item qwen3_8b_4layers_32k 10 ours "$SB" "${p[@]}" --model qwen3-8b --layers 4 --seq-len 32768 \
    --modes stream --json "$R/plan_qwen3_8b_4layers_32k.json"
  item qwen3_8b_4layers_32k_offload 10 ours "$SB" "${p[@]}" --model qwen3-8b --layers 4 \
    --seq-len 32768 --modes stream --offload checkpoints+residual_grad \
    --json "$R/plan_qwen3_8b_4layers_32k_offload.json"
  # The AdamW stage's two settings (bench's gradients are fp32).
  local a=(plan --dtype bf16 --grad-dtype f32 --optimizer adamw --model qwen3-8b --layers 4
    --seq-len 8192 --modes stream)
  item qwen3_8b_4layers_8k_adamw 10 ours "$SB" "${a[@]}" --json "$R/plan_qwen3_8b_4layers_8k_adamw.json"
  item qwen3_8b_4layers_8k_adamw_offload 10 ours "$SB" "${a[@]}" --offload optimizer \
    --json "$R/plan_qwen3_8b_4layers_8k_adamw_offload.json"
  items_done
}
# torch_ckpt NAME T LAYERS: PyTorch + transformers gradient checkpointing, the baseline
# (PyTorch's own environment, no LD_LIBRARY_PATH of ours); skipped without torch.
torch_ckpt() {
  local T=$2
  ((SMALL)) && T=64
  if ! "$PY" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("torch") and u.find_spec("transformers")))'; then
    echo "gpu-check: skipped: $PY has no torch or transformers"
    return 77
  fi
  local small=()
  ((SMALL)) && small=(--small)
  "$PY" "$ROOT/tools/gpu_check/hf_checkpoint_step.py" --seq-len "$T" --repeat 1 --layers "$3" \
    "${small[@]}" --json "$R/$1.json"
}
export -f preflight_stage bundle_cpu_tests score_fixture scores gradchecks attention_long \
  sanitize plans torch_ckpt

# The time planner's profile of this card (src/plan/gpu_profiles.h), from its name: every bench
# stage prints the predicted step beside the measured one (`bench --predict`); empty (no
# prediction) for a card without a profile and in the emulated dry run.
gpu_profile_name() {
  ((SMALL)) && return 0
  case "$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
    *H100*) echo h100 ;;
    *H200*) echo h200 ;;
    *A100*) echo a100 ;;
    *4090*) echo rtx4090 ;;
  esac
}

# bench NAME LIMIT MODEL T MODES [BENCH FLAGS...]: one `streambp bench`, one untimed warm-up
# step (one-time costs: module loading, cuBLASLt's heuristic queries, the pinned blocks of
# offload) and one timed step.
bench() {
  local name=$1 limit=$2 model=$3 T=$4 modes=$5
  shift 5
  local extra=("$@")
  if ((SMALL)); then
    model=tiny-qwen3 T=64
    [[ ${extra[0]:-} == --layers ]] && extra=("${extra[@]:2}")
  fi
  local profile predict=()
  profile=$(gpu_profile_name)
  [[ -n $profile ]] && predict=(--predict "$profile")
  stage "$name" "$limit" gpu ours "$SB" bench --model "$model" --backend cuda --precision bf16 \
    --seq-len "$T" --modes "$modes" --warmup 1 --repeat 1 "${predict[@]}" "${extra[@]}" \
    --json "$R/$name.json"
}

catalogue() {
  section preflight
  WORK_NOTE="4 nvidia-smi calls, a CUDA context, ldd of 13 programs, streambp --version: ~8 s"
  stage preflight 20 cpu preflight_stage

  section correctness
  # The op suite's cuda cases against float64 references, one program per stage (a hang loses
  # one program). Their host work is the same programs' */cpu cases: 0.07-0.4 s a program on the
  # development machine; the rest is a context (~1-3 s) and a backend per case (a stream, a
  # cuBLASLt handle, a 1 GiB arena segment: ~0.1 s).
  WORK_NOTE="3 CPU-only programs, 0.01-0.1 s each here"
  stage bundle_cpu_tests 15 cpu bundle_cpu_tests
  WORK_NOTE="17 cases (*/cpu: 0.4 s here) + a context: ~5 s"
  stage ops_dense_test 20 gpu-cases ours "$BIN/ops_dense_test" --gtest_filter='*/cuda' --gtest_brief=1
  WORK_NOTE="17 cases (*/cpu: 0.3 s here) + a context: ~5 s"
  stage ops_layer_test 20 gpu-cases ours "$BIN/ops_layer_test" --gtest_filter='*/cuda' --gtest_brief=1
  WORK_NOTE="16 cases (*/cpu: 0.1 s here) + a context: ~4 s"
  stage ops_head_test 20 gpu-cases ours "$BIN/ops_head_test" --gtest_filter='*/cuda' --gtest_brief=1
  WORK_NOTE="7 cases (*/cpu: 0.08 s here) + a context: ~3 s"
  stage ops_gemma_test 15 gpu-cases ours "$BIN/ops_gemma_test" --gtest_filter='*/cuda' --gtest_brief=1
  WORK_NOTE="the cuda refusals (*/cpu: 0.07 s here) + a context: ~3 s"
  stage misuse_test 15 gpu-cases ours "$BIN/misuse_test" --gtest_filter='*/cuda' --gtest_brief=1
  WORK_NOTE="5 cases, a few contexts: ~4 s"
  stage backend_factory_test 15 gpu ours "$BIN/backend_factory_test" --gtest_filter='*' --gtest_brief=1
  # The attention cases again on the fp32 CUDA-core kernels (attention_simt.cu), which run for
  # head dims the tensor-core kernels do not take, and where those cannot launch.
  WORK_NOTE="ops_layer_test's attention cases + a context: ~4 s"
  stage ops_layer_test_attention_simt 15 gpu-cases env STREAMBP_CUDA_ATTENTION=simt \
    bash -c 'ours "$BIN/ops_layer_test" --gtest_filter="*Attention*/cuda" --gtest_brief=1'
  WORK_NOTE="75 cases (4.6 s here on the CPU backend), a backend each: ~10 s"
  stage hf_parity_test 30 gpu env STREAMBP_TEST_BACKEND=cuda \
    bash -c 'ours "$BIN/hf_parity_test" --gtest_filter="*" --gtest_brief=1'
  WORK_NOTE="33 cases (0.4 s here on the CPU backend): ~5 s"
  stage hf_parity_bf16_test 20 gpu env STREAMBP_TEST_BACKEND=cuda \
    bash -c 'ours "$BIN/hf_parity_bf16_test" --gtest_filter="*" --gtest_brief=1'
  WORK_NOTE="9 processes (0.1-1.6 s each here on the CPU backend) + a context each: ~30 s"
  stage gradchecks 60 gpu gradchecks
  WORK_NOTE="12 processes (2.2 s for all here on the CPU backend) + a context each: ~30 s"
  stage scores 45 gpu scores
  WORK_NOTE="sampled rows at 8K and 32K keys, float64 on the host: ~10 s"
  stage attention_long 30 gpu-cases attention_long
  # compute-sanitizer: its start (~3 s a process), then instrumented kernels (memcheck's loads
  # and stores cost 10-100x; racecheck and synccheck track shared memory and barriers) on small
  # cases only: ~0.1 s of kernels each without it.
  WORK_NOTE="3 processes, 5-6 small cases each, instrumented: ~20 s"
  stage sanitize_memcheck 45 gpu-cases sanitize memcheck
  WORK_NOTE="3 processes, 2-3 small cases each, shared memory tracked: ~20 s"
  stage sanitize_racecheck 40 gpu-cases sanitize racecheck
  WORK_NOTE="3 processes, 2-3 small cases each, barriers tracked: ~15 s"
  stage sanitize_synccheck 30 gpu-cases sanitize synccheck

  section profile
  # Where the 0.6B 8K step's time goes, by kernel family (every op synchronised): 0.07 PFLOP.
  WORK_NOTE="a context, 0.6B weights on the device, 2 steps of 0.07 PFLOP synchronised: ~15 s"
  stage profile_qwen3_0.6b_8k_stream 40 gpu ours "$SB" bench $PROFILE_ARGS --backend cuda \
    --precision bf16 --modes stream --warmup 1 --repeat 1 --profile \
    --json "$R/profile_qwen3_0.6b_8k_stream.json"

  section perf
  WORK_NOTE="5 plans on the meta backend, 0.1-0.2 s each here"
  stage plans 10 cpu plans
  # 0.6B, 8k, 28 layers: ~3e13 layer + 1e13 head + 3e13 attention FLOPs = 0.07 PFLOP a step.
  WORK_NOTE="a context, 0.6B weights, 2 modes x 2 steps of 0.07 PFLOP: ~15 s"
  bench bench_qwen3_0.6b_8k 40 qwen3-0.6b 8192 checkpoint,stream
  WORK_NOTE="import torch+transformers (~10 s), 0.6B drawn on the host, 2 steps: ~25 s"
  stage torch_ckpt_qwen3_0.6b_8k 45 py torch_ckpt torch_ckpt_qwen3_0.6b_8k 8192 28
  # 8B shapes (d 4096, F 12288, 32 x 128 heads) at 32k, 4 of its 36 layers: ~0.7 PFLOP a step,
  # with and without offloaded checkpoints (the copies should hide behind the layers).
  WORK_NOTE="2.0B weights on the device, 2 offload settings x 2 steps of 0.7 PFLOP: ~40 s"
  bench bench_qwen3_8b_32k_4layers 90 qwen3-8b 32768 stream --layers 4 \
    --offload none,checkpoints+residual_grad
  # 8B shapes, 4 layers, with AdamW: the optimizer on the device, then in pinned host memory
  # (offload: optimizer: each layer's gradient copied out as its backward ends, the update on
  # the host's 16 cores, the bf16 weights copied back). 2.0B parameters: ~30 bytes each moved by
  # the host update (~1 s at 60 GB/s), 8 GB of gradients down and 4 GB of weights up (~0.5 s).
  WORK_NOTE="2.0B weights + fp32 AdamW state (~36 GB pinned with offload), 2 settings x 2 steps of 0.2 PFLOP + an update: ~50 s"
  bench bench_qwen3_8b_8k_4layers_adamw 120 qwen3-8b 8192 stream --layers 4 \
    --optimizer adamw --offload none,optimizer
  # 32k with 8 layers: attention grows as T^2 (1.9e13 FLOPs per layer).
  WORK_NOTE="2 steps of 0.2 PFLOP: ~15 s"
  bench bench_qwen3_0.6b_32k_stream_8layers 40 qwen3-0.6b 32768 stream --layers 8
  WORK_NOTE="import, model, 2 steps of 0.2 PFLOP: ~25 s"
  stage torch_ckpt_qwen3_0.6b_32k_8layers 45 py torch_ckpt torch_ckpt_qwen3_0.6b_32k_8layers 32768 8
  # The 8K step with the fp32 attention kernels: what the tensor cores bring.
  WORK_NOTE="2 steps of 0.07 PFLOP, attention on CUDA cores: ~20 s"
  stage bench_qwen3_0.6b_8k_stream_simt_attention 45 gpu env STREAMBP_CUDA_ATTENTION=simt \
    bash -c 'ours "$SB" bench $PROFILE_ARGS --backend cuda --precision bf16 --modes stream \
      --warmup 1 --repeat 1 --json "$R/bench_qwen3_0.6b_8k_stream_simt_attention.json"'
  # 128k with 4 layers: 3.1e14 attention FLOPs a layer, 1.3 PFLOP a step.
  WORK_NOTE="2 steps of 1.3 PFLOP (attention at 50-100 TFLOP/s): ~40 s"
  bench bench_qwen3_0.6b_128k_stream_4layers 90 qwen3-0.6b 131072 stream --layers 4
}

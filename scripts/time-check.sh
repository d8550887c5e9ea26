#!/usr/bin/env bash
# The time planner against measured steps on this CPU (docs/BENCHMARKS.md, "Time planner"):
# `streambp bench --predict cpu` for every objective, the three mode presets, fp32 and bf16, at
# three lengths. Within one bench call the modes and precisions run round robin (step i of every
# configuration before step i+1 of any) and each configuration's prediction is made (its probes
# run) just before the steps; beside every measured step the step's largest GEMM is timed again
# (30 ms), and the prediction scaled by that GEMM's speed then against its speed at the probes
# is the "tracked" prediction: the machine's share as the step got it (the cores are shared).
# Objectives run one after another. Prints one table: objective, mode, precision, T, measured,
# predicted, ratio, tracked, ratio. Run it with OMP_WAIT_POLICY=passive on a shared machine.
#
#   scripts/time-check.sh [BUILD_DIR] [OUT_DIR]
# Environment: SEQ_LENS (default 256,1024,4096), OBJECTIVES, MODES, REPEAT (3), WARMUP (1).
#
# The model: Qwen3 layers at d = 256 (F = 768, 4 query heads and 2 KV heads of 64), 2 layers,
# a 4096-token vocabulary: small enough that 126 configurations run in minutes on 2 cores, with
# attention the larger part of the step at the longest T (as at a million tokens on a GPU) and
# the GEMMs and per-op costs at the shortest.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
OUT=${2:-$(mktemp -d)}
SB=$BUILD/streambp
SEQ_LENS=${SEQ_LENS:-256,1024,4096}
OBJECTIVES=${OBJECTIVES:-sft dpo grpo ppo kto orpo simpo}
MODES=${MODES:-base,checkpoint,stream}
REPEAT=${REPEAT:-3}
WARMUP=${WARMUP:-1}
mkdir -p "$OUT"
cat > "$OUT/config.json" <<'JSON'
{
  "architectures": ["Qwen3ForCausalLM"],
  "model_type": "qwen3",
  "hidden_size": 256,
  "intermediate_size": 768,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 64,
  "vocab_size": 4096,
  "max_position_embeddings": 65536,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "tie_word_embeddings": false,
  "attention_bias": false,
  "torch_dtype": "float32"
}
JSON
"$SB" --version | head -3
grep -m1 "model name" /proc/cpuinfo || true
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)} OMP_NUM_THREADS=${OMP_NUM_THREADS:-(unset)} nproc=$(nproc)"
for obj in $OBJECTIVES; do
  echo "== $obj" >&2
  "$SB" bench --model "$OUT/config.json" --objective "$obj" --seq-len "$SEQ_LENS" \
    --modes "$MODES" --precision f32,bf16 --warmup "$WARMUP" --repeat "$REPEAT" --predict cpu \
    --json "$OUT/bench_$obj.json" > "$OUT/bench_$obj.txt"
done
python3 - "$OUT" $OBJECTIVES <<'PY'
import json, sys
out, objs = sys.argv[1], sys.argv[2:]
print("| objective | mode | precision | T | measured s | predicted s | predicted / measured | tracked s | tracked / measured | dominant (predicted) |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
stats = {"predicted": [0, 0, 0.0], "tracked": [0, 0, 0.0]}  # within, n, worst
for o in objs:
    j = json.load(open(f"{out}/bench_{o}.json"))
    for r in j["runs"]:
        p, t = r["predicted_over_measured"], r["predicted_tracked_over_measured"]
        for k, ratio in (("predicted", p), ("tracked", t)):
            stats[k][0] += abs(ratio - 1.0) <= 0.15
            stats[k][1] += 1
            stats[k][2] = max(stats[k][2], abs(ratio - 1.0))
        print(f"| {o} | {r['mode']} | {r['precision']} | {r['seq_len']} | {r['step_seconds_median']:.4f} | "
              f"{r['predicted_seconds']:.4f} | {p:.3f} | {r['predicted_tracked_seconds']:.4f} | {t:.3f} | "
              f"{r['predicted_dominant']} |")
for k, (w, n, worst) in stats.items():
    print(f"\n{k}: {w} of {n} within 15%; worst |ratio - 1| = {worst:.3f}")
PY

#!/usr/bin/env bash
# scripts/gpu-check.sh run for real against the emulated CUDA backend (build-emu, docs/CUDA.md):
# a bundle of build-emu's programs, every stage at a small size (GPU_CHECK_SMALL=1: a share of
# each gtest program's cases, gradchecks at T = 32, benches on tiny-qwen3; the preflight's
# device checks not required; the sanitizer stages' filters without compute-sanitizer where it
# is absent). Every stage must pass: the commands, flags, fixtures and result files the GPU run
# will use all work, so the first GPU run can only find what needs a GPU. The deadline is long
# enough for every stage to be planned (the first run's tiers are the dry run's business). The
# PyTorch baseline stages run when the Python interpreter (GPU_CHECK_PYTHON, default python3) has
# torch and transformers, else are left out (said so); so is the long-keys attention stage when
# this tree has no cuda_attention_long_test. Then scripts/gpu-followup.sh's dry run on its
# report. Part of scripts/test-emu.sh; about a minute on two cores.
#
#   tests/scripts/gpu_check_emulated.sh [build-dir]     (default build-emu)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$(cd "$ROOT/${1:-build-emu}" && pwd)
T=$(mktemp -d /tmp/gpu-check-emulated.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$T"' EXIT
fail() { echo "gpu_check_emulated: FAIL: $*" >&2; exit 1; }

mkdir -p "$T/bundle/bin" "$T/bundle/lib"
ln -s "$DIR/streambp" "$T/bundle/bin/streambp"
for p in cuda_math_test cuda_gemm_plan_test cuda_arena_test backend_factory_test ops_dense_test \
  ops_layer_test ops_head_test ops_gemma_test misuse_test hf_parity_test hf_parity_bf16_test; do
  [[ -x $DIR/tests/$p ]] || fail "$DIR/tests/$p not built (scripts/build.sh emu builds it)"
  ln -s "$DIR/tests/$p" "$T/bundle/bin/$p"
done
PY=${GPU_CHECK_PYTHON:-python3}
skips=()
if ! "$PY" -c 'import torch, transformers' 2>/dev/null; then
  skips+=('^torch_')
  echo "gpu_check_emulated: $PY has no torch/transformers: the PyTorch baseline stages are left out"
fi
# The long-keys attention test (tests/backend/cuda_attention_long_test.cpp) where this tree has it.
if [[ -x $DIR/tests/cuda_attention_long_test ]]; then
  ln -s "$DIR/tests/cuda_attention_long_test" "$T/bundle/bin/cuda_attention_long_test"
else
  skips+=('^attention_long$')
  echo "gpu_check_emulated: no $DIR/tests/cuda_attention_long_test: the attention_long stage is left out"
fi
skip=$(IFS='|'; echo "${skips[*]}")
start=$(date +%s)
rc=0
OUT=$T/out TMPDIR=$T GPU_CHECK_BUNDLE_DIR=$T/bundle GPU_CHECK_PYTHON=$PY GPU_CHECK_SMALL=1 \
  GPU_CHECK_SKIP=$skip STREAMBP_CUDA_EMULATION_MEMORY=$((8 << 30)) OMP_WAIT_POLICY=passive \
  DEADLINE=1200 "$ROOT/scripts/gpu-check.sh" >"$T/run.txt" 2>&1 || rc=$?
elapsed=$(($(date +%s) - start))
mkdir -p "$T/logs"
tar -C "$T/logs" -xzf "$T/out/logs.tar.gz"
# Every planned stage ran and passed the first time.
planned=$(GPU_CHECK_SMALL=1 GPU_CHECK_SKIP=$skip DEADLINE=1200 "$ROOT/scripts/gpu-check.sh" --dry-run |
  awk '/ stages; .* planned: / {print $1}')
python3 - "$T/logs/stages.jsonl" "$planned" <<'PY' || { cat "$T/out/gpu-check.md" >&2; fail "stages above"; }
import json, sys
stages = [json.loads(l) for l in open(sys.argv[1])]
bad = [s for s in stages if s["status"] != "pass" or s["variant"] != "plain" or s["tier"] != "first"]
for s in bad:
    print(f"gpu_check_emulated: stage {s['name']}: {s['status']} (rc {s['rc']}, {s['seconds']} s)",
          file=sys.stderr)
if len(stages) != int(sys.argv[2]):
    print(f"gpu_check_emulated: {len(stages)} stages ran, {sys.argv[2]} planned", file=sys.stderr)
    sys.exit(1)
slowest = sorted(stages, key=lambda s: -float(s["seconds"]))[:3]
print("gpu_check_emulated: slowest stages: " +
      ", ".join(f"{s['name']} {float(s['seconds']):.0f} s" for s in slowest))
sys.exit(1 if bad else 0)
PY
((rc == 0)) || { tail -40 "$T/run.txt" >&2; fail "gpu-check.sh exited $rc"; }
grep -q '"verdict": "pass (GPU_CHECK_SMALL' "$T/logs/results/preflight.json" || fail "the preflight's verdict"
# The follow-up plans from this report: a run with nothing left to do has the preflight alone.
GPU_FOLLOWUP_FROM=$T/out GPU_CHECK_SMALL=1 GPU_CHECK_SKIP=$skip FIRST_DEADLINE=1200 \
  "$ROOT/scripts/gpu-followup.sh" --dry-run >"$T/followup.txt" || fail "gpu-followup.sh --dry-run"
grep -q "^1 entries; 1 planned" "$T/followup.txt" || { cat "$T/followup.txt" >&2; fail "the follow-up's plan"; }
echo "gpu_check_emulated: ok: $planned stages passed in ${elapsed} s"

#!/usr/bin/env bash
# scripts/gpu-check.sh on a machine without a GPU, against a fake bundle whose programs pass,
# fail, hang (ignoring SIGTERM), fail only without CUDA_LAUNCH_BLOCKING, report skipped cuda
# cases, or dump core. Checks: each stage's limit and the global deadline hold even when a
# program hangs; a failing stage is rerun once with CUDA_LAUNCH_BLOCKING=1; the report and the
# packed logs exist after every stage (also when the check itself is killed mid-stage); our
# programs get the bundle's LD_LIBRARY_PATH and the Python stages do not; --dry-run lists every
# stage, ops_gemma_test included.
#
#   tests/scripts/gpu_check_test.sh     (ctest: gpu_check_script)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d /tmp/gpu-check-test.XXXXXX)
# On any exit: end the hanging fakes this test started (by their ids), then remove the folder.
cleanup() {
  if [[ -f $T/fake.pids ]]; then
    while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$T/fake.pids"
  fi
  [[ -n ${KEEP:-} ]] || rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- the fake bundle ----
mkdir -p "$T/bundle/bin" "$T/bundle/lib"
cat >"$T/bundle/bin/fake" <<'SH'
#!/usr/bin/env bash
# One fake program; its behaviour is its name's.
name=$(basename "$0")
echo "$name LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >>"$FAKE_LOG"
case $name in
  ops_layer_test) echo $$ >>"$FAKE_PIDS"; trap '' TERM; echo "hanging"; while :; do sleep 0.1; done ;;
  ops_head_test) [[ ${CUDA_LAUNCH_BLOCKING:-} == 1 ]] || { echo "illegal memory access"; exit 1; } ;;
  misuse_test) echo "[  SKIPPED ] 3 tests, listed below:"; exit 0 ;;
  cuda_arena_test) head -c 5000 /dev/zero >core; exit 139 ;;
  streambp)
    json=""; input=""; prev=""
    for a in "$@"; do
      [[ $prev == --json ]] && json=$a
      [[ $prev == --input ]] && input=$a
      prev=$a
    done
    case $1 in
      score) cp "$(dirname "$input")/expected.json" "$json" ;;
      bench) echo '{"runs": []}' >"$json" ;;
      *) [[ -n $json ]] && echo '{}' >"$json" ;;
    esac ;;
esac
exit 0
SH
chmod +x "$T/bundle/bin/fake"
for p in streambp cuda_math_test cuda_gemm_plan_test cuda_arena_test backend_factory_test \
  ops_dense_test ops_layer_test ops_head_test ops_gemma_test misuse_test hf_parity_test \
  hf_parity_bf16_test; do
  ln -s fake "$T/bundle/bin/$p"
done
cat >"$T/python" <<'SH'
#!/usr/bin/env bash
echo "python LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >>"$FAKE_LOG"
prev=""; for a in "$@"; do [[ $prev == --json ]] && echo '{"status": "ok"}' >"$a"; prev=$a; done
exit 0
SH
chmod +x "$T/python"
export FAKE_LOG=$T/fake.log FAKE_PIDS=$T/fake.pids TMPDIR=$T GPU_CHECK_BUNDLE_DIR=$T/bundle \
  GPU_CHECK_PYTHON=$T/python
: >"$FAKE_PIDS"
unset LD_LIBRARY_PATH

# ---- 1: limits, the rerun, cores, libraries ----
STAGES='^(environment|cuda_arena_test|ops_layer_test|ops_head_test|misuse_test|score_qwen3_bf16|bench_qwen3_0.6b_8k_stream|torch_ckpt_qwen3_0.6b_8k)$'
t0=$(date +%s)
rc=0
OUT=$T/out1 DEADLINE=120 GPU_CHECK_MAX_LIMIT=2 GPU_CHECK_STAGES=$STAGES \
  "$ROOT/scripts/gpu-check.sh" >"$T/run1.txt" 2>&1 || rc=$?
elapsed=$(($(date +%s) - t0))
((rc == 1)) || fail "exit status $rc, not 1 (stages failed)"
((elapsed < 40)) || fail "took ${elapsed}s"
S=$T/stages1
tar -C "$T" -xzf "$T/out1/logs.tar.gz" --one-top-level=stages1
status() { python3 -c 'import json,sys; print(next(s["status"] for s in map(json.loads, open(sys.argv[1])) if s["name"] == sys.argv[2]))' "$S/stages.jsonl" "$1"; }
[[ $(status ops_layer_test) == timeout ]] || fail "the hanging stage is $(status ops_layer_test)"
grep -q "SIGKILL" "$S/logs/ops_layer_test.log" || fail "no SIGKILL after the ignored SIGTERM"
[[ $(status ops_head_test) == fail ]] || fail "ops_head_test: $(status ops_head_test)"
[[ $(status ops_head_test.blocking) == pass ]] || fail "the blocking rerun did not pass"
[[ $(status misuse_test) == fail ]] || fail "skipped cuda cases passed"
[[ $(status score_qwen3_bf16) == pass ]] || fail "score stage: $(status score_qwen3_bf16)"
[[ $(status bench_qwen3_0.6b_8k_stream) == pass ]] || fail "bench stage"
[[ $(status torch_ckpt_qwen3_0.6b_8k) == pass ]] || fail "torch stage"
[[ -f $S/results/bench_qwen3_0.6b_8k_stream.json ]] || fail "bench result not packed"
grep -q "cuda_arena_test.core.gz .*packed" "$S/cores.txt" || fail "core not packed: $(cat "$S/cores.txt")"
[[ -f $S/cores/cuda_arena_test.core.gz ]] || fail "core missing from the archive"
[[ -f $S/env.txt ]] || fail "env.txt missing"
! grep -q "ops_layer_test.blocking" "$S/stages.jsonl" || fail "a timeout was rerun"
grep -q "^streambp LD_LIBRARY_PATH=$T/bundle/lib" "$FAKE_LOG" || fail "streambp without the bundle's libraries"
grep -q "^python LD_LIBRARY_PATH=" "$FAKE_LOG" || fail "the python stage did not run"
! grep -q "^python LD_LIBRARY_PATH=.*bundle" "$FAKE_LOG" || fail "the python stage got the bundle's libraries"
grep -q "ops_head_test.blocking | pass" "$T/out1/gpu-check.md" || fail "report lacks the rerun"
ls "$T/out1" | sort | tr '\n' ' ' | grep -qx "gpu-check.json gpu-check.md logs.tar.gz " ||
  fail "\$OUT holds $(ls "$T/out1")"

# ---- 2: the global deadline caps a hanging stage; the rest is skipped, not lost ----
t0=$(date +%s)
OUT=$T/out2 DEADLINE=30 GPU_CHECK_STAGES='^(environment|ops_layer_test|ops_gemma_test)$' \
  "$ROOT/scripts/gpu-check.sh" >"$T/run2.txt" 2>&1 || true
elapsed=$(($(date +%s) - t0))
((elapsed <= 30)) || fail "deadline 30 s, took ${elapsed}s"
S=$T/stages2
tar -C "$T" -xzf "$T/out2/logs.tar.gz" --one-top-level=stages2
[[ $(status ops_layer_test) == timeout ]] || fail "deadline: hanging stage $(status ops_layer_test)"
[[ $(status ops_gemma_test) == skipped ]] || fail "deadline: next stage $(status ops_gemma_test)"

# ---- 3: the check killed mid-stage keeps the report of the stages before ----
OUT=$T/out3 DEADLINE=120 GPU_CHECK_STAGES='^(environment|cuda_math_test|ops_layer_test)$' \
  "$ROOT/scripts/gpu-check.sh" >"$T/run3.txt" 2>&1 &
check=$!
# Begun: the check names a stage on stderr just before it runs it, after the stages before it
# are reported and packed. (Counting the hanging fakes' pids instead raced on a loaded machine:
# a late pid from case 2's fake could end the wait before cuda_math_test was packed.)
begun() { grep -q "gpu-check: ops_layer_test (at most" "$T/run3.txt"; }
for _ in $(seq 600); do begun && break; sleep 0.1; done
begun || fail "the hanging stage never started"
sleep 1
kill -KILL "$check"
wait "$check" 2>/dev/null || true
grep -q "cuda_math_test | pass" "$T/out3/gpu-check.md" || fail "report lost when killed mid-stage"
tar -tzf "$T/out3/logs.tar.gz" | grep -q "logs/cuda_math_test.log" || fail "logs lost when killed"
# The fake of run 3 outlived the check (killed with it): end it by its id.
while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$FAKE_PIDS"

# ---- 4: --dry-run lists every program ----
"$ROOT/scripts/gpu-check.sh" --dry-run >"$T/dry.txt"
for s in ops_gemma_test ops_dense_test hf_parity_bf16_test gradcheck_ppo bench_qwen3_8b_32k_stream_4layers; do
  grep -q "^$s " "$T/dry.txt" || fail "--dry-run lacks $s"
done
echo "gpu_check_test: ok"

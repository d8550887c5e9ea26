#!/usr/bin/env bash
# scripts/gpu-check.sh and scripts/gpu-followup.sh on a machine without a GPU, against a fake
# bundle whose programs pass, fail (a tolerance failure; a kernel error that goes away with
# CUDA_LAUNCH_BLOCKING), hang (ignoring SIGTERM), report skipped cuda cases, print "gpu
# fallback:" lines or dump core, a fake nvidia-smi and a fake CUDA runtime (a small C library:
# one device, or none). Checks: the preflight passes, and when it fails the run stops after it
# with the reason in the report; each stage's limit and the global deadline hold even when a
# program hangs; only a kernel error is rerun with CUDA_LAUNCH_BLOCKING=1, on the cases or items
# that failed (not a tolerance failure, a timeout or a Python stage); a program missing from the
# bundle and an absent compute-sanitizer are skipped with their reason (with its program, the
# long-keys attention stage asks for 8K and 32K keys); the sanitizer runs the
# program with one allocation per tensor; the report and the packed logs exist after every stage
# (also when the check itself is killed mid-stage); our programs get the bundle's
# LD_LIBRARY_PATH and the Python stages do not; --dry-run lists every stage in the order
# preflight, correctness, profile, perf, with the planned limits within the deadline less the
# reserve and the profile among them; the follow-up plans, from the first run's report, the
# blocking reruns and memcheck of kernel errors and the stages that did not run, and runs them.
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

# ---- the fake bundle, nvidia-smi, CUDA runtime and compute-sanitizer ----
mkdir -p "$T/bundle/bin" "$T/bundle/lib" "$T/path" "$T/sanitizer"
cat >"$T/bundle/bin/fake" <<'SH'
#!/usr/bin/env bash
# One fake program; its behaviour is its name's.
name=$(basename "$0")
echo "$name LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} ARENA=${STREAMBP_CUDA_ARENA:-} BLOCKING=${CUDA_LAUNCH_BLOCKING:-} KEYS=${STREAMBP_ATTENTION_LONG_KEYS:-} ARGS=$*" >>"$FAKE_LOG"
case $name in
  ops_layer_test)
    [[ $* == *Attention* ]] && exit 0  # the simt attention stage and the sanitizer filters
    echo $$ >>"$FAKE_PIDS"; trap '' TERM; echo "hanging"; while :; do sleep 0.1; done ;;
  ops_head_test)
    if [[ ${CUDA_LAUNCH_BLOCKING:-} != 1 ]]; then
      echo "[  FAILED  ] All/BackendOps.LogSoftmaxTargetAndLogitsGradient/cuda (3 ms)"
      echo "norm.cu:12: cudaMemcpyAsync: cudaErrorIllegalAddress: an illegal memory access was encountered (last kernel launched: k)"
      echo "[  FAILED  ] All/BackendOps.EntropyMatchesFloat64/cuda (1 ms)"
      echo "[  FAILED  ] 2 tests, listed below:"
      exit 1
    fi ;;
  ops_dense_test)  # a tolerance failure: never rerun blocking
    echo "gpu fallback: cuBLASLt: no algorithm for 8x1x24 bf16 (lda 24): the next one"
    echo "gpu fallback: cuBLASLt: no algorithm for 16x1x24 bf16 (lda 24): the next one"
    echo "[  FAILED  ] All/BackendOps.GemmAllTransposesAccumulate/cuda (2 ms)"
    echo "Expected: rel_err < 1e-5, actual 3e-5"; exit 1 ;;
  misuse_test) echo "[  SKIPPED ] 3 tests, listed below:"; exit 0 ;;
  cuda_arena_test) head -c 5000 /dev/zero >core; exit 139 ;;
  streambp)
    json=""; input=""; prev=""; objective=""
    for a in "$@"; do
      [[ $prev == --json ]] && json=$a
      [[ $prev == --input ]] && input=$a
      [[ $prev == --objective ]] && objective=$a
      prev=$a
    done
    case $1 in
      --version) echo "streambp 0.0 (fake)" ;;
      score) cp "$(dirname "$input")/expected.json" "$json" ;;
      bench) echo '{"runs": []}' >"$json" ;;
      gradcheck)
        if [[ $objective == kto && ${CUDA_LAUNCH_BLOCKING:-} != 1 ]]; then
          echo "error: attention.cu:80: attention_forward: cudaErrorLaunchFailure: unspecified launch failure"
          exit 1
        fi
        echo '{"max_rel_err": 1e-7, "pass": true}' >"$json" ;;
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
# (no cuda_attention_long_test: a program missing from the bundle is a skipped stage)
cat >"$T/python" <<'SH'
#!/usr/bin/env bash
echo "python LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} ARGS=$*" >>"$FAKE_LOG"
[[ $1 == -c ]] && exit 0  # "is torch there?": yes
# A kernel error in a Python stage: PyTorch's own, never rerun blocking.
[[ $* == *--seq-len\ 8192* ]] && { echo "RuntimeError: CUDA error: an illegal memory access was encountered"; exit 1; }
prev=""; for a in "$@"; do [[ $prev == --json ]] && echo '{"status": "ok"}' >"$a"; prev=$a; done
exit 0
SH
chmod +x "$T/python"
cat >"$T/path/nvidia-smi" <<'SH'
#!/usr/bin/env bash
case "$*" in
  *--query-gpu*) echo "name, driver_version, memory.total [MiB]"; echo "Fake H100, 580.00, 81559 MiB" ;;
  *--query-compute-apps*) ;;
  *) echo "fake nvidia-smi" ;;
esac
SH
chmod +x "$T/path/nvidia-smi"
# compute-sanitizer, on PATH for the follow-up only: notes its tool and runs the program.
cat >"$T/sanitizer/compute-sanitizer" <<'SH'
#!/usr/bin/env bash
echo "compute-sanitizer $*" >>"$FAKE_LOG"
[[ $1 == --version ]] && { echo "NVIDIA (R) Compute Sanitizer, Version 2025.3 (fake)"; exit 0; }
while [[ $1 == --* ]]; do shift 2; done
"$@"; rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
SH
chmod +x "$T/sanitizer/compute-sanitizer"
# The CUDA runtime the preflight queries (first on our library path, before the toolkit's).
cat >"$T/cudart.c" <<'C'
#include <stdlib.h>
#include <string.h>
static int devices(void) { const char* v = getenv("FAKE_CUDA_DEVICES"); return v ? atoi(v) : 1; }
int cudaDriverGetVersion(int* v) { *v = 13000; return 0; }
int cudaRuntimeGetVersion(int* v) { *v = 13000; return 0; }
int cudaGetDeviceCount(int* n) { *n = devices(); return *n ? 0 : 100; }
int cudaDeviceGetAttribute(int* v, int attr, int dev) {
  switch (attr) {
    case 75: *v = 9; break;            /* compute capability 9.0 */
    case 76: *v = 0; break;
    case 16: *v = 132; break;          /* SMs */
    case 97: *v = 227 * 1024; break;   /* shared memory per block, opt-in */
    case 8: *v = 48 * 1024; break;
    case 81: *v = 228 * 1024; break;
    case 38: *v = 50 << 20; break;
    default: *v = 0;
  }
  return 0;
}
int cudaGetDeviceProperties(void* p, int d) { memset(p, 0, 256); strcpy((char*)p, "Fake H100"); return 0; }
int cudaDeviceGetPCIBusId(char* b, int len, int d) { strncpy(b, "0000:00:01.0", len); return 0; }
int cudaSetDevice(int d) { return 0; }
int cudaMemGetInfo(size_t* f, size_t* t) { *t = 80ull << 30; *f = *t - (1ull << 30); return 0; }
const char* cudaGetErrorName(int e) { return e == 100 ? "cudaErrorNoDevice" : "cudaErrorUnknown"; }
const char* cudaGetErrorString(int e) { return e == 100 ? "no CUDA-capable device is detected" : "?"; }
C
gcc -shared -fPIC -o "$T/bundle/lib/libcudart.so.13" "$T/cudart.c"
export FAKE_LOG=$T/fake.log FAKE_PIDS=$T/fake.pids TMPDIR=$T GPU_CHECK_BUNDLE_DIR=$T/bundle \
  GPU_CHECK_PYTHON=$T/python PATH=$T/path:$PATH
: >"$FAKE_PIDS"
unset LD_LIBRARY_PATH
# Any compute-sanitizer of this machine stays out of cases 1-4 (the toolkit's bin/ is not on
# PATH in them; /usr/local/cuda*/bin is searched too, so the test only runs where it has none).
if ls /usr/local/cuda*/bin/compute-sanitizer >/dev/null 2>&1; then
  echo "gpu_check_test: this machine has compute-sanitizer: the absent-sanitizer case is not checked"
  HAVE_CS=1
else
  HAVE_CS=0
fi

# ---- 1: preflight, limits, the reruns, skips, cores, fallbacks, libraries ----
STAGES='^(preflight|bundle_cpu_tests|ops_dense_test|ops_layer_test|ops_head_test|misuse_test|gradchecks|scores|attention_long|sanitize_memcheck|bench_qwen3_0.6b_8k|torch_ckpt_qwen3_0.6b_8k)$'
t0=$(date +%s)
rc=0
OUT=$T/out1 DEADLINE=200 GPU_CHECK_MAX_LIMIT=8 GPU_CHECK_STAGES=$STAGES \
  "$ROOT/scripts/gpu-check.sh" >"$T/run1.txt" 2>&1 || rc=$?
elapsed=$(($(date +%s) - t0))
((rc == 1)) || fail "exit status $rc, not 1 (stages failed)"
((elapsed < 80)) || fail "took ${elapsed}s"
S=$T/stages1
tar -C "$T" -xzf "$T/out1/logs.tar.gz" --one-top-level=stages1
status() { python3 -c 'import json,sys; print(next((s["status"] for s in map(json.loads, open(sys.argv[1])) if s["name"] == sys.argv[2]), "absent"))' "$S/stages.jsonl" "$1"; }
field() { python3 -c 'import json,sys; print(next(s[sys.argv[3]] for s in map(json.loads, open(sys.argv[1])) if s["name"] == sys.argv[2]))' "$S/stages.jsonl" "$1" "$2"; }
[[ $(status preflight) == pass ]] || fail "preflight: $(status preflight): $(cat "$S/logs/preflight.log")"
grep -q '"verdict": "pass"' "$S/results/preflight.json" || fail "preflight verdict"
grep -q "sm_90, 132 SMs, shared memory 227 KiB per block" "$S/logs/preflight.log" ||
  fail "preflight lacks the device's properties: $(cat "$S/logs/preflight.log")"
[[ $(status ops_layer_test) == timeout ]] || fail "the hanging stage is $(status ops_layer_test)"
grep -q "SIGKILL" "$S/logs/ops_layer_test.log" || fail "no SIGKILL after the ignored SIGTERM"
[[ $(status ops_head_test) == fail ]] || fail "ops_head_test: $(status ops_head_test)"
[[ $(field ops_head_test kernel_error) == True ]] || fail "ops_head_test: no kernel error seen"
[[ $(status ops_head_test.blocking) == pass ]] || fail "the blocking rerun did not pass"
grep -q "^ops_head_test .*BLOCKING=1 .*--gtest_filter=All/BackendOps.LogSoftmaxTargetAndLogitsGradient/cuda:All/BackendOps.EntropyMatchesFloat64/cuda " "$FAKE_LOG" ||
  fail "the blocking rerun was not narrowed to the failed cases: $(grep '^ops_head_test' "$FAKE_LOG")"
[[ $(status ops_dense_test) == fail ]] || fail "ops_dense_test: $(status ops_dense_test)"
[[ $(status ops_dense_test.blocking) == absent ]] || fail "a tolerance failure was rerun blocking"
[[ $(status gradchecks) == fail ]] || fail "gradchecks: $(status gradchecks)"
[[ $(status gradchecks.blocking) == pass ]] || fail "gradchecks.blocking: $(status gradchecks.blocking)"
grep "^streambp .*BLOCKING=1 .*gradcheck" "$FAKE_LOG" | grep -q -- "--objective kto" ||
  fail "the blocking gradcheck rerun did not run kto"
! grep "^streambp .*BLOCKING=1 .*gradcheck" "$FAKE_LOG" | grep -qv -- "--objective kto" ||
  fail "the blocking gradcheck rerun ran more than the failed item"
for o in sft dpo grpo ppo orpo sft_bf16 grpo_lora dpo_offload; do
  [[ -f $S/results/gradcheck_$o.json ]] || fail "results/gradcheck_$o.json missing"
done
[[ $(status torch_ckpt_qwen3_0.6b_8k) == fail ]] || fail "torch stage: $(status torch_ckpt_qwen3_0.6b_8k)"
[[ $(status torch_ckpt_qwen3_0.6b_8k.blocking) == absent ]] || fail "a Python stage was rerun blocking"
[[ $(status ops_layer_test.blocking) == absent ]] || fail "a timeout was rerun"
[[ $(status misuse_test) == fail ]] || fail "skipped cuda cases passed"
[[ $(status scores) == pass ]] || fail "scores: $(status scores)"
[[ $(status attention_long) == skipped ]] || fail "attention_long: $(status attention_long)"
[[ $(field attention_long reason) == "cuda_attention_long_test is not in the bundle" ]] ||
  fail "attention_long's reason: $(field attention_long reason)"
if ((!HAVE_CS)); then
  [[ $(status sanitize_memcheck) == skipped ]] || fail "sanitize_memcheck: $(status sanitize_memcheck)"
  [[ $(field sanitize_memcheck reason) == *"compute-sanitizer not found"* ]] || fail "sanitizer reason"
fi
[[ $(status bench_qwen3_0.6b_8k) == pass ]] || fail "bench stage"
grep "^streambp .*ARGS=bench " "$FAKE_LOG" | grep -q -- "--warmup 1 --repeat 1" || fail "bench without one warm-up step"
[[ -f $S/results/bench_qwen3_0.6b_8k.json ]] || fail "bench result not packed"
[[ $(status bundle_cpu_tests) == fail ]] || fail "bundle_cpu_tests: $(status bundle_cpu_tests)"
grep -q "bundle_cpu_tests.core.gz .*packed" "$S/cores.txt" || fail "core not packed: $(cat "$S/cores.txt")"
[[ -f $S/cores/bundle_cpu_tests.core.gz ]] || fail "core missing from the archive"
[[ -f $S/env.txt && -f $S/plan.tsv ]] || fail "env.txt or plan.tsv missing"
grep -q "2 'gpu fallback:' lines" "$T/out1/gpu-check.md" || fail "fallbacks not counted"
grep -q "^streambp LD_LIBRARY_PATH=$T/bundle/lib" "$FAKE_LOG" || fail "streambp without the bundle's libraries"
grep -q "^python LD_LIBRARY_PATH=" "$FAKE_LOG" || fail "the python stage did not run"
! grep -q "^python LD_LIBRARY_PATH=.*bundle" "$FAKE_LOG" || fail "the python stage got the bundle's libraries"
grep -q "ops_head_test.blocking | correctness | first | pass" "$T/out1/gpu-check.md" || fail "report lacks the rerun"
ls "$T/out1" | sort | tr '\n' ' ' | grep -qx "gpu-check.json gpu-check.md logs.tar.gz " ||
  fail "\$OUT holds $(ls "$T/out1")"

# The long-keys attention stage with its program in the bundle: 8K and 32K keys.
ln -s fake "$T/bundle/bin/cuda_attention_long_test"
OUT=$T/out1b GPU_CHECK_STAGES='^(preflight|attention_long)$' "$ROOT/scripts/gpu-check.sh" >"$T/run1b.txt" 2>&1 ||
  fail "attention_long with its program: $(tail -5 "$T/run1b.txt")"
grep -q "^cuda_attention_long_test .*KEYS=8192,32768 ARGS=--gtest_filter=CudaAttentionLong.\* " "$FAKE_LOG" ||
  fail "attention_long's command: $(grep '^cuda_attention_long_test' "$FAKE_LOG")"
rm "$T/bundle/bin/cuda_attention_long_test"

# ---- 2: the follow-up, from case 1's report ----
FOLLOW='^(preflight|ops_head_test|ops_dense_test|gradchecks|attention_long|sanitize_memcheck|profile_qwen3_0.6b_8k_stream|plans)$'
GPU_FOLLOWUP_FROM=$T/out1 GPU_CHECK_STAGES=$FOLLOW "$ROOT/scripts/gpu-followup.sh" --dry-run >"$T/follow-dry.txt"
plan_of() { awk 'NR > 2 && $1 ~ /^[0-9]+$/ && !/ entries; / {print $2, $3}' "$T/follow-dry.txt" | tr '\n' ';'; }
want="preflight plain;ops_head_test.memcheck memcheck;gradchecks.memcheck memcheck;profile_qwen3_0.6b_8k_stream plain;plans plain;"
[[ $(plan_of) == "$want" ]] || { cat "$T/follow-dry.txt" >&2; fail "follow-up plan: $(plan_of)"; }
grep -q "ops_head_test.memcheck.*\[cases: All/BackendOps.LogSoftmaxTargetAndLogitsGradient/cuda:All/BackendOps.EntropyMatchesFloat64/cuda\]" "$T/follow-dry.txt" ||
  fail "the memcheck entry is not narrowed"
: >"$FAKE_LOG"
rc=0
OUT=$T/follow GPU_FOLLOWUP_FROM=$T/out1 GPU_CHECK_STAGES=$FOLLOW PATH=$T/sanitizer:$PATH \
  "$ROOT/scripts/gpu-followup.sh" >"$T/follow.txt" 2>&1 || rc=$?
S=$T/follow-stages
tar -C "$T" -xzf "$T/follow/logs.tar.gz" --one-top-level=follow-stages
for s in preflight profile_qwen3_0.6b_8k_stream plans; do
  [[ $(status "$s") == pass ]] || fail "follow-up $s: $(status "$s")"
done
# The fakes fail without CUDA_LAUNCH_BLOCKING, so under memcheck too (as a real fault would).
for s in ops_head_test.memcheck gradchecks.memcheck; do
  [[ $(status "$s") == fail ]] || fail "follow-up $s: $(status "$s")"
done
((rc == 1)) || fail "the follow-up's exit status $rc, not 1"
grep -q "^compute-sanitizer --tool memcheck" "$FAKE_LOG" || fail "memcheck did not run"
[[ $(grep -c "^streambp .*ARENA=per_tensor .*ARGS=gradcheck" "$FAKE_LOG") == 1 ]] &&
  grep -q "^streambp .*ARENA=per_tensor .*ARGS=gradcheck .*--objective kto" "$FAKE_LOG" ||
  fail "memcheck of gradchecks was not narrowed to kto"
grep -q "^ops_head_test .*ARENA=per_tensor .*--gtest_filter=All/BackendOps.LogSoftmaxTargetAndLogitsGradient" "$FAKE_LOG" ||
  fail "memcheck's program without STREAMBP_CUDA_ARENA=per_tensor or the narrowed filter"
grep -q "follow-up" "$T/follow/gpu-check.md" || fail "the follow-up's report"
# Without a record of the first run: the first run's later stages.
GPU_FOLLOWUP_FROM=$T/none "$ROOT/scripts/gpu-followup.sh" --dry-run >"$T/follow-none.txt"
grep -q "bench_qwen3_0.6b_128k_stream_4layers .*not in the first run's plan" "$T/follow-none.txt" ||
  fail "follow-up without a record: $(cat "$T/follow-none.txt")"
awk '/entries; .* planned: limits add up to/ {split($0, a, "add up to "); split(a[2], b, "s <= "); split(b[2], c, "s"); exit !(b[1] + 0 <= c[1] + 0)}' "$T/follow-none.txt" ||
  fail "the follow-up's planned limits exceed its deadline"

# ---- 3: a failed preflight stops the run, with the reason ----
rc=0
OUT=$T/out3 FAKE_CUDA_DEVICES=0 DEADLINE=100 GPU_CHECK_STAGES='^(preflight|bundle_cpu_tests|ops_dense_test)$' \
  "$ROOT/scripts/gpu-check.sh" >"$T/run3.txt" 2>&1 || rc=$?
((rc == 1)) || fail "a failed preflight: exit $rc"
S=$T/stages3
tar -C "$T" -xzf "$T/out3/logs.tar.gz" --one-top-level=stages3
[[ $(status preflight) == fail ]] || fail "preflight without a device: $(status preflight)"
[[ $(wc -l <"$S/stages.jsonl") == 1 ]] || fail "stages ran after a failed preflight: $(cat "$S/stages.jsonl")"
grep -q "The run stopped after the preflight" "$T/out3/gpu-check.md" || fail "the report does not say it stopped"
grep -q "device | \*\*FAIL\*\* | .*cudaErrorNoDevice" "$T/out3/gpu-check.md" || fail "the report lacks the reason"

# ---- 4: the global deadline caps a hanging stage; the rest is skipped, not lost ----
t0=$(date +%s)
# Limits of 10 s: the preflight is planned (10 <= 30 - 15), the others are later: the hanging
# one runs with the time left and is killed at its limit, the next no longer fits.
OUT=$T/out4 DEADLINE=30 GPU_CHECK_MAX_LIMIT=10 GPU_CHECK_STAGES='^(preflight|ops_layer_test|ops_gemma_test)$' \
  "$ROOT/scripts/gpu-check.sh" >"$T/run4.txt" 2>&1 || true
elapsed=$(($(date +%s) - t0))
((elapsed <= 30)) || fail "deadline 30 s, took ${elapsed}s"
S=$T/stages4
tar -C "$T" -xzf "$T/out4/logs.tar.gz" --one-top-level=stages4
[[ $(status ops_layer_test) == timeout ]] || fail "deadline: hanging stage $(status ops_layer_test)"
[[ $(status ops_gemma_test) == skipped ]] || fail "deadline: next stage $(status ops_gemma_test)"
[[ $(field ops_gemma_test reason) == "did not fit: "* ]] || fail "deadline: $(field ops_gemma_test reason)"

# ---- 5: the check killed mid-stage keeps the report of the stages before ----
OUT=$T/out5 DEADLINE=120 GPU_CHECK_STAGES='^(preflight|ops_dense_test|ops_layer_test)$' \
  "$ROOT/scripts/gpu-check.sh" >"$T/run5.txt" 2>&1 &
check=$!
# Begun: the check names a stage on stderr just before it runs it, after the stages before it
# are reported and packed.
begun() { grep -q "gpu-check.sh: ops_layer_test (at most" "$T/run5.txt" 2>/dev/null; }
for _ in $(seq 600); do begun && break; sleep 0.1; done
begun || fail "the hanging stage never started"
sleep 1
kill -KILL "$check"
wait "$check" 2>/dev/null || true
grep -q "ops_dense_test | correctness | first | fail" "$T/out5/gpu-check.md" || fail "report lost when killed mid-stage"
tar -tzf "$T/out5/logs.tar.gz" >"$T/list5.txt"  # (not piped to grep -q: SIGPIPE under pipefail)
grep -q "logs/ops_dense_test.log" "$T/list5.txt" || fail "logs lost when killed"
# The fake of run 5 outlived the check (killed with it): end it by its id.
while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$FAKE_PIDS"

# ---- 6: --dry-run: every stage, ordered by value, the planned limits within the deadline ----
"$ROOT/scripts/gpu-check.sh" --dry-run >"$T/dry.txt"
for s in preflight ops_gemma_test ops_dense_test hf_parity_test hf_parity_bf16_test gradchecks scores \
  attention_long sanitize_memcheck sanitize_racecheck sanitize_synccheck profile_qwen3_0.6b_8k_stream \
  bench_qwen3_8b_32k_4layers; do
  grep -qE "^[0-9]+ +$s " "$T/dry.txt" || fail "--dry-run lacks $s"
done
python3 - "$T/dry.txt" <<'PY' || fail "dry-run order or limits (above)"
import re, sys
rows = [l.split() for l in open(sys.argv[1]) if re.match(r"^\d+ +\S+ +\S+ +(first|later) ", l)]
order = ["preflight", "correctness", "profile", "perf"]
classes = [order.index(r[2]) for r in rows]
assert classes == sorted(classes), f"classes out of order: {[r[2] for r in rows]}"
assert rows[0][1] == "preflight", rows[0]
planned = [r for r in rows if r[3] == "first"]
tiers = [r[3] for r in rows]
assert tiers == sorted(tiers), f"a planned stage after a later one: {tiers}"
assert any(r[2] == "profile" for r in planned), "the profile is not planned"
assert all(r[2] != "correctness" for r in rows if r[3] == "later"), "correctness left for later"
total = sum(int(r[4].rstrip("s")) for r in planned)
line = open(sys.argv[1]).read().splitlines()[-1]
m = re.search(r"limits add up to (\d+)s <= (\d+)s \(the (\d+)s deadline less (\d+)s\)", line)
assert m and int(m.group(1)) == total, (line, total)
deadline, reserve = int(m.group(3)), int(m.group(4))
assert deadline == 540 and total <= deadline - reserve, (total, deadline, reserve)
print(f"gpu_check_test: dry run: {len(planned)} planned stages, {total}s <= {deadline - reserve}s")
PY
echo "gpu_check_test: ok"

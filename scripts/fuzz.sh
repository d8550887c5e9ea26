#!/usr/bin/env bash
# Runs every libFuzzer harness of a fuzz build (scripts/build.sh sanitize builds them with clang):
# first the committed inputs (fuzz/corpus/<name>/ seeds and fuzz/regressions/<name>/, the inputs
# of crashes found and fixed) one by one, then fuzzing for FUZZ_SECONDS (default 15) per harness,
# two harnesses at a time, under AddressSanitizer + UBSan. New corpus entries go to a temporary
# directory, never into the repository. Prints one line per harness: executions, rate, coverage.
# A crash, leak, timeout (>10 s for one input) or allocation over 2 GiB fails the script and
# leaves the input in fuzz-crashes/<name>/ of the build tree (turn it into a regression input).
# Usage: scripts/fuzz.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-sanitize}"
seconds="${FUZZ_SECONDS:-15}"
mapfile -t harnesses < <(cd "$build/fuzz" && ls fuzz_* 2>/dev/null | grep -v '\.' || true)
if [ ${#harnesses[@]} -eq 0 ]; then
  echo "fuzz.sh: no harnesses in $build/fuzz (configure with -DSTREAMBP_FUZZ=ON, clang)" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048)

fuzz_one() {
  local h="$1" name="${1#fuzz_}"
  local bin="$build/fuzz/$h" seeds="fuzz/corpus/$name" regress="fuzz/regressions/$name"
  local crashes="$build/fuzz-crashes/$name" log="$work/$h.log"
  mkdir -p "$work/$name" "$crashes"
  local replay=("$seeds"/*)
  [ -d "$regress" ] && replay+=("$regress"/*)
  # Replay: every committed input once, each in a fresh run.
  if ! "$bin" "${limits[@]}" -artifact_prefix="$crashes/" "${replay[@]}" >"$log" 2>&1; then
    echo "$h: FAILED replaying committed inputs (log: $crashes/replay.log)"
    cp "$log" "$crashes/replay.log"
    return 1
  fi
  local dict=()
  [ -f "fuzz/dict/$name.dict" ] && dict=(-dict="fuzz/dict/$name.dict")
  if ! "$bin" "${limits[@]}" "${dict[@]}" -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="$crashes/" "$work/$name" "$seeds" >"$log" 2>&1; then
    echo "$h: FAILED while fuzzing (input and log in $crashes/)"
    cp "$log" "$crashes/fuzz.log"
    tail -n 30 "$log"
    return 1
  fi
  local runs cov rate
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*$' || echo 0)
  echo "$h: ${#replay[@]} committed inputs replayed; fuzzed ${seconds} s: $runs executions ($rate/s), coverage $cov edges, no crash"
}

failed=0
pids=()
names=()
for h in "${harnesses[@]}"; do
  fuzz_one "$h" > "$work/$h.summary" &
  pids+=($!)
  names+=("$h")
  if [ ${#pids[@]} -ge 2 ]; then
    wait "${pids[0]}" || failed=1
    cat "$work/${names[0]}.summary"
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed=1
  cat "$work/${names[$i]}.summary"
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz.sh: a harness failed" >&2
  exit 1
fi
echo "fuzz.sh: ${#harnesses[@]} harnesses, ${seconds} s each, no crash"

#!/usr/bin/env bash
# The GPU check's prepared second run (docs/CUDA.md "The GPU check"): about 2 minutes, for what
# the first run (scripts/gpu-check.sh) found. Run from the repository root on a machine with an
# NVIDIA GPU and gpu-bundle/ beside it, with the first run's $OUT (gpu-check.json or
# logs.tar.gz) in GPU_FOLLOWUP_FROM (default ./gpu-check-out).
#
#   scripts/gpu-followup.sh            # the report in $OUT (default ./gpu-followup-out)
#   scripts/gpu-followup.sh --dry-run  # the plan it would run, from the first run's record
#
# The plan (tools/gpu_check/followup_plan.py), in order: the preflight; a CUDA_LAUNCH_BLOCKING=1
# rerun of each stage that failed with a launch or kernel error and was not rerun so in the first
# run, then compute-sanitizer memcheck of it (one allocation per tensor), both on the gtest cases
# or items that failed; then the stages that did not run (the deadline, a wedged GPU), in the
# catalogue's order. Without a record of the first run: the stages the first run plans as
# "later" (those beyond its deadline). Entries are planned while their limits add up to no more
# than DEADLINE (default 120) less RESERVE (10); the rest run only if their whole limit fits in
# what is left. The stage machinery is the first run's (tools/gpu_check/lib.sh): the same
# limits, deadline, report after every stage and packed logs; the same environment variables
# for tests (GPU_CHECK_BUNDLE_DIR, GPU_CHECK_SMALL, GPU_CHECK_PYTHON, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRIPT=gpu-followup.sh
TITLE="streambp GPU check: follow-up"
DRY_RUN=0
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  "") ;;
  *) echo "usage: scripts/gpu-followup.sh [--dry-run]" >&2; exit 2 ;;
esac
DEADLINE=${DEADLINE:-120}
RESERVE=${RESERVE:-10}
OUT=${OUT:-$ROOT/gpu-followup-out}
FROM=${GPU_FOLLOWUP_FROM:-$ROOT/gpu-check-out}
source tools/gpu_check/lib.sh
gc_setup
source tools/gpu_check/stages.sh
# The catalogue with the first run's tiers (its deadline: FIRST_DEADLINE, default 540).
PLAN_DEADLINE=${FIRST_DEADLINE:-540} gc_collect
python3 tools/gpu_check/followup_plan.py --plan "$WORK/plan.tsv" --from "$FROM" \
  --deadline "$DEADLINE" --reserve "$RESERVE" >"$WORK/followup.tsv" || {
  echo "$SCRIPT: followup_plan.py failed" >&2
  exit 2
}
mapfile -t ENTRIES <"$WORK/followup.tsv"
if ((DRY_RUN)); then
  echo "the first run's record: $( [[ -e $FROM ]] && echo "$FROM" || echo "none ($FROM absent)")"
  printf '%-3s %-46s %-9s %-5s %6s  %s\n' "#" "run as" variant tier limit why
  total=0 n=0
  for i in "${!ENTRIES[@]}"; do
    IFS=$'\t' read -r as _ var lim filt items tier why <<<"${ENTRIES[i]}"
    [[ $filt == - ]] && filt=""
    [[ $items == - ]] && items=""
    printf '%-3s %-46s %-9s %-5s %5ss  %s%s\n' "$((i + 1))" "$as" "$var" "$tier" "$lim" "$why" \
      "${filt:+ [cases: $filt]}${items:+ [items: $items]}"
    [[ $tier == first ]] && total=$((total + lim)) n=$((n + 1))
  done
  echo "${#ENTRIES[@]} entries; $n planned: limits add up to ${total}s <= $((DEADLINE - RESERVE))s" \
    "(the ${DEADLINE}s deadline less ${RESERVE}s); the rest only in the time left"
  rm -rf "$WORK"
  exit 0
fi

# One pass of the catalogue per entry: the entry's stage runs under its entry's name, variant
# and narrowing. The preflight first; if it fails, nothing else.
entry() {
  [[ -z $STOPPED && $1 == "$E_STAGE" ]] || return 1
  if [[ $1 != preflight && ${STATUS[preflight]:-pass} != pass ]]; then
    STOPPED="the preflight failed"
    return 1
  fi
  if [[ $E_TIER == later ]] && ((E_LIMIT > $(left) - RESERVE)); then
    gc_record_skip "$E_AS" "$3" "did not fit: $(($(left) - RESERVE))s left, limit ${E_LIMIT}s"
    return 1
  fi
  RUN_AS=$E_AS RUN_VARIANT=$E_VARIANT RUN_LIMIT=$E_LIMIT RUN_GTEST_FILTER=$E_FILTER RUN_ITEMS=$E_ITEMS
  RUN_TIER=$E_TIER
}
for e in "${ENTRIES[@]}"; do
  IFS=$'\t' read -r E_AS E_STAGE E_VARIANT E_LIMIT E_FILTER E_ITEMS E_TIER _ <<<"$e"
  [[ $E_FILTER == - ]] && E_FILTER=""
  [[ $E_ITEMS == - ]] && E_ITEMS=""
  gc_pass entry
done
gc_finish

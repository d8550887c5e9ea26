# The stage machinery of the GPU check, sourced by scripts/gpu-check.sh (the first run) and
# scripts/gpu-followup.sh (the prepared second one), so that both run a stage the same way: one
# process group per stage in a session of its own, its own limit capped by a global deadline,
# the report and the packed logs rewritten after every stage. The stages themselves, in the
# order of their value, are tools/gpu_check/stages.sh (`catalogue`).
#
# The sourcing script sets ROOT, DEADLINE's default, OUT's default and DRY_RUN, then calls
# gc_setup, gc_collect, and runs passes of the catalogue (gc_pass) with its own selection.
# Nothing here is run on source.

# ---- settings and the bundle ----
# gc_setup: the variables every stage reads (exported: stage commands are child shells).
gc_setup() {
  START=$(date +%s)
  RESERVE=${RESERVE:-15}  # seconds kept for the last report and packing
  MAX_LIMIT=${GPU_CHECK_MAX_LIMIT:-100000}
  LOG_LIMIT=${LOG_LIMIT:-$((12 << 20))}
  ONLY=${GPU_CHECK_STAGES:-.}
  SKIP_RE=${GPU_CHECK_SKIP:-}
  PY=${GPU_CHECK_PYTHON:-python3}
  SMALL=${GPU_CHECK_SMALL:-0}
  if ((SMALL)); then
    export GTEST_TOTAL_SHARDS=${GPU_CHECK_SMALL_SHARDS:-8} GTEST_SHARD_INDEX=0
  fi
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/sbp-gpu-check.XXXXXX")
  ((DRY_RUN)) || mkdir -p "$OUT"
  mkdir -p "$WORK/logs" "$WORK/results" "$WORK/cores" "$WORK/run"
  : >"$WORK/stages.jsonl"
  R=$WORK/results  # stage results: $R/NAME.json

  # The environment as found (preflight reports it), then the variables the check sets itself
  # per stage are unset: a CUDA_LAUNCH_BLOCKING=1 left in the machine's environment would make
  # every timing a blocking one, a STREAMBP_CUDA_ATTENTION=simt every attention stage a simt one.
  env | LC_ALL=C sort >"$WORK/env_vars.txt"
  unset CUDA_LAUNCH_BLOCKING STREAMBP_CUDA_ATTENTION STREAMBP_CUDA_ARENA

  if [[ -n ${GPU_CHECK_BUNDLE_DIR:-} ]]; then
    BUNDLE_DIR=$GPU_CHECK_BUNDLE_DIR
  elif ((DRY_RUN)); then
    BUNDLE_DIR=$ROOT/gpu-bundle/unpacked  # not read in a dry run
  else
    local bundle=$ROOT/gpu-bundle/bundle.tar.xz
    if [[ ! -f $bundle ]]; then
      echo "$SCRIPT: $bundle missing: run scripts/gpu-bundle.sh on a machine with nvcc first" >&2
      exit 2
    fi
    BUNDLE_DIR=$WORK/bundle
    mkdir -p "$BUNDLE_DIR"
    tar -C "$BUNDLE_DIR" -xJf "$bundle"
    gc_prefer_machine_runtime
  fi
  BIN=$BUNDLE_DIR/bin
  SB=$BIN/streambp
  # Our programs' library path: the bundle's libraries first, then CUDA's (the toolkit's, or
  # the pip wheels' beside PyTorch). Never exported as LD_LIBRARY_PATH: `ours` puts it on one
  # command, so the Python stages (PyTorch) keep the machine's own environment.
  local cuda_libs=/usr/local/cuda/lib64 d
  if ((!DRY_RUN)); then
    for d in $("$PY" -c 'import nvidia, os
for p in nvidia.__path__:
    for d in sorted(os.listdir(p)):
        if os.path.isdir(os.path.join(p, d, "lib")): print(os.path.join(p, d, "lib"))' 2>/dev/null); do
      cuda_libs=$cuda_libs:$d
    done
  fi
  OUR_LD=$BUNDLE_DIR/lib:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OUR_LD ROOT SB BIN PY WORK R SMALL SCRIPT
  declare -g -a PLAN_NAMES=() PLAN_LIMITS=() PLAN_KINDS=() PLAN_CLASSES=() PLAN_NOTES=() PLAN_TIERS=()
  declare -g -A STATUS=() KERNEL_ERROR=() TIER=()
  GPU_WEDGED=0 STOPPED="" CLASS="" WORK_NOTE="" PHASE=collect
}

# The bundle carries libstdc++ and libgcc_s for a machine whose own are older than the build
# machine's. Where the machine's own are at least as new (they hold the newest symbol version
# the bundle's copy has, so every one our programs need), the bundle's copies are set aside:
# compute-sanitizer injects its own C++ library into our programs, and a libstdc++ older than
# the one it was built against, first on their library path, would stop it from loading.
gc_prefer_machine_runtime() {
  local so pat ours_file machine newest
  for so in libstdc++.so.6 libgcc_s.so.1; do
    ours_file=$BUNDLE_DIR/lib/$so
    [[ -f $ours_file ]] || continue
    machine=$(ldconfig -p 2>/dev/null | awk -v s="$so" '$1 == s && /x86-64/ {print $NF; exit}')
    [[ -n $machine && -f $machine ]] || continue
    pat='GLIBCXX_[0-9]+(\.[0-9]+)*'
    [[ $so == libgcc_s* ]] && pat='GCC_[0-9]+(\.[0-9]+)*'
    newest=$(grep -aoE "$pat" "$ours_file" | sort -uV | tail -1)
    if [[ -n $newest ]] && grep -aoE "$pat" "$machine" | grep -qxF "$newest"; then
      mkdir -p "$WORK/bundle-lib-unused"
      mv "$ours_file" "$WORK/bundle-lib-unused/"
      echo "the machine's $machine has $newest: the bundle's $so is not used" >>"$WORK/runtime.txt"
    else
      echo "the machine's $machine lacks ${newest:-?}: the bundle's $so is used" >>"$WORK/runtime.txt"
    fi
  done
}

# ---- how our programs start ----
# ours CMD...: a program of the bundle with the bundle's libraries. GPU_CHECK_GTEST_FILTER (the
# follow-up: the cases that failed) replaces a --gtest_filter; GPU_CHECK_SANITIZER=TOOL runs the
# program under compute-sanitizer TOOL with one device allocation per tensor
# (STREAMBP_CUDA_ARENA=per_tensor, docs/CUDA.md), so memcheck sees each tensor's bounds rather
# than a 1 GiB arena segment's. A program missing from the bundle is a skipped stage (77).
ours() {
  local args=("$@") i
  if [[ ${args[0]} == "$BIN"/* && ! -x ${args[0]} ]]; then
    echo "gpu-check: skipped: $(basename "${args[0]}") is not in the bundle"
    return 77
  fi
  if [[ -n ${GPU_CHECK_GTEST_FILTER:-} ]]; then
    for i in "${!args[@]}"; do
      [[ ${args[i]} == --gtest_filter=* ]] && args[i]=--gtest_filter=$GPU_CHECK_GTEST_FILTER
    done
  fi
  local pre=()
  if [[ -n ${GPU_CHECK_SANITIZER:-} ]]; then
    local cs
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
    if [[ -z $cs ]]; then
      if ((SMALL)); then  # the dry run: the filters and the arena setting, without the sanitizer
        echo "gpu-check: no compute-sanitizer (GPU_CHECK_SMALL: running without it)"
      else
        echo "gpu-check: skipped: compute-sanitizer not found (PATH, /usr/local/cuda*/bin)"
        return 77
      fi
    else
      # --error-exitcode: a hazard fails the stage even when the program's own checks pass.
      pre=("$cs" --tool "$GPU_CHECK_SANITIZER" --target-processes all --error-exitcode 86
           --print-limit 20)
    fi
    args=(env STREAMBP_CUDA_ARENA=per_tensor "${args[@]}")
  fi
  local run=(env LD_LIBRARY_PATH="$OUR_LD" STREAMBP_TEST_SOURCE_DIR="$ROOT" STREAMBP_TEST_BINARY="$SB")
  ((${#pre[@]})) || { "${run[@]}" "${args[@]}"; return; }
  local out rc
  out=$(mktemp "$WORK/sanitizer.XXXXXX")
  "${pre[@]}" "${run[@]}" "${args[@]}" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  # compute-sanitizer that cannot instrument this device (seen on gVisor machines: "Device not
  # supported", then error 999 at the first allocation) found nothing of ours: skipped.
  if ((rc != 0)) && grep -q "Device not supported\|Unable to find injection library" "$out"; then
    echo "gpu-check: skipped: compute-sanitizer cannot run here: $(grep -m1 "Device not supported\|Unable to find injection" "$out")"
    rc=77
  fi
  rm -f "$out"
  return $rc
}

# item NAME LIMIT CMD...: one part of a merged stage (all gradchecks, all score fixtures, the
# sanitizer programs), in a time limit of its own so that one hang does not lose the rest.
# GPU_CHECK_ITEMS (a regex; the follow-up: the items that failed) runs only those. Each prints
# "gpu-check: item NAME: STATUS" (summarize.py and the follow-up read it); ITEMS_RC collects.
ITEMS_RC=0 ITEMS_RAN=0
item() {
  local name=$1 limit=$2 rc s
  shift 2
  if [[ -n ${GPU_CHECK_ITEMS:-} && ! $name =~ ^(${GPU_CHECK_ITEMS})$ ]]; then return 0; fi
  echo "gpu-check: item $name (at most ${limit}s)"
  # timeout signals its whole process group (the command's children too), SIGKILL 5 s later.
  timeout -k 5 "$limit" bash -c '"$@"' item "$@"
  rc=$?
  case $rc in
    0) s=pass ;;
    124 | 137) s=timeout ;;
    77) s=skipped ;;
    *) s=fail ;;
  esac
  echo "gpu-check: item $name: $s (rc $rc)"
  ((rc == 77)) || ITEMS_RAN=1
  ((rc == 0 || rc == 77)) || ITEMS_RC=1
  return 0
}
# items_done: the merged stage's status: failed if an item failed, skipped if all were skipped.
items_done() {
  ((ITEMS_RC)) && return 1
  ((ITEMS_RAN)) || { echo "gpu-check: skipped: every item was skipped"; return 77; }
  return 0
}
export -f ours item items_done

# ---- running one stage ----
# The processes of session SID still running (not zombies), by id.
session_pids() { ps -e -o pid=,sid=,stat= | awk -v s="$1" '$2 == s && $3 !~ /^Z/ {print $1}'; }
# Signal every process of session SID, each by its id (a stage's items run in process groups of
# their own inside the stage's session; the session holds them all).
signal_session() {
  local sig=$1 sid=$2 p
  for p in $(session_pids "$sid"); do kill "-$sig" "$p" 2>/dev/null; done
}
# gone_within SECONDS SID: waits (by the clock: each look at the process table takes time)
# until no process of session SID runs, or SECONDS have passed.
gone_within() {
  local until=$(($(date +%s%N) / 1000000 + $1 * 1000))
  while [[ -n $(session_pids "$2") ]] && (($(date +%s%N) / 1000000 < until)); do sleep 0.2; done
}
# run_limited LIMIT LOG DIR CMD...: runs CMD (a program or an exported function) in DIR, in a
# session and process group of its own, with the variables of STAGE_ENV (NAME=VALUE...), output
# to LOG, cores up to 256 MiB; returns its status, 124 after a kill at LIMIT seconds, 125 if a
# process outlived SIGKILL.
STAGE_ENV=()
run_limited() {
  local limit=$1 log=$2 dir=$3
  shift 3
  (
    cd "$dir" || exit 1
    ulimit -c $((256 * 1024)) 2>/dev/null
    ((${#STAGE_ENV[@]})) && export "${STAGE_ENV[@]}"
    exec setsid -w bash -c '"$@"' gpu-check-stage "$@"
  ) >"$log" 2>&1 </dev/null &
  local pid=$! end=$(($(date +%s%N) / 1000000 + limit * 1000))
  leader() { [[ -e /proc/$1 ]] && [[ $(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) != Z ]]; }
  while leader "$pid"; do
    if (($(date +%s%N) / 1000000 >= end)); then
      echo "gpu-check: past its ${limit}s limit: SIGTERM" >>"$log"
      signal_session TERM "$pid"
      gone_within 5 "$pid"
      if [[ -n $(session_pids "$pid") ]]; then
        echo "gpu-check: still running 5 s after SIGTERM: SIGKILL" >>"$log"
        signal_session KILL "$pid"
        gone_within 5 "$pid"
      fi
      if [[ -n $(session_pids "$pid") ]]; then
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
  signal_session KILL "$pid"  # what the program left running in the background
  return $rc
}

now() { date +%s; }
left() { echo $((DEADLINE - ($(now) - START))); }

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
  local list=$WORK/pack.list f budget size
  # Not env_vars.txt: the whole environment may hold a token; preflight.json keeps the CUDA,
  # cuBLAS, PyTorch and OpenMP variables.
  (cd "$WORK" && { ls logs/* results/* 2>/dev/null; echo stages.jsonl; echo plan.tsv
                   ls env.txt runtime.txt 2>/dev/null; }) >"$list"
  budget=$((LOG_LIMIT - $(cd "$WORK" && xargs -r du -cb <"$list" 2>/dev/null | tail -1 | cut -f1)))
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
    tar -C "$WORK" -czf "$OUT/logs.tar.gz.part" stages.jsonl plan.tsv cores.txt \
      $(cd "$WORK" && ls env.txt results/preflight.json 2>/dev/null)
  fi
  mv -f "$OUT/logs.tar.gz.part" "$OUT/logs.tar.gz"
}
report() {
  python3 "$ROOT/tools/gpu_check/summarize.py" "$WORK" "$OUT" --title "${TITLE:-streambp GPU check}" \
    >/dev/null 2>"$WORK/summarize.err" ||
    echo "$SCRIPT: summarize.py failed: $(tail -1 "$WORK/summarize.err")" >&2
  pack
}

# Launch and kernel errors: what a rerun with CUDA_LAUNCH_BLOCKING=1 pins to the launch that
# caused it. CUDA's error names and strings as our programs print them (cuda_check.h:
# "call: cudaErrorX: string (last kernel launched: k)"), cuBLAS's execution failure (status 13),
# and the launch configuration errors. Never a tolerance failure, a timeout or a Python stage.
# One extended regular expression (grep -E and Python's re read it alike) in kernel_error.re.
KERNEL_ERROR_RE=$(<"$(dirname "${BASH_SOURCE[0]}")/kernel_error.re")  # summarize.py reads it too
export KERNEL_ERROR_RE

# ---- the plan ----
# section CLASS: the class of the stages declared after it (preflight, correctness, profile,
# perf); the order of classes is the order of value, and --dry-run shows it.
section() { CLASS=$1; }
# stage NAME LIMIT KIND CMD...: one stage of the catalogue. KIND: cpu (runs even once the GPU is
# wedged), gpu, gpu-cases (gpu, and a gtest program whose skipped cases mean no usable GPU: a
# failure here), py (gpu, PyTorch's: never rerun blocking). In PHASE collect it is recorded
# (gc_collect); in PHASE run it runs when the pass selects it (gc_selected).
stage() {
  local name=$1 limit=$2 kind=$3
  shift 3
  if [[ $PHASE == collect ]]; then
    [[ $name =~ $ONLY ]] || { WORK_NOTE=""; return 0; }
    [[ -n $SKIP_RE && $name =~ $SKIP_RE ]] && { WORK_NOTE=""; return 0; }
    PLAN_NAMES+=("$name") PLAN_LIMITS+=("$limit") PLAN_KINDS+=("$kind") PLAN_CLASSES+=("$CLASS")
    PLAN_NOTES+=("$WORK_NOTE")
    WORK_NOTE=""
    return 0
  fi
  WORK_NOTE=""
  [[ -n ${TIER[$name]:-} ]] || return 0  # left out by GPU_CHECK_STAGES / GPU_CHECK_SKIP
  ((limit > MAX_LIMIT)) && limit=$MAX_LIMIT
  gc_selected "$name" "$limit" "$kind" || return 0
  run_stage "$RUN_AS" "${RUN_LIMIT:-$limit}" "$kind" "$RUN_VARIANT" "$@"
}

# gc_collect: the catalogue's stages in order, and the first run's tiers: the stages whose
# limits, added in order, fit in DEADLINE - RESERVE are planned ("first"); from the first one
# that does not fit on, every stage is "later": run only with the time the planned ones leave,
# whole limit or not at all, else by scripts/gpu-followup.sh. PLAN_DEADLINE (default DEADLINE)
# is the deadline the tiers are computed for (the follow-up computes the first run's).
gc_collect() {
  PHASE=collect
  catalogue
  local i
  for i in "${!PLAN_LIMITS[@]}"; do  # GPU_CHECK_MAX_LIMIT (tests): the plan's limits too
    ((PLAN_LIMITS[i] > MAX_LIMIT)) && PLAN_LIMITS[i]=$MAX_LIMIT
  done
  local budget=$((${PLAN_DEADLINE:-$DEADLINE} - RESERVE)) sum=0 over=0
  for i in "${!PLAN_NAMES[@]}"; do
    if ((!over && sum + PLAN_LIMITS[i] <= budget)); then
      sum=$((sum + PLAN_LIMITS[i]))
      PLAN_TIERS[i]=first
    else
      over=1
      PLAN_TIERS[i]=later
    fi
    TIER[${PLAN_NAMES[i]}]=${PLAN_TIERS[i]}
  done
  PLANNED_SUM=$sum
  # The plan as a table (stage, class, tier, kind, limit): packed with the logs; read by
  # summarize.py and gpu-followup.sh.
  for i in "${!PLAN_NAMES[@]}"; do
    printf '%s\t%s\t%s\t%s\t%s\n' "${PLAN_NAMES[i]}" "${PLAN_CLASSES[i]}" "${PLAN_TIERS[i]}" \
      "${PLAN_KINDS[i]}" "${PLAN_LIMITS[i]}"
  done >"$WORK/plan.tsv"
}

# gc_print_plan TITLE: the --dry-run table.
gc_print_plan() {
  local i later=0 nlater=0
  printf '%-3s %-42s %-11s %-5s %6s  %s\n' "#" stage class tier limit "work (the limit's basis)"
  for i in "${!PLAN_NAMES[@]}"; do
    printf '%-3s %-42s %-11s %-5s %5ss  %s\n' "$((i + 1))" "${PLAN_NAMES[i]}" "${PLAN_CLASSES[i]}" \
      "${PLAN_TIERS[i]}" "${PLAN_LIMITS[i]}" "${PLAN_NOTES[i]}"
    if [[ ${PLAN_TIERS[i]} == later ]]; then later=$((later + PLAN_LIMITS[i])) nlater=$((nlater + 1)); fi
  done
  echo "${#PLAN_NAMES[@]} stages; $((${#PLAN_NAMES[@]} - nlater)) planned: limits add up to" \
    "${PLANNED_SUM}s <= $((${PLAN_DEADLINE:-$DEADLINE} - RESERVE))s (the ${PLAN_DEADLINE:-$DEADLINE}s" \
    "deadline less ${RESERVE}s); $nlater later (${later}s): run only in the time the planned" \
    "ones leave, else by scripts/gpu-followup.sh"
}

# run_stage NAME LIMIT KIND VARIANT CMD...: VARIANT plain, blocking (CUDA_LAUNCH_BLOCKING=1)
# or memcheck (compute-sanitizer, one allocation per tensor); RUN_BASE is the catalogue's name
# (NAME may be NAME.blocking...); RUN_GTEST_FILTER and RUN_ITEMS, when the pass sets them, narrow
# the stage (the follow-up: the cases or items that failed).
run_stage() {
  local name=$1 limit=$2 kind=$3 variant=$4
  shift 4
  local avail=$(($(left) - RESERVE)) status rc=-1 t0 t1 log=$WORK/logs/$name.log reason=""
  ((limit > MAX_LIMIT)) && limit=$MAX_LIMIT
  ((limit > avail)) && limit=$avail
  local dir=$WORK/run/$name
  mkdir -p "$dir"
  t0=$(date +%s.%N)
  if [[ -n $STOPPED ]]; then
    status=skipped limit=0 reason=$STOPPED
  elif ((GPU_WEDGED)) && [[ $kind != cpu ]]; then
    status=skipped limit=0 reason="an earlier stage's process could not be killed (GPU wedged)"
  elif ((limit < 2)); then
    status=skipped limit=0 reason="the ${DEADLINE}s deadline is spent"
  else
    echo "$SCRIPT: $name (at most ${limit}s)" >&2
    STAGE_ENV=()
    case $variant in
      blocking) STAGE_ENV+=(CUDA_LAUNCH_BLOCKING=1) ;;
      memcheck) STAGE_ENV+=(GPU_CHECK_SANITIZER=memcheck) ;;
    esac
    [[ -n ${RUN_GTEST_FILTER:-} ]] && STAGE_ENV+=(GPU_CHECK_GTEST_FILTER="$RUN_GTEST_FILTER")
    [[ -n ${RUN_ITEMS:-} ]] && STAGE_ENV+=(GPU_CHECK_ITEMS="$RUN_ITEMS")
    run_limited "$limit" "$log" "$dir" "$@"
    rc=$?
    STAGE_ENV=()
    case $rc in
      0) status=pass ;;
      124) status=timeout ;;
      125) status=timeout GPU_WEDGED=1 ;;
      *) status=fail ;;
    esac
    # 77 with the reason on a line of its own: a program not in the bundle, no torch, no
    # compute-sanitizer. A program's own exit status 77 without that line is a failure.
    if ((rc == 77)) && grep -q "^gpu-check: skipped: " "$log"; then
      status=skipped reason=$(grep "^gpu-check: skipped: " "$log" | tail -1 | sed 's/^gpu-check: skipped: //')
    fi
    if [[ $status == pass && $kind == gpu-cases ]] && grep -q "SKIPPED" "$log"; then
      echo "gpu-check: the cuda cases were skipped: no usable GPU" >>"$log"
      status=fail
    fi
  fi
  [[ -n $reason && ! -s $log ]] && echo "skipped: $reason" >"$log"
  t1=$(date +%s.%N)
  # Core files the stage left (core_pattern "core" or "core.PID": its own directory).
  local c
  for c in "$dir"/core*; do
    [[ -f $c ]] && gzip -1 -c "$c" >"$WORK/cores/$name.$(basename "$c").gz" && rm -f "$c"
  done
  [[ -f $log ]] && cut_log "$log"
  local kerr=false
  if [[ $status == fail && $kind != py ]] && grep -qE "$KERNEL_ERROR_RE" "$log"; then
    kerr=true KERNEL_ERROR[$name]=1
  fi
  STATUS[$name]=$status
  local base=$RUN_BASE
  python3 -c 'import json, sys
a = sys.argv[1:]
print(json.dumps({"name": a[0], "stage": a[1], "variant": a[2], "class": a[3], "tier": a[4],
                  "status": a[5], "rc": int(a[6]), "seconds": round(float(a[7]), 2),
                  "limit": int(a[8]), "kernel_error": a[9] == "true", "reason": a[10],
                  "result_file": a[11] or None}))' \
    "$name" "$base" "$variant" "${RUN_CLASS:-?}" "${RUN_TIER:-?}" "$status" "$rc" \
    "$(awk "BEGIN{print $t1 - $t0}")" "$limit" "$kerr" "$reason" \
    "$([[ -f $R/$base.json ]] && echo "results/$base.json")" >>"$WORK/stages.jsonl"
  report
}

# gc_record_skip NAME KIND REASON: a stage recorded as skipped without running (the report and
# scripts/gpu-followup.sh see it).
gc_record_skip() {
  echo "skipped: $3" >"$WORK/logs/$1.log"
  python3 -c 'import json, sys
a = sys.argv[1:]
print(json.dumps({"name": a[0], "stage": a[0], "variant": "plain", "class": a[1], "tier": a[2],
                  "status": "skipped", "rc": -1, "seconds": 0, "limit": 0,
                  "kernel_error": False, "reason": a[3], "result_file": None}))' \
    "$1" "${RUN_CLASS:-?}" "${RUN_TIER:-?}" "$3" >>"$WORK/stages.jsonl"
}

# gc_narrow LOG: RUN_GTEST_FILTER and RUN_ITEMS from the gtest cases and stage items that failed
# in LOG (summarize.py reads them), so that a rerun repeats only those.
gc_narrow() {
  local lines
  mapfile -t lines < <(python3 "$ROOT/tools/gpu_check/summarize.py" --failed "$1")
  RUN_GTEST_FILTER=${lines[0]:-} RUN_ITEMS=${lines[1]:-}
  return 0
}

# gc_pass SELECTOR: runs the catalogue once; SELECTOR NAME LIMIT KIND says whether NAME runs in
# this pass (it may set RUN_AS, the name the run is recorded under, RUN_VARIANT, RUN_LIMIT,
# RUN_GTEST_FILTER and RUN_ITEMS).
gc_pass() {
  PHASE=run
  gc_selected() {
    local i
    RUN_AS=$1 RUN_BASE=$1 RUN_VARIANT=plain RUN_CLASS="" RUN_TIER=${TIER[$1]}
    RUN_GTEST_FILTER="" RUN_ITEMS="" RUN_LIMIT=""
    for i in "${!PLAN_NAMES[@]}"; do
      [[ ${PLAN_NAMES[i]} == "$1" ]] && RUN_CLASS=${PLAN_CLASSES[i]}
    done
    "$SELECTOR" "$@"
  }
  SELECTOR=$1
  catalogue
}

# gc_finish: the last report; the exit status says whether anything failed or timed out.
gc_finish() {
  report
  [[ -z ${GPU_CHECK_BUNDLE_DIR:-} ]] && rm -rf "$WORK/bundle"  # the unpacked programs; logs stay
  echo "$SCRIPT: report in $OUT/gpu-check.md, logs in $OUT/logs.tar.gz ($(stat -c %s "$OUT/logs.tar.gz") bytes), $(($(now) - START))s" >&2
  cat "$OUT/gpu-check.md"
  if grep -q '"status": "\(fail\|timeout\)"' "$WORK/stages.jsonl"; then return 1; fi
  return 0
}

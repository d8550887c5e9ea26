#!/usr/bin/env python3
"""The plan of scripts/gpu-followup.sh, from what the first run (scripts/gpu-check.sh) found.

    followup_plan.py --plan PLAN.TSV --from PATH --deadline S --reserve S

PLAN.TSV: the catalogue in order (tools/gpu_check/lib.sh gc_collect: stage, class, tier, kind,
limit; tiers as the first run computed them). PATH: the first run's $OUT (gpu-check.json, or
logs.tar.gz), or one of those files; absent, the follow-up runs the first run's "later" stages.

Prints one entry a line, tab-separated ("-" for an empty field): run-as name, catalogue stage, variant (plain, blocking,
memcheck), limit, gtest filter, item regex, tier (first: within the deadline less the reserve,
in order; later: only if its whole limit fits in what is left), why. In order of value:
  1. the preflight (a fresh machine);
  2. a blocking rerun (CUDA_LAUNCH_BLOCKING=1) of each stage that failed with a launch or kernel
     error and was not rerun so in the first run, on the cases / items that failed;
  3. compute-sanitizer memcheck of the same, one allocation per tensor: the faulting access;
  4. the stages that did not run (the deadline, a wedged GPU, a failed preflight; not those
     skipped for something the machine lacks: it will lack it again), in the catalogue's order.
"""
import argparse
import io
import json
import os
import re
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import summarize  # noqa: E402  (the same log analysis as the report)

MACHINE_SKIPS = summarize.MACHINE_SKIPS  # skips that would happen again
MEMCHECK_LIMIT = 90  # memcheck slows kernels 10-100x; the failing cases only


def load_plan(path):
    plan = []
    with open(path) as f:
        for line in f:
            name, cls, tier, kind, limit = line.rstrip("\n").split("\t")[:5]
            plan.append({"name": name, "class": cls, "tier": tier, "kind": kind, "limit": int(limit)})
    return plan


def stages_from_tar(path):
    """The stage records of a logs.tar.gz, each with its log's analysis."""
    stages, logs = [], {}
    with tarfile.open(path) as t:
        for m in t.getmembers():
            if not m.isfile():
                continue
            if m.name.endswith("stages.jsonl"):
                stages = [json.loads(l) for l in t.extractfile(m).read().decode().splitlines() if l.strip()]
            elif "/logs/" in "/" + m.name and m.name.endswith(".log"):
                logs[os.path.basename(m.name)[:-4]] = io.TextIOWrapper(
                    t.extractfile(m), errors="replace").read().splitlines()
    for s in stages:
        s.update(summarize.analyse(logs.get(s["name"], [])))
    return stages


def first_run(path):
    if not path or not os.path.exists(path):
        return None
    if os.path.isdir(path):
        for name in ("gpu-check.json", "logs.tar.gz"):
            if os.path.exists(os.path.join(path, name)):
                return first_run(os.path.join(path, name))
        return None
    if path.endswith(".json"):
        r = summarize.load(path)
        return r.get("stages") if isinstance(r, dict) else None
    return stages_from_tar(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True)
    ap.add_argument("--from", dest="src", default="")
    ap.add_argument("--deadline", type=int, required=True)
    ap.add_argument("--reserve", type=int, required=True)
    a = ap.parse_args()
    plan = load_plan(a.plan)
    limit = {p["name"]: p["limit"] for p in plan}
    kind = {p["name"]: p["kind"] for p in plan}
    entries = []  # (run as, stage, variant, limit, filter, items, why)

    def add(run_as, stage, variant, lim, filt="", items="", why=""):
        if stage in limit:
            entries.append([run_as, stage, variant, lim, filt, items, why])

    add("preflight", "preflight", "plain", limit.get("preflight", 30), why="a fresh machine")
    stages = first_run(a.src)
    if stages is None:
        for p in plan:
            if p["tier"] == "later":
                add(p["name"], p["name"], "plain", p["limit"],
                    why="not in the first run's plan (no record of the first run)")
    else:
        by_name = {s["name"]: s for s in stages}
        kerr = [s for s in stages if s.get("variant", "plain") == "plain" and s.get("kernel_error")
                and kind.get(s["stage"]) != "py"]
        for s in kerr:
            b = by_name.get(s["stage"] + ".blocking")
            if b is None or b["status"] == "skipped":
                add(s["stage"] + ".blocking", s["stage"], "blocking", limit[s["stage"]] if s["stage"] in limit else 0,
                    ":".join(s.get("failed_cases", [])),
                    "|".join(re.escape(i) for i in s.get("failed_items", [])),
                    "kernel error in the first run, not rerun blocking there")
        for s in kerr:
            if s["stage"] in limit:
                add(s["stage"] + ".memcheck", s["stage"], "memcheck",
                    min(2 * limit[s["stage"]], MEMCHECK_LIMIT), ":".join(s.get("failed_cases", [])),
                    "|".join(re.escape(i) for i in s.get("failed_items", [])),
                    "kernel error in the first run: memcheck finds the faulting access")
        ran = {s["stage"] for s in stages
               if s["status"] != "skipped" or MACHINE_SKIPS.search(s.get("reason", ""))}
        for p in plan:
            if p["name"] != "preflight" and p["name"] not in ran:
                skipped = next((s for s in stages if s["stage"] == p["name"]), None)
                add(p["name"], p["name"], "plain", p["limit"],
                    why=("skipped in the first run: " + skipped["reason"]) if skipped
                    else "did not run in the first run")
    budget, total, over = a.deadline - a.reserve, 0, False
    for e in entries:
        if not over and total + e[3] <= budget:
            total += e[3]
            tier = "first"
        else:
            over, tier = True, "later"
        # "-" for an empty field: bash's read merges adjacent tabs (IFS whitespace).
        print("\t".join(x or "-" for x in [e[0], e[1], e[2], str(e[3]), e[4], e[5], tier, e[6]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Turns the stage records of scripts/gpu-check.sh (and scripts/gpu-followup.sh) into
$OUT/gpu-check.json and gpu-check.md.

    summarize.py WORK OUT [--title TITLE]   the report (run after every stage, so that a check
                                            cut short still leaves one)
    summarize.py --failed LOG               two lines: the gtest cases that failed in LOG (a
                                            --gtest_filter) and the stage items that failed or
                                            timed out (a regex); empty lines if none

Per stage the report gives: the preflight's verdict and checks, status, time against limit, the
class and tier of the plan, whether the log shows a launch or kernel error, the gtest cases and
items that failed, and the count of "gpu fallback:" lines (the CUDA backend prints one each time
cuBLASLt or the attention kernels fall back to another way), then the bench, baseline, gradcheck
and score numbers. Standard library only.
"""
import json
import os
import re
import sys

# Launch and kernel errors: the pattern tools/gpu_check/lib.sh decides the reruns with.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_error.re")) as f:
    KERNEL_ERROR = re.compile(f.read().strip())
GTEST_FAILED = re.compile(r"^\[  FAILED  \] ([A-Za-z_][^\s,]*)")
ITEM = re.compile(r"^gpu-check: item (\S+): (pass|fail|timeout|skipped)")
FALLBACK = re.compile(r"^gpu fallback:\s*(.*)")
SANITIZER_SUMMARY = re.compile(r"^========= ERROR SUMMARY: (\d+) error")
# Skips that say the machine lacks something (a program, torch, compute-sanitizer): running the
# stage again on the same kind of machine would skip it again (gpu-followup.sh does not).
MACHINE_SKIPS = re.compile(r"not in the bundle|has no torch|compute-sanitizer not found|"
                           r"compute-sanitizer cannot run|every item was skipped")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_lines(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def analyse(lines):
    """What a stage's log says: failed gtest cases, item statuses, fallbacks, kernel errors."""
    failed, items, fallbacks, kinds, sanitizer = [], {}, 0, {}, []
    for line in lines:
        m = GTEST_FAILED.match(line)
        if m and m.group(1) not in failed:
            failed.append(m.group(1))
        m = ITEM.match(line)
        if m:
            items[m.group(1)] = m.group(2)
        m = FALLBACK.match(line)
        if m:
            fallbacks += 1
            # Messages counted by their text without numbers (one per shape otherwise).
            key = re.sub(r"\d+", "N", m.group(1))[:120]
            kinds[key] = kinds.get(key, 0) + 1
        m = SANITIZER_SUMMARY.match(line)
        if m:
            sanitizer.append(int(m.group(1)))
    kernel = next((l.strip() for l in lines if KERNEL_ERROR.search(l)), None)
    return {"failed_cases": failed, "items": items,
            "failed_items": [k for k, v in items.items() if v in ("fail", "timeout")],
            "fallbacks": fallbacks, "fallback_kinds": kinds,
            "kernel_error_line": kernel[:300] if kernel else None,
            "sanitizer_errors": sum(sanitizer) if sanitizer else None}


def failed_main(log):
    a = analyse(read_lines(log))
    print(":".join(a["failed_cases"]))
    print("|".join(re.escape(i) for i in a["failed_items"]))


def load_plan(work):
    plan = []
    for line in read_lines(os.path.join(work, "plan.tsv")):
        f = line.split("\t")
        if len(f) >= 5:
            plan.append({"name": f[0], "class": f[1], "tier": f[2], "kind": f[3],
                         "limit": int(f[4])})
    return plan


def fmt_gb(b):
    return f"{b / 2**30:.2f}" if isinstance(b, (int, float)) and b >= 0 else "-"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--failed":
        return failed_main(sys.argv[2])
    work, out = sys.argv[1], sys.argv[2]
    title = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--title" else "streambp GPU check"
    stages = [json.loads(l) for l in read_lines(os.path.join(work, "stages.jsonl")) if l.strip()]
    plan = load_plan(work)
    for s in stages:
        lines = read_lines(os.path.join(work, "logs", s["name"] + ".log"))
        s["log_tail"] = "\n".join(lines[-40:])
        s.update(analyse(lines))
        if s.get("result_file"):
            s["result"] = load(os.path.join(work, s["result_file"]))
    pre = load(os.path.join(work, "results", "preflight.json")) or {}
    facts = pre.get("facts", {})
    dev = ((facts.get("cuda") or {}).get("device") or [{}])[0]
    gpu = dev.get("name") or (facts.get("nvidia_smi") or "").splitlines()[-1:] or ["unknown"]
    gpu = gpu if isinstance(gpu, str) else gpu[0]
    ran = {s["stage"] for s in stages if s["status"] != "skipped"}
    lacks = {s["stage"] for s in stages if s["status"] == "skipped" and
             MACHINE_SKIPS.search(s.get("reason", ""))}
    not_run = [p for p in plan if p["name"] not in ran and p["name"] not in lacks]
    fallbacks = sum(s["fallbacks"] for s in stages)
    counts = {}
    for s in stages:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    report = {"title": title, "gpu": gpu, "preflight": pre, "plan": plan, "stages": stages,
              "counts": counts, "fallbacks": fallbacks,
              "not_run": [p["name"] for p in not_run]}
    with open(os.path.join(out, "gpu-check.json"), "w") as f:
        json.dump(report, f, indent=1)

    md = [f"# {title}", "", f"GPU: {gpu}" + (
        f" (sm_{dev.get('compute_major')}{dev.get('compute_minor')}, {dev.get('sms')} SMs, "
        f"{(dev.get('smem_per_block_optin') or 0) // 1024} KiB shared memory per block opt-in)"
        if dev.get("sms") else ""), "",
        "Full logs, env.txt (driver, libraries), the preflight's JSON and any core file: "
        "logs.tar.gz beside this file. A stage that failed with a launch or kernel error was "
        "run once more with CUDA_LAUNCH_BLOCKING=1 (name.blocking), time allowing.", ""]
    if pre:
        md += [f"**Preflight: {pre.get('verdict', '?')}**", "", "| check | | detail |", "|---|---|---|"]
        for c in pre.get("checks", []):
            mark = "ok" if c["ok"] else ("**FAIL**" if c["fatal"] else "warn")
            md.append(f"| {c['check']} | {mark} | {c['detail'].replace('|', '/')} |")
        md.append("")
        if not pre.get("verdict", "").startswith("pass"):
            md += ["**The run stopped after the preflight**: the checks marked FAIL above say "
                   "why; nothing else ran.", ""]
    md += ["Stages: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) +
           f"; {sum(float(s['seconds']) for s in stages):.0f} s in stages; "
           f"{fallbacks} 'gpu fallback:' lines.", "",
           "| stage | class | tier | status | rc | seconds | limit s | notes |",
           "|---|---|---|---|---:|---:|---:|---|"]
    for s in stages:
        notes = []
        if s.get("reason"):
            notes.append(s["reason"])
        if s.get("kernel_error"):
            notes.append("kernel error")
        if s["failed_cases"]:
            notes.append(f"{len(s['failed_cases'])} cases failed")
        if s["failed_items"]:
            notes.append("failed: " + " ".join(s["failed_items"]))
        if s["fallbacks"]:
            notes.append(f"{s['fallbacks']} fallbacks")
        if s.get("sanitizer_errors"):
            notes.append(f"{s['sanitizer_errors']} sanitizer errors")
        md.append(f"| {s['name']} | {s.get('class', '?')} | {s.get('tier', '?')} | {s['status']} "
                  f"| {s['rc']} | {float(s['seconds']):.1f} | {s['limit']} | {'; '.join(notes)} |")
    if not_run:
        md += ["", "Not run (scripts/gpu-followup.sh plans these): " +
               ", ".join(p["name"] for p in not_run)]
    kinds = {}
    for s in stages:
        for k, v in s["fallback_kinds"].items():
            kinds[k] = kinds.get(k, 0) + v
    if kinds:
        md += ["", "| gpu fallback (numbers as N) | count |", "|---|---:|"]
        md += [f"| {k} | {v} |" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])]
    # Bench and baseline numbers, where their JSON exists.
    rows, grads = [], []
    for s in stages:
        r = s.get("result")
        if not isinstance(r, dict):
            continue
        if "runs" in r:
            for run in r["runs"]:
                # `bench --predict`: the time planner's step beside the measured one.
                pred = run.get("predicted_seconds")
                rows.append("| {} | {} {} | {} | {:.3f} | {} | {:.0f} | {} | {} | {} |".format(
                    s["name"], run.get("mode"), run.get("precision"), run.get("seq_len"), run.get("step_seconds_median", 0),
                    "-" if pred is None else "{:.3f} ({:.2f}x)".format(pred, run.get("predicted_over_measured", 0)),
                    run.get("tokens_per_second", 0), fmt_gb(run.get("peak_bytes", -1)),
                    fmt_gb(run.get("device_in_use_peak_bytes", -1)),
                    "{:.0f} GFLOP/s ({})".format(r.get("sgemm_gflops", 0), r.get("gemm_probe", "?"))))
        elif r.get("gradient_checkpointing"):
            if r.get("status") == "ok":
                rows.append("| {} | torch ckpt bf16 | {} | {:.3f} | - | {:.0f} | - | {} | torch {} |".format(
                    s["name"], r["seq_len"], r["step_seconds_median"], r["tokens_per_second"],
                    fmt_gb(r.get("peak_allocated_bytes") or -1), r["torch"]))
            else:
                rows.append(f"| {s['name']} | torch ckpt bf16 | {r.get('seq_len')} | {r.get('status')} | | | | | |")
    for f in sorted(os.listdir(os.path.join(work, "results"))) if os.path.isdir(
            os.path.join(work, "results")) else []:
        if f.startswith("gradcheck_") and f.endswith(".json"):
            g = load(os.path.join(work, "results", f)) or {}
            grads.append(f"| {f[len('gradcheck_'):-5]} | {g.get('precision', '?')} | "
                         f"{g.get('max_rel_err', '?')} | {g.get('pass', '?')} |")
    if rows:
        md += ["", "| stage | run | T | step s | predicted s (plan --time, datasheet profile) | tokens/s | ledger peak GiB | device peak GiB | probe |",
               "|---|---|---:|---:|---:|---:|---:|---:|---|"] + rows
    if grads:
        md += ["", "| gradcheck | precision | max rel err | pass |", "|---|---|---:|---|"] + grads
    for s in stages:
        # Failures show their log; a profile stage's log is its per-family table.
        if s["status"] in ("fail", "timeout") or s["name"].startswith("profile_"):
            md += ["", f"## {s['name']}: {s['status']}", ""]
            if s.get("kernel_error_line"):
                md += [f"Kernel error: `{s['kernel_error_line']}`", ""]
            md += ["```", s["log_tail"].rstrip(), "```"]
    with open(os.path.join(out, "gpu-check.md"), "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    sys.exit(main())

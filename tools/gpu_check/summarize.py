#!/usr/bin/env python3
"""Turns the stage records of scripts/gpu-check.sh into $OUT/gpu-check.json and gpu-check.md.

Run after every stage, so that a check cut short still leaves a report. Standard library only.
"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def main():
    work, out = sys.argv[1], sys.argv[2]
    stages = []
    try:
        with open(os.path.join(work, "stages.jsonl")) as f:
            stages = [json.loads(line) for line in f if line.strip()]
    except OSError:
        pass
    for s in stages:
        s["log_tail"] = tail(os.path.join(work, "logs", s["name"] + ".log"))
        for key in ("result_file",):
            if s.get(key):
                s["result"] = load(os.path.join(work, s[key]))
    report = {"gpu": tail(os.path.join(work, "gpu.txt"), 5).strip(), "stages": stages}
    with open(os.path.join(out, "gpu-check.json"), "w") as f:
        json.dump(report, f, indent=1)

    md = ["# streambp GPU check", "", "GPU: " + (report["gpu"] or "unknown"), "",
          "Full logs, env.txt (driver, libraries) and any core file: logs.tar.gz beside this file.",
          "A stage that failed was run once more with CUDA_LAUNCH_BLOCKING=1 (name.blocking).", "",
          "| stage | status | rc | seconds | limit s |", "|---|---|---:|---:|---:|"]
    for s in stages:
        md.append(f"| {s['name']} | {s['status']} | {s['rc']} | {s['seconds']:.1f} | {s['limit']} |")
    # Bench and baseline numbers, where their JSON exists.
    rows = []
    for s in stages:
        r = s.get("result")
        if not isinstance(r, dict):
            continue
        if "runs" in r:
            for run in r["runs"]:
                rows.append("| {} | {} {} | {} | {:.3f} | {:.0f} | {:.1f} | {:.1f} | {} |".format(
                    s["name"], run["mode"], run["precision"], run["seq_len"],
                    run["step_seconds_median"], run["tokens_per_second"],
                    run["peak_bytes"] / 2**20,
                    run.get("device_in_use_peak_bytes", -1) / 2**20,
                    "{:.0f} GFLOP/s ({})".format(r.get("sgemm_gflops", 0), r.get("gemm_probe", "?"))))
        elif r.get("gradient_checkpointing"):
            if r.get("status") == "ok":
                rows.append("| {} | torch ckpt bf16 | {} | {:.3f} | {:.0f} | - | {:.1f} | torch {} |".format(
                    s["name"], r["seq_len"], r["step_seconds_median"], r["tokens_per_second"],
                    r["peak_allocated_bytes"] / 2**20, r["torch"]))
            else:
                rows.append(f"| {s['name']} | torch ckpt bf16 | {r['seq_len']} | {r.get('status')} | | | | |")
    if rows:
        md += ["", "| stage | mode | T | step s | tokens/s | ledger peak MiB | device peak MiB | probe |",
               "|---|---|---:|---:|---:|---:|---:|---|"] + rows
    for s in stages:
        # Failures show their log; a profile stage's log is its per-family table.
        if s["status"] != "pass" or s["name"].startswith("profile_"):
            md += ["", f"## {s['name']}: {s['status']}", "", "```", s["log_tail"].rstrip(), "```"]
    with open(os.path.join(out, "gpu-check.md"), "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()

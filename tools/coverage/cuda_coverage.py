#!/usr/bin/env python3
"""Line coverage of the CUDA backend (src/backend/cuda/, less the emulated runtime) and of the
NCCL communicator (src/dist/nccl_*) by the CPU-runnable tests, from a coverage tree
(-DSTREAMBP_CUDA_EMULATION_COVERAGE=ON, docs/CUDA.md "Emulated on the CPU"):

    find build-emu-cov -name '*.gcda' -delete
    STREAMBP_EMU_DIR=build-emu-cov bash scripts/test-emu.sh
    python3 tools/coverage/cuda_coverage.py build-emu-cov [--uncovered]

A line counts as covered when any translation unit ran it (headers are compiled into many),
as instrumented when any has code on it. --uncovered lists the uncovered line ranges per file.
"""
import argparse
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree")
    ap.add_argument("--uncovered", action="store_true")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    gcdas = glob.glob(os.path.join(os.path.abspath(args.tree), "CMakeFiles/streambp_cuda.dir/**/*.gcda"),
                      recursive=True)
    if not gcdas:
        sys.exit(f"no .gcda files under {args.tree}: run the tests in that tree first")
    lines = {}  # source -> {line: executed}
    with tempfile.TemporaryDirectory() as tmp:
        for g in gcdas:
            subprocess.run(["gcov", "--json-format", "-o", os.path.dirname(g), g], cwd=tmp,
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for j in glob.glob(os.path.join(tmp, "*.gcov.json.gz")):
            data = json.load(gzip.open(j))
            for f in data["files"]:
                path = os.path.normpath(os.path.join(data.get("current_working_directory", ""),
                                                     f["file"]))
                rel = os.path.relpath(path, root)
                keep = (rel.startswith("src/backend/cuda/") and "/emulation/" not in rel) or \
                    rel.startswith("src/dist/nccl_")
                if not keep:
                    continue
                d = lines.setdefault(rel, {})
                for ln in f["lines"]:
                    d[ln["line_number"]] = d.get(ln["line_number"], False) or ln["count"] > 0
    total = covered = 0
    for rel in sorted(lines):
        d = lines[rel]
        n, c = len(d), sum(d.values())
        total += n
        covered += c
        print(f"{rel:45s} {c:5d} / {n:5d}  {100.0 * c / max(n, 1):5.1f}%")
        if args.uncovered:
            miss = sorted(k for k, v in d.items() if not v)
            ranges, start, prev = [], None, None
            for k in miss:
                if start is None:
                    start = prev = k
                elif k == prev + 1 or all(not (x in d) for x in range(prev + 1, k)):
                    prev = k
                else:
                    ranges.append((start, prev))
                    start = prev = k
            if start is not None:
                ranges.append((start, prev))
            for a, b in ranges:
                print(f"    uncovered {a}" + (f"-{b}" if b != a else ""))
    print(f"{'total':45s} {covered:5d} / {total:5d}  {100.0 * covered / max(total, 1):5.1f}%")


if __name__ == "__main__":
    main()

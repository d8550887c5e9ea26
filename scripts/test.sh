#!/usr/bin/env bash
# Fresh machine -> the whole test suite: installs packages, builds the release tree and runs
# every test, then builds with AddressSanitizer + UBSan (clang) and runs the tests not labelled
# slow, then replays and runs the libFuzzer harnesses (fuzz/README.md) for a short fixed time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
start=$(date +%s)
bash scripts/build.sh release
(cd build && ctest --output-on-failure -j "$(nproc)")
# Again on the checking backend, whose memory is out of reach outside its own operations: any
# code that touches tensor bytes directly instead of through upload/download faults.
(cd build && STREAMBP_CHECK_MEMORY=1 ctest --output-on-failure -j "$(nproc)" -LE slow)
bash scripts/build.sh sanitize
(cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$(nproc)" -LE slow)
# The libFuzzer harnesses of that tree: committed inputs replayed, then FUZZ_SECONDS each.
bash scripts/fuzz.sh build-sanitize
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s"

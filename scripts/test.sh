#!/usr/bin/env bash
# Fresh machine -> the whole test suite: installs packages (ccache among them: the emulation
# tree and the wheel take most of their objects from the release tree's build), builds the
# release tree and runs every test (most on the checking backend), the exactness suites under
# every OpenBLAS core the CPU can execute, then the CUDA backend on the emulated CUDA runtime (build-emu, docs/CUDA.md), then builds with AddressSanitizer + UBSan
# (clang) and runs the tests not labelled slow, then replays and runs the libFuzzer harnesses
# (fuzz/README.md) for a short fixed time; last, the Python package's tests and its wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
start=$(date +%s)
lap() { echo "test.sh: $1 done at $(( $(date +%s) - start )) s"; }  # where CI's time goes
bash scripts/build.sh release
lap 'release build'
# The release tree's tests, once. Those that hold backend memory run on the checking backend
# (STREAMBP_CHECK_MEMORY=1), whose memory is out of reach outside its own operations: any code
# that touches tensor bytes directly instead of through upload/download faults. Its kernels are
# the CPU backend's, the op suites run the plain CPU backend beside it in every case, and the
# sanitizer pass below runs the tests again on the plain backend (all but the slow and the
# multi-rank ones): so this one pass does what a plain pass and a checked pass did (530 s of
# CI's time; this, about 360). The rest run on the plain
# backend: programs that never hold backend memory (text, data, rewards, config parsing, CUDA
# host arithmetic), the plan-versus-step agreements (whole steps that other tests cover) and
# the `slow` label (resident memory of the plain backend's allocations, long gradchecks, the
# gpu-check script's own test).
# The suites of the last two kinds carry the ctest labels `no_backend_memory` and `beside_plan`
# (tests/CMakeLists.txt, by gtest suite).
(cd build && STREAMBP_CHECK_MEMORY=1 ctest --output-on-failure -j "$(nproc)" \
   -LE '^(slow|no_backend_memory|beside_plan)$')
(cd build && ctest --output-on-failure -j "$(nproc)" -L slow)
(cd build && ctest --output-on-failure -j "$(nproc)" -LE slow -L '^(no_backend_memory|beside_plan)$')
lap 'release tests'
# The exactness suites (label `exactness`) again under every other OpenBLAS core this CPU can
# execute (the pass above ran under the preset OPENBLAS_CORETYPE, or OpenBLAS's own choice):
# what is bit-exact must be so on any kernel, and every bound must hold on each
# (docs/HACKING.md, "The exactness contract"; scripts/test-blas-cores.sh).
bash scripts/test-blas-cores.sh
lap 'exactness under every OpenBLAS core'
# The CUDA backend compiled as C++ against the emulated CUDA runtime: its op suite, gradchecks
# and parity fixtures with --backend cuda, on the CPU (scripts/test-emu.sh).
bash scripts/build.sh emu
lap 'emulation build'
bash scripts/test-emu.sh
lap 'emulated CUDA suite'
bash scripts/build.sh sanitize
lap 'sanitizer build'
# The multi-rank runs (label `multi_rank`: mpirun, checked in the release pass on the checking
# backend) and the plan agreements (`beside_plan`: a real step of every objective and mode beside
# the plan, steps the other tests run here) are the slowest third of this pass under ASan and
# add no code path of ours that the other tests do not run here.
(cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$(nproc)" \
   -LE '^(slow|multi_rank|beside_plan)$')
lap 'sanitizer tests'
# The libFuzzer harnesses of that tree: committed inputs replayed, then FUZZ_SECONDS each.
bash scripts/fuzz.sh build-sanitize
lap 'fuzzers'
# The Python package (python/, docs/PYTHON.md): its tests against the release tree's extension,
# then the CPU wheel, built (a tree of its own, build-py: no CUDA), repaired, installed into a
# fresh venv and run there (scripts/build-wheel.sh). Built for this machine (WHEEL_ARCH=native),
# so that its objects are the release tree's, from ccache: this checks the packaging, which is
# the same for the published x86-64-v3 wheel; that wheel's one extra piece of code, attention
# compiled again for AVX-512, is compiled in the release tree (streambp_portable_attention_check).
PYTHONPATH=build/python OMP_WAIT_POLICY=passive .venv-python/bin/python -m pytest -q tests/python
lap 'Python tests'
WHEEL_ARCH=native bash scripts/build-wheel.sh --check
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s"

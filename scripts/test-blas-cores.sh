#!/usr/bin/env bash
# The exactness suites (ctest label `exactness`: the tests that compare two computations
# multiplying through the BLAS, docs/HACKING.md "The exactness contract") under every OpenBLAS
# core this CPU can execute, one ctest run per core with OPENBLAS_CORETYPE set for it.
# Usage: scripts/test-blas-cores.sh [TREE]   (default: build, the release tree)
#
# Which cores: Prescott (SSE3, any x86-64), Haswell and Zen (AVX2 + FMA), SkylakeX (AVX-512 F,
# CD, BW, DQ, VL) and Cooperlake (SkylakeX + AVX-512 BF16), those the CPU's flags allow. The
# core the environment presets (OPENBLAS_CORETYPE, which CI must not change) is skipped: the
# release pass ran every test under it. Leaving the variable unset adds nothing: OpenBLAS then
# runs one of these cores (the one it detects), which `streambp --version` names.
#
# Each core is checked to be the one in effect (`streambp --version`), so that a name OpenBLAS
# ignores (it falls back to its own choice without a word) cannot pass for a core tested.
set -euo pipefail
cd "$(dirname "$0")/.."
tree="${1:-build}"
start=$(date +%s)
version() { "$tree/streambp" --version; }
if ! version | grep -q '^blas: openblas'; then
  echo "test-blas-cores: $tree does not multiply with OpenBLAS ($(version | sed -n 's/^blas: //p')): nothing to do"
  exit 0
fi
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
cores=(Prescott)
if has avx2 fma; then cores+=(Haswell Zen); fi
if has avx512f avx512cd avx512bw avx512dq avx512vl; then
  cores+=(SkylakeX)
  if has avx512_bf16; then cores+=(Cooperlake); fi
fi
preset="${OPENBLAS_CORETYPE:-}"
echo "test-blas-cores: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); cores ${cores[*]};" \
     "preset OPENBLAS_CORETYPE=${preset:-<unset>}"
for core in "${cores[@]}"; do
  if [ "${core,,}" = "${preset,,}" ]; then
    echo "test-blas-cores: $core is the preset core: the release pass ran every test under it"
    continue
  fi
  in_effect="$(OPENBLAS_CORETYPE=$core version | sed -n 's/^blas: openblas, core \([A-Za-z0-9]*\).*/\1/p')"
  if [ "${in_effect,,}" != "${core,,}" ]; then
    echo "test-blas-cores: OPENBLAS_CORETYPE=$core did not take: OpenBLAS runs '$in_effect'" >&2
    exit 1
  fi
  t0=$(date +%s)
  (cd "$tree" && OPENBLAS_CORETYPE=$core ctest --output-on-failure -j "$(nproc)" -L exactness -LE slow \
     >"ctest-core-$core.log" 2>&1) || { cat "$tree/ctest-core-$core.log"; echo "test-blas-cores: FAILED under $core" >&2; exit 1; }
  echo "test-blas-cores: $core: $(grep -E 'tests passed' "$tree/ctest-core-$core.log") in $(( $(date +%s) - t0 )) s"
done
echo "test-blas-cores: done in $(( $(date +%s) - start )) s"

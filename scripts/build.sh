#!/usr/bin/env bash
# Configures and builds one build tree. Usage: scripts/build.sh [release|program|sanitize|emu]
#   program: the release tree's `streambp` program alone (scripts/run.sh), none of the tests, the
#        benchmark tools or the Python extension; a new tree is configured without the tests
#        (no GoogleTest needed), one that has them keeps them.
#   emu: the CUDA backend on the emulated CUDA runtime (STREAMBP_CUDA_EMULATION, build-emu), only
#        the program and the test programs that run the backend on it (scripts/test-emu.sh).
# STREAMBP_BLAS=blis|mkl in the environment builds with that BLAS instead of OpenBLAS, in a tree
# of its own (build-blis, build-mkl; STREAMBP_BLAS_ROOT: where the provider is, CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
jobs="$(nproc)"
case "$kind" in
  release)  dir=build;          flags=(-DCMAKE_BUILD_TYPE=Release -DSTREAMBP_TESTS=ON) ;;
  program)  dir=build;          flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  # -g1: line tables are all ASan/UBSan reports need; full debug info cost a quarter of the build.
  # clang, so that the same tree also builds the libFuzzer harnesses (fuzz/, scripts/fuzz.sh).
  sanitize) dir=build-sanitize; flags=(-DCMAKE_BUILD_TYPE=Debug -DSTREAMBP_SANITIZE=ON
                                        -DSTREAMBP_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++
                                        "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1") ;;
  emu)      dir=build-emu;      flags=(-DCMAKE_BUILD_TYPE=Release -DSTREAMBP_CUDA_EMULATION=ON) ;;
  *) echo "usage: scripts/build.sh [release|program|sanitize|emu]" >&2; exit 2 ;;
esac
blas="${STREAMBP_BLAS:-openblas}"
if [ "$blas" != openblas ]; then
  dir="$dir-$blas"
  flags+=(-DSTREAMBP_BLAS="$blas" -DSTREAMBP_BLAS_ROOT="${STREAMBP_BLAS_ROOT:-}")
fi
# A tree configured with another compiler (an older gcc sanitizer tree) is configured afresh.
if [ "$kind" = sanitize ] && [ -f "$dir/CMakeCache.txt" ] &&
   ! grep -q '^CMAKE_CXX_COMPILER:.*clang++' "$dir/CMakeCache.txt"; then
  rm -rf "$dir"
fi
# ccache (scripts/setup.sh installs it): the release and emulation trees compile every file
# outside the CUDA backend with the same flags, so the second build takes those from the cache;
# worktrees of one repository share compiled objects when CCACHE_BASEDIR is their parent.
# Not the sanitizer tree: no other tree shares its objects, and on a cache miss ccache
# preprocesses every file first (a clean sanitizer tree built in 775 s through an empty cache in
# the clean-clone CI, 642 s without ccache on the same machine).
if [ "$kind" = sanitize ]; then
  flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER= -DCMAKE_CUDA_COMPILER_LAUNCHER=)
elif command -v ccache >/dev/null; then
  flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
fi
# The Python extension (python/, tests/python/) in the release tree, with scripts/setup.sh's venv.
if [ "$kind" = release ] && .venv-python/bin/python -c 'import nanobind' 2>/dev/null; then
  flags+=(-DSTREAMBP_PYTHON=ON -DPython_EXECUTABLE="$PWD/.venv-python/bin/python")
fi
if [ "$kind" = program ] && [ ! -f "$dir/CMakeCache.txt" ]; then
  flags+=(-DSTREAMBP_TESTS=OFF)
fi
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
if [ "$kind" = emu ]; then
  cmake --build "$dir" -j "$jobs" --target streambp $(bash scripts/test-emu.sh --targets)
elif [ "$kind" = program ]; then
  cmake --build "$dir" -j "$jobs" --target streambp
else
  cmake --build "$dir" -j "$jobs"
fi

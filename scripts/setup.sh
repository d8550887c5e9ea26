#!/usr/bin/env bash
# Installs the Debian packages the build needs (idempotent: skips what is already there).
# Usage: scripts/setup.sh [program]
#   program: only what the `streambp` program needs (scripts/run.sh), not the test suite's
#            packages, the sanitizer compiler or the Python package's venv.
set -euo pipefail
what="${1:-all}"
packages=(
  build-essential cmake pkg-config
  ccache   # scripts/test.sh's release and emulation trees share most objects through it
  libopenblas-openmp-dev   # sgemm, OpenMP build so BLAS and our kernels share threads
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev libpcre2-dev libutf8proc-dev
  libxxhash-dev   # XXH64 of the weights ranks compare (header only: nothing to link)
  gnuplot-nox   # `streambp plot`
  python3   # the `command` reward's example programs
  libopenmpi-dev openmpi-bin   # data-parallel training across processes (mpirun), docs/DISTRIBUTED.md
)
if [ "$what" != program ]; then
  packages+=(
    libgtest-dev libgmock-dev libbenchmark-dev
    python3-venv python3-dev   # the Python package (python/): its build and tests run in .venv-python
    clang libclang-rt-14-dev libomp-dev   # the sanitizer build and its libFuzzer harnesses (fuzz/)
  )
fi
# Another BLAS, when asked for (STREAMBP_BLAS=blis|mkl, as scripts/build.sh takes it): BLIS from
# Debian; oneMKL from PyPI (mkl, mkl-devel) into the Python prefix STREAMBP_BLAS_ROOT.
case "${STREAMBP_BLAS:-openblas}" in
  blis) packages+=(libblis-openmp-dev) ;;
  mkl) packages+=(python3-venv) ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "${STREAMBP_BLAS:-}" = mkl ]; then
  prefix="${STREAMBP_BLAS_ROOT:?setup: STREAMBP_BLAS=mkl needs STREAMBP_BLAS_ROOT (a venv for the mkl wheels)}"
  if [ ! -f "$prefix/include/mkl_cblas.h" ]; then
    echo "setup: installing mkl and mkl-devel into $prefix" >&2
    python3 -m venv "$prefix"
    "$prefix/bin/pip" install -q mkl mkl-devel
  fi
fi
if [ "$what" = program ]; then exit 0; fi
# The Python package's build and tests (tools/requirements-python.txt) in a venv of their own,
# .venv-python at the repository's root.
(
  cd "$(dirname "$0")/.."
  if ! .venv-python/bin/python -c 'import nanobind, pytest, numpy' 2>/dev/null ||
     [ tools/requirements-python.txt -nt .venv-python/installed ]; then
    echo "setup: installing tools/requirements-python.txt into .venv-python" >&2
    python3 -m venv .venv-python
    .venv-python/bin/pip install -q -r tools/requirements-python.txt
    touch .venv-python/installed
  fi
)

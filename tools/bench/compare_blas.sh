#!/usr/bin/env bash
# Compares BLAS providers' sgemm on a training step's GEMM shapes (tools/bench/blas_shapes.cpp):
# builds that one file against every provider found, runs the programs in turns (round 1 of
# each provider, then round 2, ...: a slow spell of a shared machine falls on all of them), and
# prints GFLOP/s per group of shapes and provider, from the median time of each shape over every
# timed call of every round.
#
#   tools/bench/compare_blas.sh [--rounds 3] [--reps 1] [--threads 2] [--out DIR]
#                               [--blis-arch N]... [--openblas-core X]... [--providers a,b,...] [-- ARGS]
#
# ARGS go to blas_shapes (--rows, --head-rows, model dims). Providers, each where present:
#   openblas          OpenBLAS, OpenMP build (libopenblas-openmp-dev): the engine's default
#   openblas-pthread  OpenBLAS, pthreads build (libopenblas-pthread-dev)
#   blis              BLIS, OpenMP build (libblis-openmp-dev), on the kernels it picks itself
#   blis-archN        the same library told to use its sub-configuration N (BLIS_ARCH_TYPE=N;
#                     --blis-arch N, repeatable): BLIS 0.9 does not know every CPU (it picks
#                     'generic' on Zen 5; BLIS_ARCH_DEBUG=1 prints its choice); 6 = zen3, 0 = skx
#   openblas-coreX    the default OpenBLAS told to run core X's kernels (OPENBLAS_CORETYPE=X;
#                     --openblas-core X, repeatable): another CPU's kernels on this one, e.g.
#                     Zen (the AVX2 kernels 0.3.21 picks on AMD Zen 3/4/5) on an Intel CPU
#   mkl               oneMKL from PyPI (pip install mkl mkl-devel) under $MKL_PREFIX, linked as
#                     intel_lp64 + gnu_thread + core: GNU OpenMP threads, as the engine's kernels
# $BLAS_ROOT is where to look for the Debian packages' files before the system's; to measure
# without installing them (installing libopenblas0-pthread switches the system's libopenblas.so.0
# to the pthreads build): apt-get download <pkg>; dpkg -x <pkg>.deb $BLAS_ROOT.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3 reps=1 threads=2 out="" blis_archs=() openblas_cores=() only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --blis-arch) blis_archs+=("$2"); shift 2 ;;
    --openblas-core) openblas_cores+=("$2"); shift 2 ;;
    --providers) only=",$2,"; shift 2 ;;  # run only these of the providers built
    --) shift; break ;;
    *) echo "compare_blas: unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${out:-$(mktemp -d)}"
mkdir -p "$out"
root="${BLAS_ROOT:-}"
arch="$(uname -m)-linux-gnu"
src=tools/bench/blas_shapes.cpp
cxx=(g++ -O2 -std=c++20)

providers=()
build() {  # name, then compiler and linker arguments
  local name="$1"; shift
  if "${cxx[@]}" "$src" "$@" -o "$out/blas_shapes_$name" 2>"$out/build_$name.log"; then
    providers+=("$name")
  else
    echo "compare_blas: $name not built (see $out/build_$name.log)" >&2
  fi
}
debian() {  # name, package directory (openblas-openmp, ...), library: $BLAS_ROOT's, else the system's
  local r
  for r in "$root" ""; do
    local dir="$r/usr/lib/$arch/$2"
    if [ -f "$dir/$3" ]; then
      build "$1" -I"$r/usr/include/$arch/$2" "$dir/$3" -fopenmp \
        -Wl,--disable-new-dtags,-rpath,"$dir"
      return
    fi
  done
  echo "compare_blas: $1 not found (usr/lib/$arch/$2/$3)" >&2
}
debian openblas openblas-openmp libopenblas.so
debian openblas-pthread openblas-pthread libopenblas.so
debian blis blis-openmp libblis.so
if [[ " ${providers[*]} " == *" blis "* ]]; then
  for a in "${blis_archs[@]}"; do
    cp "$out/blas_shapes_blis" "$out/blas_shapes_blis-arch$a"
    providers+=("blis-arch$a")
  done
fi
if [[ " ${providers[*]} " == *" openblas "* ]]; then
  for c in "${openblas_cores[@]}"; do
    cp "$out/blas_shapes_openblas" "$out/blas_shapes_openblas-core$c"
    providers+=("openblas-core$c")
  done
fi
if [ -n "${MKL_PREFIX:-}" ] && [ -f "$MKL_PREFIX/include/mkl_cblas.h" ]; then
  lib="$MKL_PREFIX/lib"
  mkl() { ls "$lib"/libmkl_"$1".so* | head -1; }
  build mkl -DSTREAMBP_BLAS_MKL -I"$MKL_PREFIX/include" "$(mkl intel_lp64)" "$(mkl gnu_thread)" \
    "$(mkl core)" -fopenmp -Wl,--disable-new-dtags,-rpath,"$lib"
else
  echo "compare_blas: mkl skipped (set MKL_PREFIX to a prefix with mkl and mkl-devel)" >&2
fi

if [ -n "$only" ]; then
  kept=()
  for p in "${providers[@]}"; do [[ "$only" == *",$p,"* ]] && kept+=("$p"); done
  providers=("${kept[@]}")
fi

export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" BLIS_NUM_THREADS="$threads"
export MKL_NUM_THREADS="$threads"
for r in $(seq "$rounds"); do
  for p in "${providers[@]}"; do
    echo "compare_blas: round $r/$rounds $p" >&2
    arch=()
    if [[ "$p" == blis-arch* ]]; then arch=(env BLIS_ARCH_TYPE="${p#blis-arch}"); fi
    if [[ "$p" == openblas-core* ]]; then arch=(env OPENBLAS_CORETYPE="${p#openblas-core}"); fi
    "${arch[@]}" "$out/blas_shapes_$p" --name "$p" --reps "$reps" "$@" >>"$out/times.tsv"
  done
done

python3 - "$out/times.tsv" "${providers[@]}" <<'PY'
import collections, statistics, sys
path, providers = sys.argv[1], sys.argv[2:]
times = collections.defaultdict(list)   # (provider, group, shape) -> seconds
flops, groups = {}, []
for line in open(path):
    p, g, s, M, N, K, f, sec = line.rstrip("\n").split("\t")
    times[(p, g, s)].append(float(sec))
    flops[(g, s)] = float(f)
    if g not in groups:
        groups.append(g)
def rate(p, keys):
    t = sum(statistics.median(times[(p, g, s)]) for g, s in keys)
    return sum(flops[k] for k in keys) / t / 1e9
print("| shapes | " + " | ".join(providers) + " |")
print("|---|" + "---:|" * len(providers))
for g in groups:
    keys = [k for k in flops if k[0] == g]
    r = [rate(p, keys) for p in providers]
    best = max(r)
    print(f"| {g} | " + " | ".join(("**%.1f**" if x == best else "%.1f") % x for x in r) + " |")
for label, keys in (("all layer shapes", [k for k in flops if not k[0].startswith("head")]),
                    ("all shapes", list(flops))):
    print(f"| {label} (time-weighted) | " + " | ".join("%.1f" % rate(p, keys) for p in providers) + " |")
PY
echo "compare_blas: raw times in $out/times.tsv" >&2

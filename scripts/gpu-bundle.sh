#!/usr/bin/env bash
# Step 1 of the GPU check (docs/FEATURES.md "CUDA backend"), on a machine with nvcc: builds what
# scripts/gpu-check.sh runs and packs it, with the shared libraries a GPU machine that has only
# CUDA/cuDNN/NCCL/PyTorch may lack (OpenBLAS, yaml-cpp, PCRE2, utf8proc, libgomp, libstdc++),
# into gpu-bundle/bundle.tar.xz (ignored by git; carry the gpu-bundle folder to the GPU machine).
#
# The build is its own tree (build-gpu/): portable x86-64-v3 code instead of -march=native (the
# GPU machine's processor is another one; STREAMBP_ARCH, which also compiles our CPU attention a
# second time for AVX-512, chosen at run time), no MPI (the check runs one process per GPU, and
# OpenMPI's libraries would have to travel too). Every program packed is checked to carry no
# instruction beyond x86-64-v3 outside those AVX-512 kernels (tools/gpu_check/isa_check.py,
# objdump): a SIGILL on the GPU machine would lose the run. CUDA's own libraries (cudart,
# cuBLASLt, NCCL) do not travel: the GPU machine has a CUDA 13 runtime that matches its driver.
#
#   scripts/gpu-bundle.sh            # JOBS=N to set the build's parallelism
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OUT=gpu-bundle
TARGETS=(streambp ops_dense_test ops_layer_test ops_head_test ops_gemma_test misuse_test
         backend_factory_test cuda_math_test cuda_gemm_plan_test cuda_arena_test hf_parity_test
         hf_parity_bf16_test)
# Attention at 8K-32K keys against float64 (gpu-check.sh's attention_long stage), where the tree
# has it (issue 57: it comes with the CUDA backend's side of the work; the check skips the stage,
# saying so, when the bundle lacks the program).
[[ -f tests/backend/cuda_attention_long_test.cpp ]] && TARGETS+=(cuda_attention_long_test)
# The bundle travels with the working tree to the GPU machine (64 MiB in all there).
LIMIT_BYTES=$((40 * 1000 * 1000))
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  # As scripts/build.sh: worktrees of one repository share compiled objects (the CUDA files
  # compile with the release tree's flags: no -march on them).
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$PWD")}"
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSTREAMBP_CUDA=ON -DSTREAMBP_ARCH=x86-64-v3 \
  -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON "${launcher[@]}" >/dev/null
cmake --build "$BUILD" -j"${JOBS:-$(nproc)}" --target "${TARGETS[@]}"

# No instruction beyond x86-64-v3 outside the AVX-512 attention chosen at run time: checked on
# the programs before strip (the check needs their function names). Not on the libraries packed
# beside them: they are Debian's, built for the x86-64 baseline, and OpenBLAS (DYNAMIC_ARCH)
# chooses its wider kernels by the CPU it finds, as glibc does; the GPU machine's processor is
# checked for x86-64-v3 itself before anything runs (gpu-check.sh's preflight).
programs=()
for t in "${TARGETS[@]}"; do
  if [[ -f $BUILD/$t ]]; then programs+=("$BUILD/$t"); else programs+=("$BUILD/tests/$t"); fi
done
python3 tools/gpu_check/isa_check.py "${programs[@]}"

stage=$OUT/stage
rm -rf "$stage" "$OUT/bundle.tar.xz"
mkdir -p "$stage/bin" "$stage/lib"
for p in "${programs[@]}"; do
  cp "$p" "$stage/bin/"
  strip --strip-unneeded "$stage/bin/$(basename "$p")"
done
# Every library the programs load, except the C library's own (the GPU machine's is newer) and
# CUDA's (see above). gpu-check.sh puts lib/ first on LD_LIBRARY_PATH.
ldd "$stage"/bin/* | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libcudart*|\
    libcublas*|libnccl*|libnvidia*) continue ;;
  esac
  cp -L "$lib" "$stage/lib/"
done
tar -C "$stage" -cJf "$OUT/bundle.tar.xz" .
echo "gpu-bundle.sh: unpacked $(du -sb "$stage" | cut -f1) bytes:"
(cd "$stage" && du -b bin/* lib/* | sort -rn | head -8) || true
rm -rf "$stage"
size=$(stat -c %s "$OUT/bundle.tar.xz")
echo "gpu-bundle.sh: $OUT/bundle.tar.xz is $size bytes ($((size / 1000000)) MB; limit $((LIMIT_BYTES / 1000000)) MB)"
if ((size > LIMIT_BYTES)); then
  echo "gpu-bundle.sh: the bundle is over its limit" >&2
  exit 1
fi
echo "gpu-bundle.sh: carry gpu-bundle/ to the GPU machine and run scripts/gpu-check.sh there"

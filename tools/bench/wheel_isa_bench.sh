#!/usr/bin/env bash
# The wheel's attention kernels chosen at run time against a native build and against the
# wheel's baseline kernels (docs/PYTHON.md): three interleaved rounds of one stream step each.
#   tools/bench/wheel_isa_bench.sh build/streambp /path/to/venv/bin/streambp
set -euo pipefail
native="$1"
wheel="$2"
for r in 1 2 3; do
  for v in native wheel-avx512 wheel-base; do
    case $v in
      native) cmd=("$native"); isa_env=() ;;
      wheel-avx512) cmd=("$wheel"); isa_env=() ;;
      wheel-base) cmd=("$wheel"); isa_env=(STREAMBP_ATTENTION_ISA=base) ;;
    esac
    out="$(env "${isa_env[@]}" OMP_WAIT_POLICY=passive "${cmd[@]}" bench --model qwen3-0.6b \
      --layers 4 --seq-len 4096 --modes stream --repeat 1 --warmup 0 --profile 2>&1)"
    step="$(echo "$out" | grep '^| stream | fp32 | 4096 |' | head -1 | awk -F'|' '{print $7}')"
    fwd="$(echo "$out" | grep '^| attention fwd' | awk -F'|' '{print $6}')"
    bwd="$(echo "$out" | grep '^| attention bwd' | awk -F'|' '{print $6}')"
    kernels="$(echo "$out" | grep -o 'attention kernels [a-z0-9]*' || true)"
    echo "round $r $v: step $step s; attention fwd $fwd; bwd $bwd; $kernels"
  done
done

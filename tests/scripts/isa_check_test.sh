#!/usr/bin/env bash
# tools/gpu_check/isa_check.py (scripts/gpu-bundle.sh runs it on every program it packs) on
# small programs compiled here: one built for x86-64-v3 passes; one with an AVX-512 function
# (-mavx512f, and one built -march=native where this CPU has AVX-512) fails, naming the function;
# the same AVX-512 code in a function named sbp::cpu::avx512:: (the attention variant chosen at
# run time) passes; --allow widens what is allowed. Nothing is run: the programs need not suit
# this CPU.
#
#   tests/scripts/isa_check_test.sh     (ctest: isa_check_script)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d /tmp/isa-check-test.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
CHECK=(python3 "$ROOT/tools/gpu_check/isa_check.py")

# A loop the compiler vectorises with whatever vectors -march gives it.
cat >"$T/sum.c" <<'C'
float sum(const float* x, int n) { float s = 0; for (int i = 0; i < n; ++i) s += x[i] * x[i]; return s; }
int main(int argc, char** argv) { float x[64] = {0}; x[0] = (float)argc; return (int)sum(x, 64 - argc); }
C
# AVX-512 by intrinsics, in a plain function or in the namespace of the dispatched kernels.
cat >"$T/wide.cpp" <<'C'
#include <immintrin.h>
#ifdef DISPATCHED
namespace sbp::cpu::avx512 {
#endif
__attribute__((target("avx512f"))) float wide(const float* x) {
  __m512 v = _mm512_loadu_ps(x);
  return _mm512_reduce_add_ps(_mm512_mul_ps(v, v));
}
#ifdef DISPATCHED
}
using sbp::cpu::avx512::wide;
#endif
int main(int argc, char**) { float x[16] = {0}; x[0] = (float)argc; return (int)wide(x); }
C
gcc -O3 -march=x86-64-v3 -o "$T/v3" "$T/sum.c"
gcc -O3 -march=x86-64-v3 -mavx512f -mprefer-vector-width=512 -o "$T/avx512" "$T/sum.c"
g++ -std=c++20 -O2 -march=x86-64-v3 -o "$T/wide" "$T/wide.cpp"
g++ -std=c++20 -O2 -march=x86-64-v3 -DDISPATCHED -o "$T/dispatched" "$T/wide.cpp"

"${CHECK[@]}" "$T/v3" >"$T/out.txt" || fail "an x86-64-v3 program failed: $(cat "$T/out.txt")"
grep -q "x86-64-v3 only" "$T/out.txt" || fail "no verdict: $(cat "$T/out.txt")"
rc=0
"${CHECK[@]}" "$T/avx512" >"$T/out.txt" || rc=$?
((rc == 1)) || fail "an -mavx512f program: exit $rc: $(cat "$T/out.txt")"
grep -q "^  sum$" "$T/out.txt" || fail "the AVX-512 function is not named: $(cat "$T/out.txt")"
grep -q "zmm" "$T/out.txt" || fail "no offending instruction shown: $(cat "$T/out.txt")"
rc=0
"${CHECK[@]}" "$T/wide" >"$T/out.txt" || rc=$?
((rc == 1)) || fail "AVX-512 intrinsics outside the dispatched namespace: exit $rc"
grep -q "^  wide(float const\*)$" "$T/out.txt" || fail "wide() not named: $(cat "$T/out.txt")"
"${CHECK[@]}" "$T/dispatched" >"$T/out.txt" || fail "sbp::cpu::avx512:: was not allowed: $(cat "$T/out.txt")"
"${CHECK[@]}" --allow '^wide\(' "$T/wide" >"$T/out.txt" || fail "--allow did not allow wide()"
# Built for this machine: fails where this CPU has AVX-512 (the GPU bundle's old mistake).
if grep -qw avx512f /proc/cpuinfo; then
  gcc -O3 -march=native -o "$T/native" "$T/sum.c"
  rc=0
  "${CHECK[@]}" "$T/native" >"$T/out.txt" || rc=$?
  ((rc == 1)) || fail "a -march=native program on an AVX-512 machine passed: $(cat "$T/out.txt")"
fi
echo "isa_check_test: ok"

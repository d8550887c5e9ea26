# Sourced by scripts/build-wheel.sh and scripts/build-wheel-cuda.sh (their --check): where every
# library of an installed wheel's binaries resolves, with LD_LIBRARY_PATH unset.
#   check_wheel_libs SITE [NVIDIA_PATTERN]
# SITE: the venv's site-packages. Each library must resolve inside the wheel (streambp/ or
# streambp.libs/), or be one that the manylinux_2_36 policy takes from the system (auditwheel's
# list): glibc's, the C++ runtime (libstdc++, libgcc_s, libatomic) and zlib (OpenMPI's). Those
# matching NVIDIA_PATTERN (the CUDA wheel's runtime libraries) must resolve in SITE/nvidia/, the
# NVIDIA PyPI wheels: on a machine whose ld.so cache has a system toolkit a wrong rpath would
# resolve there. Nothing may link the driver (libcuda): the CUDA runtime loads it. Returns 1 after
# naming every library that breaks a rule.
check_wheel_libs() {
  local site="$1" nvidia="${2:-}" bad=0 f line lib where
  local system='^(linux-vdso|/lib64/ld-linux|ld-linux|libc|libm|libmvec|libdl|libpthread|librt|libutil|libresolv|libanl|libnsl|libstdc\+\+|libgcc_s|libatomic|libz)[.-]'
  while IFS= read -r f; do
    while IFS= read -r line; do
      lib="$(echo "$line" | awk '{print $1}')"
      where="$(echo "$line" | awk '{print $3}')"
      [ -n "$where" ] && where="$(realpath -m "$where")"  # ldd writes streambp/../nvidia/...
      if echo "$line" | grep -q "not found"; then
        echo "build-wheel: $f: $lib not found" >&2; bad=1
      elif [[ "$lib" =~ ^libcuda[.] ]]; then
        echo "build-wheel: $f: links the driver $lib (the runtime should load it)" >&2; bad=1
      elif [[ "$lib" =~ $system ]]; then
        :
      elif [[ -n "$nvidia" && "$lib" =~ $nvidia ]]; then
        [[ "$where" == "$site"/nvidia/* ]] ||
          { echo "build-wheel: $f: $lib resolves outside the venv's nvidia/: $where" >&2; bad=1; }
      elif [[ "$where" != "$site"/streambp/* && "$where" != "$site"/streambp.libs/* ]]; then
        echo "build-wheel: $f: $lib resolves outside the wheel: $where" >&2; bad=1
      fi
    done < <(env -u LD_LIBRARY_PATH ldd "$f" | sed 's/^\s*//')
  done < <(find "$site/streambp" "$site/streambp.libs" -name '*.so*' -type f)
  return "$bad"
}

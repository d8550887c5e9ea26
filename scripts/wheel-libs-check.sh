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
# The libraries the manylinux_2_36 policy takes from the system (auditwheel's list).
wheel_policy_libs='^(linux-vdso|/lib64/ld-linux|ld-linux|libc|libm|libmvec|libdl|libpthread|librt|libutil|libresolv|libanl|libnsl|libstdc\+\+|libgcc_s|libatomic|libz)[.-]'

check_wheel_libs() {
  local site="$1" nvidia="${2:-}" bad=0 f line lib where
  local system="$wheel_policy_libs"
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

# Runs CMD... where the system's copies of the libraries the wheel bundles cannot be loaded: in a
# private mount namespace (unshare -m: root), /dev/null is bound over every file that REFERENCE
# (the same extension as built here, linked against the -dev packages' libraries) resolves to
# outside the manylinux policy's set, the packages' files as if they were not installed. First
# it shows the hiding works: REFERENCE's package (PYTHONPATH=REFERENCE_DIR, with $py, the
# interpreter it was built for) imports outside and must fail to import there. Without root it
# says so and runs nothing (returns 0: the ldd check above still holds).
#   run_without_system_libs REFERENCE_DIR CMD...   (REFERENCE_DIR holds streambp/_core*.so)
run_without_system_libs() {
  local ref_dir="$1" files=() lib where
  shift
  if ! unshare -m true 2>/dev/null; then
    echo "build-wheel: no mount namespace here (unshare -m needs root): the run with the system's" \
         "libraries hidden is left out" >&2
    return 0
  fi
  while read -r lib _ where _; do
    [[ "$lib" =~ $wheel_policy_libs || "$where" != /* ]] && continue
    files+=("$(realpath "$where")")
  done < <(env -u LD_LIBRARY_PATH ldd "$ref_dir"/streambp/_core*.so | sed 's/^\s*//')
  [ "${#files[@]}" -gt 0 ] || { echo "build-wheel: $ref_dir: no system library to hide" >&2; return 1; }
  # mount itself loads some of them (libpcre2-8, through libselinux): those are hidden last.
  local mount_needs first=() last=() f
  mount_needs="$(ldd "$(command -v mount)" | awk '$3 ~ /^\// {print $3}' | xargs -r realpath)"
  for f in "${files[@]}"; do
    if grep -qxF "$f" <<<"$mount_needs"; then last+=("$f"); else first+=("$f"); fi
  done
  files=("${first[@]}" "${last[@]}")
  local hide='set -e; n=$1; shift; for ((i = 0; i < n; i++)); do mount --bind /dev/null "$1"; shift; done; exec "$@"'
  local import=(env -u LD_LIBRARY_PATH PYTHONPATH="$ref_dir" "${py:-python3}" -c 'import streambp')
  "${import[@]}" || { echo "build-wheel: $ref_dir: the build tree's package does not import" >&2; return 1; }
  # Hidden, a library is an empty file: the loader says "file too short".
  local out
  if out="$(unshare -m bash -c "$hide" _ "${#files[@]}" "${files[@]}" "${import[@]}" 2>&1)" ||
     ! grep -q "file too short" <<<"$out"; then
    echo "build-wheel: hiding ${#files[@]} system libraries did not stop the build tree's" \
         "extension from loading (the check would prove nothing): $out" >&2
    return 1
  fi
  echo "build-wheel: with the system's copies of ${#files[@]} libraries hidden ($(basename -a \
    "${files[@]}" | sed 's/\.so.*//' | sort -u | tr '\n' ' ')), where the build tree's extension no longer loads:"
  unshare -m bash -c "$hide" _ "${#files[@]}" "${files[@]}" env -u LD_LIBRARY_PATH "$@"
}

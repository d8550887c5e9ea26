#!/usr/bin/env python3
"""The GPU check's first stage (scripts/gpu-check.sh, scripts/gpu-followup.sh): in seconds, what
would make the rest of the run waste its minutes, and the facts every later number depends on.

    preflight.py --bin DIR --streambp PROGRAM --our-ld PATHS --env-file FILE --json OUT [--small] [--python PY]

Checks (a failed "fatal" check stops the run; the report says which and why):
  cpu        the host CPU has every x86-64-v3 feature the bundle was built for (a SIGILL
             otherwise); its AVX-512 flags say which CPU attention the programs choose
  ldd        every program in DIR resolves every library with our LD_LIBRARY_PATH
  streambp   the program starts (`streambp --version`: BLAS core, CPU vectors, attention ISA)
  device     CUDA's runtime (the libcudart our programs load) sees a device of compute
             capability >= 8.0 (the bundle carries sm_80 and sm_90 code); its properties:
             SMs, shared memory per block (opt-in), per SM, L2, memory; driver and runtime
             versions (a driver older than the runtime refuses every call)
  nvidia-smi name, driver, clocks, other processes on the GPU (their memory skews the peaks)
  env        the environment variables that change CUDA's, cuBLAS's, PyTorch's or our results
             (read from FILE, written by the script before it unset the ones it sets itself)
  torch      PyTorch and transformers for the baseline stages (metadata only: an import costs
             seconds; absent, those stages are skipped)
  sanitizer  compute-sanitizer, for the memcheck/racecheck/synccheck stages
With --small (GPU_CHECK_SMALL, the dry run against the emulated backend without a GPU) the
device checks are reported but not fatal. Standard library only. Exit 0 when every fatal check
passed, 1 otherwise.
"""
import argparse
import ctypes
import glob
import json
import os
import re
import shutil
import subprocess
import sys

# x86-64-v2 and v3 as GCC's -march=x86-64-v3 assumes them, by their /proc/cpuinfo names (abm is
# LZCNT). Not osxsave: Linux lists avx only when it has enabled the AVX state, and some kernels
# never list osxsave (the 2-core AMD EPYC development VM does not).
X86_64_V3 = ["cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3",
             "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"]
# What src/backend/cpu/attention_dispatch.cpp asks for before it runs the AVX-512 attention.
AVX512 = ["avx512f", "avx512bw", "avx512dq", "avx512vl"]

# cudaDeviceAttr values (driver_types.h of CUDA 13; stable since they were introduced).
ATTRS = {
    "compute_major": 75, "compute_minor": 76, "sms": 16,
    "smem_per_block": 8, "smem_per_block_optin": 97, "smem_per_sm": 81,
    "smem_reserved_per_block": 111, "l2_bytes": 38, "max_threads_per_sm": 39,
    "max_blocks_per_sm": 106, "regs_per_block": 12, "async_engines": 40,
    "ecc": 32, "integrated": 18, "kernel_timeout": 17, "compute_mode": 20,
    "pageable_memory_access": 88, "concurrent_managed_access": 89,
}
MIN_COMPUTE = (8, 0)

# Environment variables that change what the programs compute or how fast (why, for the report).
ENV_EFFECTS = {
    "CUDA_VISIBLE_DEVICES": "which GPUs the programs see",
    "CUDA_DEVICE_ORDER": "which GPU is device 0",
    "CUDA_LAUNCH_BLOCKING": "every launch synchronous: kernel errors at their launch, timings off "
                            "(the check sets it itself, for blocking reruns only)",
    "NVIDIA_TF32_OVERRIDE": "0 turns TF32 off in cuBLAS/cuDNN (our GEMMs use no TF32; PyTorch's may)",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1 lets PyTorch's float32 matmuls use TF32",
    "CUBLAS_WORKSPACE_CONFIG": "cuBLAS's workspace (and its determinism)",
    "CUBLASLT_WORKSPACE_SIZE": "cuBLASLt's workspace (algorithms that need more are not chosen)",
    "CUBLASLT_LOG_LEVEL": "cuBLASLt logging (slows every call)",
    "CUBLASLT_LOG_MASK": "cuBLASLt logging (slows every call)",
    "CUBLASLT_HEURISTICS_CACHE_CAPACITY": "cuBLASLt's heuristic cache",
    "CUBLAS_LOGINFO_DBG": "cuBLAS logging",
    "CUDA_MODULE_LOADING": "EAGER loads every kernel at start-up (seconds); LAZY (default) at first use",
    "CUDA_FORCE_PTX_JIT": "1 compiles kernels from PTX instead of running the bundle's machine code",
    "CUDA_DISABLE_PTX_JIT": "1: no JIT (a GPU newer than sm_90 then cannot run our kernels)",
    "CUDA_CACHE_DISABLE": "no JIT cache",
    "CUDA_CACHE_PATH": "where JIT results are cached",
    "CUDA_DEVICE_MAX_CONNECTIONS": "hardware queues per device (stream concurrency)",
    "CUDA_AUTO_BOOST": "clock boost",
    "CUDA_MPS_PIPE_DIRECTORY": "MPS: the GPU shared with other processes",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "MPS: a share of the SMs only",
    "PYTORCH_CUDA_ALLOC_CONF": "PyTorch's allocator (the baseline's peak memory)",
    "OMP_NUM_THREADS": "host threads of our programs (float64 references, CPU ops)",
    "OMP_WAIT_POLICY": "how idle host threads wait",
    "OPENBLAS_NUM_THREADS": "OpenBLAS threads (host references)",
    "OPENBLAS_CORETYPE": "which OpenBLAS kernels run on the host",
    "STREAMBP_CUDA_ATTENTION": "our attention kernels (tc or simt; the check sets it per stage)",
    "STREAMBP_CUDA_ARENA": "our device arena (per_tensor: one allocation per tensor; set per stage)",
    "STREAMBP_TEST_BACKEND": "the backend of the parity tests (the check sets it per stage)",
}
ENV_PREFIXES = ("CUDA_", "NVIDIA_", "CUBLAS", "CUDNN_", "NCCL_", "PYTORCH_", "TORCH_", "OMP_",
                "OPENBLAS_", "STREAMBP_", "GOMP_", "LD_PRELOAD", "GTEST_")


def run(cmd, timeout=15, env=None):
    """(exit status, output); status -1 with the reason when it could not run or timed out."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, (p.stdout + p.stderr).strip()
    except FileNotFoundError:
        return -1, f"{cmd[0]}: not found"
    except subprocess.TimeoutExpired:
        return -1, f"{' '.join(cmd)}: no answer in {timeout} s"
    except OSError as e:
        return -1, f"{cmd[0]}: {e}"


class Checks:
    def __init__(self):
        self.items = []

    def add(self, name, ok, detail, fatal=True):
        self.items.append({"check": name, "ok": bool(ok), "fatal": fatal, "detail": detail})
        mark = "ok  " if ok else ("FAIL" if fatal else "warn")
        print(f"preflight: {mark} {name}: {detail}", flush=True)


def cpu_check(c, facts):
    flags, model = set(), "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                elif line.startswith("model name") and model == "?":
                    model = line.split(":", 1)[1].strip()
    except OSError as e:
        c.add("cpu", False, f"/proc/cpuinfo unreadable: {e}")
        return
    missing = [f for f in X86_64_V3 if f not in flags]
    avx512 = all(f in flags for f in AVX512)
    facts["cpu"] = {"model": model, "cores": os.cpu_count(), "x86_64_v3_missing": missing,
                    "avx512": avx512,
                    "flags": sorted(f for f in flags if re.match(r"avx|amx|fma|bmi|f16c|sha|vaes", f))}
    c.add("cpu", not missing,
          f"{model}, {os.cpu_count()} cores; " +
          (f"lacks {' '.join(missing)} (the bundle is built for x86-64-v3: SIGILL)" if missing
           else "every x86-64-v3 feature") +
          ("; AVX-512: the CPU attention's AVX-512 variant runs" if avx512 else "; no AVX-512"))


def ldd_check(c, facts, bindir, our_ld):
    env = dict(os.environ, LD_LIBRARY_PATH=our_ld)
    missing, loads, static = {}, {}, []
    programs = sorted(p for p in glob.glob(os.path.join(bindir, "*")) if os.access(p, os.X_OK))
    for p in programs:
        rc, out = run(["ldd", os.path.realpath(p)], env=env)
        if "not a dynamic executable" in out:
            static.append(os.path.basename(p))
            continue
        for line in out.splitlines():
            m = re.match(r"\s*(\S+) => (.*?)(?: \(0x[0-9a-f]+\))?$", line)
            if not m:
                continue
            lib, where = m.group(1), m.group(2)
            if "not found" in where:
                missing.setdefault(os.path.basename(p), []).append(lib)
            elif re.match(r"lib(cudart|cublasLt|cublas|cuda|nccl|stdc\+\+|gomp|openblas)\.", lib):
                loads.setdefault(lib, set()).add(where)
    facts["ldd"] = {"programs": len(programs), "missing": missing,
                    "loads": {k: sorted(v) for k, v in loads.items()}, "not_dynamic": static}
    if not programs:
        c.add("ldd", False, f"no programs in {bindir}")
    elif missing:
        c.add("ldd", False, "; ".join(f"{p}: {', '.join(libs)} not found"
                                      for p, libs in sorted(missing.items())))
    else:
        where = ", ".join(f"{k} from {' / '.join(v)}" for k, v in sorted(facts["ldd"]["loads"].items()))
        c.add("ldd", True, f"{len(programs)} programs resolve every library" +
              (f" ({where})" if where else ""))
    return facts["ldd"]["loads"]


def program_check(c, facts, streambp, our_ld):
    # The program itself starts here (no SIGILL, its libraries load): `--version` names the BLAS
    # core, the CPU's vectors and the CPU attention's instruction set it chose.
    rc, out = run([streambp, "--version"], timeout=20, env=dict(os.environ, LD_LIBRARY_PATH=our_ld))
    facts["streambp_version"] = out
    c.add("streambp", rc == 0, ("runs: " if rc == 0 else f"exit {rc}: ") + out.replace("\n", "; ")[:400])


def query_cudart(path):
    """Runs in a child process (a driver that hangs must not take the preflight with it)."""
    lib = ctypes.CDLL(path)
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    out = {"library": path}

    def call(name, *args):
        e = getattr(lib, name)(*args)
        if e != 0:
            raise RuntimeError(f"{name}: {lib.cudaGetErrorName(e).decode()}: "
                               f"{lib.cudaGetErrorString(e).decode()}")

    v = ctypes.c_int()
    try:
        call("cudaDriverGetVersion", ctypes.byref(v))
        out["driver_cuda_version"] = v.value
        call("cudaRuntimeGetVersion", ctypes.byref(v))
        out["runtime_version"] = v.value
        call("cudaGetDeviceCount", ctypes.byref(v))
        out["devices"] = v.value
        devs = []
        for d in range(v.value):
            dev = {}
            for name, attr in ATTRS.items():
                x = ctypes.c_int()
                dev[name] = x.value if lib.cudaDeviceGetAttribute(ctypes.byref(x), attr, d) == 0 else None
            # cudaDeviceProp begins with char name[256] in every CUDA version; the rest of its
            # layout changes, so only the name is read, from a buffer larger than any version's.
            prop = ctypes.create_string_buffer(16384)
            if lib.cudaGetDeviceProperties(prop, d) == 0:
                dev["name"] = prop.raw[:256].split(b"\0", 1)[0].decode(errors="replace")
            bus = ctypes.create_string_buffer(64)
            if lib.cudaDeviceGetPCIBusId(bus, 64, d) == 0:
                dev["pci_bus_id"] = bus.value.decode()
            devs.append(dev)
        out["device"] = devs
        if devs:
            call("cudaSetDevice", 0)
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            call("cudaMemGetInfo", ctypes.byref(free), ctypes.byref(total))
            out["memory_free"], out["memory_total"] = free.value, total.value
    except RuntimeError as e:
        out["error"] = str(e)
    return out


def find_cudart(loads, our_ld):
    # The libcudart our programs load (ldd above); else the first one on our library path.
    for lib, where in loads.items():
        if lib.startswith("libcudart.so"):
            return where[0]
    for d in our_ld.split(":"):
        for name in ("libcudart.so.13", "libcudart.so"):
            if d and os.path.exists(os.path.join(d, name)):
                return os.path.join(d, name)
    return None


def version(v):
    return f"{v // 1000}.{v % 1000 // 10}" if isinstance(v, int) else "?"


def device_check(c, facts, loads, our_ld, small):
    fatal = not small
    path = find_cudart(loads, our_ld)
    if not path:
        c.add("device", False, "no libcudart on our library path (" + our_ld + ")", fatal)
        return
    rc, out = run([sys.executable, os.path.abspath(__file__), "--query-cudart", path], timeout=40)
    try:
        q = json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        c.add("device", False, f"the CUDA runtime query failed ({path}): {out[-300:]}", fatal)
        return
    facts["cuda"] = q
    head = (f"runtime {version(q.get('runtime_version'))}, driver supports CUDA "
            f"{version(q.get('driver_cuda_version'))} ({path})")
    if q.get("error") or not q.get("devices"):
        c.add("device", False, head + ": " + (q.get("error") or "no device"), fatal)
        return
    d = q["device"][0]
    cc = (d.get("compute_major") or 0, d.get("compute_minor") or 0)
    kib = lambda b: f"{b // 1024} KiB" if isinstance(b, int) else "?"
    detail = (f"{q['devices']} device(s); 0: {d.get('name', '?')} sm_{cc[0]}{cc[1]}, "
              f"{d.get('sms')} SMs, shared memory {kib(d.get('smem_per_block_optin'))} per block "
              f"(opt-in; {kib(d.get('smem_per_block'))} without), {kib(d.get('smem_per_sm'))} per SM, "
              f"L2 {(d.get('l2_bytes') or 0) >> 20} MiB, memory {q.get('memory_free', 0) >> 20} of "
              f"{q.get('memory_total', 0) >> 20} MiB free; {head}")
    c.add("device", cc >= MIN_COMPUTE,
          detail if cc >= MIN_COMPUTE else
          detail + f"; compute capability below {MIN_COMPUTE[0]}.{MIN_COMPUTE[1]}: the bundle's "
          "kernels (sm_80, sm_90) cannot run", fatal)
    # The tensor-core attention takes 110-188 KB of shared memory per block at head dim 128
    # (issue 57); below that it falls back to the fp32 kernels (fewer warps first).
    optin = d.get("smem_per_block_optin") or 0
    c.add("shared memory", optin >= 110 * 1024,
          f"{optin // 1024} KiB per block opt-in" +
          ("" if optin >= 110 * 1024 else ": below the tensor-core attention's 110 KB at head "
           "dim 128: expect the attention fallback"), fatal=False)
    free, total = q.get("memory_free", 0), q.get("memory_total", 0)
    c.add("memory", total and free >= 0.9 * total,
          f"{free >> 20} of {total >> 20} MiB free" +
          ("" if total and free >= 0.9 * total else ": something else holds GPU memory "
           "(peaks and the large stages may not fit)"), fatal=False)


def smi_check(c, facts, small):
    if not shutil.which("nvidia-smi"):
        c.add("nvidia-smi", False, "not found on PATH", fatal=False)
        return
    fields = ("name,pci.bus_id,driver_version,compute_cap,memory.total,memory.used,clocks.sm,"
              "clocks.max.sm,clocks.mem,power.limit,temperature.gpu,persistence_mode,"
              "compute_mode,mig.mode.current,ecc.mode.current")
    rc, out = run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv"], timeout=15)
    if rc != 0:  # an older nvidia-smi may not know a field: the essentials only
        rc, out = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                       "--format=csv"], timeout=15)
    facts["nvidia_smi"] = out
    rc2, apps = run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                     "--format=csv,noheader"], timeout=15)
    apps = apps if rc2 == 0 else ""
    facts["gpu_processes"] = apps
    c.add("nvidia-smi", rc == 0, out.replace("\n", " | ") if rc == 0 else out, fatal=False)
    if apps.strip():
        c.add("other processes", False, f"on the GPU before the check: {apps}", fatal=False)


def env_check(c, facts, env_file):
    seen = {}
    try:
        with open(env_file) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                if k.startswith(ENV_PREFIXES):
                    seen[k] = v
    except OSError:
        pass
    facts["env"] = seen
    notes = [f"{k}={v} ({ENV_EFFECTS.get(k, 'recorded')})" for k, v in sorted(seen.items())
             if k in ENV_EFFECTS or not k.startswith(("OMP_", "GTEST_", "STREAMBP_TEST_"))]
    # Unset by the script before any stage (it sets them per stage): reported, not a warning.
    reset = [k for k in ("CUDA_LAUNCH_BLOCKING", "STREAMBP_CUDA_ATTENTION", "STREAMBP_CUDA_ARENA")
             if k in seen]
    risky = [k for k in seen if k in ENV_EFFECTS and k not in reset and k not in
             ("OMP_WAIT_POLICY", "CUDA_CACHE_PATH", "STREAMBP_TEST_BACKEND")]
    c.add("env", not risky,
          ("; ".join(notes) if notes else "no CUDA/cuBLAS/PyTorch variables set") +
          (f" [unset for the check: {' '.join(reset)}]" if reset else ""), fatal=False)


def torch_check(c, facts, python):
    code = ("import importlib.metadata as m, importlib.util as u, json\n"
            "v = lambda n: m.version(n) if u.find_spec(n) else None\n"
            "print(json.dumps({'torch': v('torch'), 'transformers': v('transformers')}))")
    rc, out = run([python, "-c", code], timeout=20)
    try:
        got = json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        got = {"torch": None, "transformers": None, "error": out[-200:]}
    facts["python"] = dict(got, interpreter=python)
    ok = bool(got.get("torch") and got.get("transformers"))
    c.add("torch", ok, f"{python}: torch {got.get('torch')}, transformers {got.get('transformers')}" +
          ("" if ok else ": the PyTorch baseline stages are skipped"), fatal=False)


def sanitizer_check(c, facts):
    exe = shutil.which("compute-sanitizer") or next(
        (p for p in sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer")) if os.access(p, os.X_OK)),
        None)
    if not exe:
        facts["compute_sanitizer"] = None
        c.add("compute-sanitizer", False, "not found (PATH, /usr/local/cuda*/bin): the sanitizer "
              "stages are skipped", fatal=False)
        return
    rc, out = run([exe, "--version"], timeout=15)
    line = next((l for l in out.splitlines() if "ersion" in l), out[:80])
    facts["compute_sanitizer"] = {"path": exe, "version": line}
    c.add("compute-sanitizer", rc == 0, f"{exe}: {line}", fatal=False)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--query-cudart":
        print(json.dumps(query_cudart(sys.argv[2])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--streambp", required=True)
    ap.add_argument("--our-ld", required=True)
    ap.add_argument("--env-file", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--python", default="python3")
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    c, facts = Checks(), {"small": a.small}
    cpu_check(c, facts)
    loads = ldd_check(c, facts, a.bin, a.our_ld)
    program_check(c, facts, a.streambp, a.our_ld)
    device_check(c, facts, loads, a.our_ld, a.small)
    smi_check(c, facts, a.small)
    env_check(c, facts, a.env_file)
    torch_check(c, facts, a.python)
    sanitizer_check(c, facts)
    failed = [i["check"] for i in c.items if i["fatal"] and not i["ok"]]
    verdict = "pass" if not failed else "fail: " + ", ".join(failed)
    if a.small and not failed:
        verdict += " (GPU_CHECK_SMALL: device checks not required)"
    with open(a.json, "w") as f:
        json.dump({"verdict": verdict, "checks": c.items, "facts": facts}, f, indent=1)
    print(f"preflight: {verdict}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())

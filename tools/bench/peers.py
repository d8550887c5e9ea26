#!/usr/bin/env python3
"""streambp against its Python peers on the same CPU, interleaved (docs/BENCHMARKS.md, issue 18).

One training step (forward + backward, no optimizer) of Qwen3-0.6B's shape cut to --layers
layers, random weights, one sequence of --seq-len tokens, the same threads, by:

  streambp    `streambp bench --modes stream` (and `checkpoint` with --with-checkpoint)
  reference   the reference StreamBP (Python) from a local checkout given by --reference: its
              StreamModel wrapper, with the same layer and head chunks
  hf-ckpt     Hugging Face transformers with gradient checkpointing

--precisions fp32,bf16 runs each system in each precision: streambp with `--precision bf16`
(bf16 weights and activations, fp32 accumulation and gradients), Hugging Face under
torch.autocast("cpu", dtype=torch.bfloat16) (fp32 weights cast per op, bf16 GEMMs and
attention through oneDNN where the CPU has AVX-512 BF16 / AMX); the reference runs fp32 only.

Every run is a fresh process (its peak RSS is its own), the systems take turns round after
round (a shared machine's speed drifts; interleaving spreads that over all of them), and the
medians and their ratios are printed. The reference implementation pins torch 2.6 and
transformers 4.51.3 (its requirements.txt); give an interpreter that has them with --python:

  python3 -m venv .venv-peers
  .venv-peers/bin/pip install -r tools/requirements-peers.txt
  python3 tools/bench/peers.py --reference ../StreamBP --python .venv-peers/bin/python

Nothing of the reference implementation is copied here: it is imported from the checkout.

A ratio is never quoted without its machine: the table is followed by the CPU (model, family and
model numbers, vector extensions), streambp's BLAS provider and the core it runs (from `bench`'s
JSON) and torch's BLAS and CPU capability (from each Python worker), and --json records them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# Qwen3-0.6B (config.json of Qwen/Qwen3-0.6B), layers overridden; streambp's qwen3-0.6b preset.
QWEN3_0_6B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0,
                  tie_word_embeddings=True, hidden_act="silu", attention_bias=False)


def cpu_description() -> dict:
    """This machine's CPU as /proc/cpuinfo and os.cpu_count() see it."""
    info = {"model_name": "", "vendor": "", "family": "", "model": "", "cpus": os.cpu_count()}
    flags = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and not info["model_name"]:
                    info["model_name"] = value
                elif key == "vendor_id" and not info["vendor"]:
                    info["vendor"] = value
                elif key == "cpu family" and not info["family"]:
                    info["family"] = value
                elif key == "model" and not info["model"]:
                    info["model"] = value
                elif key == "flags" and not flags:
                    flags = value.split()
    except OSError:
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "amx_bf16",
              "amx_tile")
    info["vector_flags"] = [f for f in wanted if f in flags]
    return info


def torch_blas() -> dict:
    """torch's BLAS and the CPU kernels it dispatches to (in a worker process)."""
    import torch
    config = torch.__config__.show()
    # "... BLAS_INFO=mkl, BUILD_TYPE=Release, ...": the value up to its comma.
    at = config.find("BLAS_INFO=")
    blas = config[at + len("BLAS_INFO="):].split(",")[0].strip() if at >= 0 else "?"
    return {"blas": blas, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl": torch.backends.mkl.is_available()}


def worker(args):
    """One step in this process; prints one JSON line."""
    import resource
    import time

    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = Qwen3Config(num_hidden_layers=args.layers, **QWEN3_0_6B)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    model.train()
    # bf16: autocast around the forward (the loss included), backward outside it, as the
    # PyTorch AMP recipe does; every matmul and the attention then run in bf16.
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if args.precision == "bf16"
                else __import__("contextlib").nullcontext())
    ids = torch.randint(0, cfg.vocab_size, (1, args.seq_len))
    mask = torch.ones_like(ids)
    if args.worker == "reference":
        sys.path.insert(0, os.path.join(os.path.abspath(args.reference), "src"))
        from streambp import StreamModel  # the checkout's package

        run = StreamModel(model, gradient_accumulation_steps=1, logits_chunk_size=args.head_chunk,
                          checkpoint_chunk_size=args.layer_chunk, stream_checkpoint=True)
        run.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_enable()
        run = model
    t0 = time.perf_counter()
    with autocast:
        out = run(input_ids=ids, attention_mask=mask, labels=ids, use_cache=False,
                  return_dict=True)
    if out.loss.requires_grad:  # the reference runs its backward inside the forward
        out.loss.backward()
    step = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"step_s": step, "peak_rss_bytes": rss, "loss": float(out.loss),
                      "torch": torch.__version__,
                      "transformers": __import__("transformers").__version__,
                      "torch_blas": torch_blas()}))


def run_python(args, kind, precision="fp32"):
    cmd = [args.python, os.path.abspath(__file__), "--worker", kind, "--precision", precision,
           "--layers", str(args.layers),
           "--seq-len", str(args.seq_len), "--layer-chunk", str(args.layer_chunk),
           "--head-chunk", str(args.head_chunk), "--threads", str(args.threads),
           "--seed", str(args.seed)]
    if args.reference:
        cmd += ["--reference", args.reference]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"peers: {kind} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_streambp(args, mode, precision="fp32"):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        cmd = [args.streambp, "bench", "--model", "qwen3-0.6b", "--layers", str(args.layers),
               "--seq-len", str(args.seq_len), "--modes", mode, "--layer-chunk",
               str(args.layer_chunk), "--head-chunk", str(args.head_chunk), "--threads",
               str(args.threads), "--warmup", "0", "--repeat", "1", "--seed", str(args.seed),
               "--precision", precision, "--json", out]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"peers: streambp bench failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
        j = json.load(open(out))
        r = j["runs"][0]
        return {"step_s": r["step_seconds_median"], "peak_rss_bytes": r["rss_peak_bytes"],
                "loss": r["loss"], "blas": j.get("blas", {}), "sgemm_gflops": j["sgemm_gflops"],
                "gemm_bf16": j.get("gemm_bf16", "?"), "attention_isa": j.get("attention_isa", "?")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", help="checkout of the reference StreamBP (omit to skip it)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with torch and transformers for the Python peers")
    ap.add_argument("--streambp", default="build/streambp")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--layer-chunk", type=int, default=1024)
    ap.add_argument("--head-chunk", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--with-checkpoint", action="store_true",
                    help="also streambp's checkpoint mode")
    ap.add_argument("--no-hf", action="store_true", help="skip Hugging Face checkpointing")
    ap.add_argument("--precisions", default="fp32",
                    help="comma-separated: fp32, bf16 (streambp --precision bf16; HF autocast)")
    ap.add_argument("--json", help="write every run and the medians here")
    ap.add_argument("--worker", choices=["hf", "reference"], help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    precisions = args.precisions.split(",")
    for p in precisions:
        if p not in ("fp32", "bf16"):
            sys.exit(f"peers: unknown precision '{p}' (fp32, bf16)")

    def suffix(p):
        return "" if p == "fp32" else " bf16"

    systems = []
    for p in precisions:
        systems.append((f"streambp stream{suffix(p)}",
                        lambda p=p: run_streambp(args, "stream", p)))
        if args.with_checkpoint:
            systems.append((f"streambp checkpoint{suffix(p)}",
                            lambda p=p: run_streambp(args, "checkpoint", p)))
    if args.reference:
        systems.append(("reference StreamBP", lambda: run_python(args, "reference")))
    if not args.no_hf:
        for p in precisions:
            name = "HF gradient checkpointing" + (" bf16 autocast" if p == "bf16" else "")
            systems.append((name, lambda p=p: run_python(args, "hf", p)))
    runs = {name: [] for name, _ in systems}
    for k in range(args.rounds):
        for name, fn in systems:
            r = fn()
            runs[name].append(r)
            print(f"round {k + 1}/{args.rounds}  {name:26s} {r['step_s']:8.2f} s  "
                  f"peak RSS {r['peak_rss_bytes'] / 2**30:6.2f} GiB", file=sys.stderr, flush=True)

    med = {n: statistics.median(r["step_s"] for r in rs) for n, rs in runs.items()}
    rss = {n: max(r["peak_rss_bytes"] for r in rs) for n, rs in runs.items()}
    first = f"streambp stream{suffix(precisions[0])}"
    base = med[first]
    print(f"\nQwen3-0.6B shape, {args.layers} layers, T={args.seq_len}, {args.threads} threads, "
          f"chunks {args.layer_chunk}/{args.head_chunk}, median of {args.rounds} interleaved "
          f"rounds")
    print(f"| system | step s | peak RSS | {first} / system |")
    print("|---|---:|---:|---:|")
    for n in runs:
        print(f"| {n} | {med[n]:.2f} | {rss[n] / 2**30:.2f} GiB | {base / med[n]:.2f} |")
    for p in precisions:  # the same precision's pairs: HF / streambp = how much faster we are
        ours_p = f"streambp stream{suffix(p)}"
        hf_p = "HF gradient checkpointing" + (" bf16 autocast" if p == "bf16" else "")
        if hf_p in med:
            print(f"{p}: {hf_p} / {ours_p} = {med[hf_p] / med[ours_p]:.2f}")
    if len(precisions) > 1 and "streambp stream bf16" in med and "streambp stream" in med:
        print(f"streambp stream fp32 / bf16 = "
              f"{med['streambp stream'] / med['streambp stream bf16']:.2f}")
    versions = [r for rs in runs.values() for r in rs if "torch" in r]
    cpu = cpu_description()
    ours = runs[first][0].get("blas", {})
    machine = {"cpu": cpu, "streambp_blas": ours,
               "streambp_sgemm_gflops": statistics.median(
                   r["sgemm_gflops"] for r in runs[first]),
               "torch_blas": versions[0]["torch_blas"] if versions else None}
    print(f"\nmachine: {cpu['model_name']} ({cpu['vendor']}, family {cpu['family']} model "
          f"{cpu['model']}, {cpu['cpus']} CPUs, {' '.join(cpu['vector_flags'])}); streambp: "
          f"{ours.get('provider', '?')} core {ours.get('core', '?')}, sgemm "
          f"{machine['streambp_sgemm_gflops']:.0f} GFLOP/s, bf16 GEMM "
          f"{runs[first][0].get('gemm_bf16', '?')}, attention "
          f"{runs[first][0].get('attention_isa', '?')}")
    if versions:
        tb = versions[0]["torch_blas"]
        print(f"torch {versions[0]['torch']} ({tb['blas']}, CPU capability "
              f"{tb['cpu_capability']}), transformers {versions[0]['transformers']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "machine": machine, "runs": runs,
                       "median_step_s": med, "peak_rss_bytes": rss}, f, indent=1)


if __name__ == "__main__":
    main()

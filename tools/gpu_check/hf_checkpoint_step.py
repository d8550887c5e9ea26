#!/usr/bin/env python3
"""One training step of Qwen3-0.6B (random weights from its config) with PyTorch + transformers
gradient checkpointing, bf16, SDPA attention: the baseline scripts/gpu-check.sh sets beside
`streambp bench` on the same model and sequence length. Writes JSON: step time (median of the
timed steps after one warm-up), tokens/s and torch's peak allocated bytes.

Needs torch with CUDA and transformers (the GPU machine has both). --small: a tiny model of the
same shape family, on the CPU when torch sees no GPU (scripts/gpu-check.sh GPU_CHECK_SMALL=1,
the dry run against the emulated CUDA backend in CI).
"""
import argparse
import json
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", required=True)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--small", action="store_true",
                    help="a tiny model (d 64, vocab 512), on the CPU without a GPU")
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import Qwen3Config, Qwen3ForCausalLM

    T = args.seq_len
    # Qwen3-0.6B's config.json values (the same numbers as streambp's qwen3-0.6b preset).
    dims = dict(hidden_size=1024, intermediate_size=3072, num_attention_heads=16,
                num_key_value_heads=8, head_dim=128, vocab_size=151936)
    if args.small:
        dims = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, vocab_size=512)
    cfg = Qwen3Config(num_hidden_layers=args.layers, tie_word_embeddings=True, rope_theta=1e6,
                      rms_norm_eps=1e-6, max_position_embeddings=max(40960, T),
                      attn_implementation="sdpa", use_cache=False, **dims)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda or not args.small else "cpu"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    result = {"seq_len": T, "layers": args.layers, "torch": torch.__version__,
              "transformers": transformers.__version__, "dtype": "bf16",
              "gradient_checkpointing": True, "attention": "sdpa", "device": device,
              "small": args.small}
    try:
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
        model.gradient_checkpointing_enable()
        model.train()
        ids = torch.randint(0, cfg.vocab_size, (1, T), device=device)
        times = []
        for i in range(1 + args.repeat):
            sync()
            if i == 1 and cuda:
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            sync()
            if i >= 1:
                times.append(time.perf_counter() - t0)
            model.zero_grad(set_to_none=True)
        step = statistics.median(times)
        result.update(status="ok", step_seconds_median=step, tokens_per_second=T / step,
                      peak_allocated_bytes=torch.cuda.max_memory_allocated() if cuda else None,
                      loss=float(loss))
    except torch.cuda.OutOfMemoryError as e:
        result.update(status="oom", error=str(e).splitlines()[0])
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

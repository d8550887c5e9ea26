#!/usr/bin/env python3
"""Context extension, end to end (issue 52): `streambp train` with context.rope_scaling (yarn)
and context.max_position_embeddings writes a checkpoint that transformers loads with that rope
and scores with the log-probs streambp computes, at lengths beyond the rope's original ones.

    cmake --build build --target streambp
    python tools/hf_parity/check_context_extension.py [--streambp build/streambp]

1. Trains the tiny-chat model (tests/support/test_support.h's kTinyChatModelJson with 128
   positions) for 3 steps with the keys in CONFIG below; its checkpoint-3 is the model.
2. Loads it with AutoModelForCausalLM.from_pretrained (float32, eager attention) and records the
   per-token target log-probs of three random sequences of 300, 170 and 450 tokens (the rope's
   original positions are 128).
3. Writes tests/fixtures/hf/context_extension/: model/ (the checkpoint's config.json and
   model.safetensors), config.yaml (the run's keys), tokens.json and transformers_logprobs.json.
   tests/parity/hf_parity_test.cpp (HfContextExtension) scores the committed checkpoint and
   compares.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import FIXTURES, REPO, versions, write_json  # noqa: E402

MODEL = {"model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,
         "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
         "head_dim": 16, "vocab_size": 512, "max_position_embeddings": 128,
         "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "float32"}
CONFIG = """\
seed: 3
threads: 1
max_steps: 3
mode: stream
layer_chunk: 64
head_chunk: 32
max_tokens: 512
optim:
  lr: 0.01
context:
  rope_scaling:
    rope_type: yarn
    factor: 4
    original_max_position_embeddings: 128
  max_position_embeddings: 512
"""
LENGTHS = [300, 170, 450]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streambp", type=Path, default=REPO / "build" / "streambp")
    ap.add_argument("--out", type=Path, default=FIXTURES / "context_extension")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "model.json").write_text(json.dumps(MODEL))
        config = (f"model: {t / 'model.json'}\ntokenizer: {REPO / 'examples/tiny-chat'}\n"
                  f"output_dir: {t / 'out'}\ndata:\n  train: {REPO / 'examples/tiny-chat/train.jsonl'}\n"
                  + CONFIG)
        (t / "config.yaml").write_text(config)
        subprocess.run([str(args.streambp), "train", str(t / "config.yaml")], check=True)
        ckpt = t / "out" / "checkpoint-3"

        model, info = AutoModelForCausalLM.from_pretrained(
            ckpt, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        assert not bad, f"transformers reports loading problems: {bad}"
        rope = model.config.rope_parameters
        assert rope["rope_type"] == "yarn" and model.config.max_position_embeddings == 512, rope
        model.eval()
        gen = torch.Generator().manual_seed(52)
        seqs = [torch.randint(0, MODEL["vocab_size"], (n,), generator=gen).tolist()
                for n in LENGTHS]
        logprobs = []
        with torch.no_grad():
            for s in seqs:
                ids = torch.tensor([s])
                lp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
                logprobs.append([float(x) for x in lp[:-1].gather(1, ids[0, 1:, None])[:, 0]])

        dest = args.out
        if dest.exists():
            shutil.rmtree(dest)
        (dest / "model").mkdir(parents=True)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(ckpt / f, dest / "model" / f)
        (dest / "config.yaml").write_text(CONFIG)
        write_json(dest / "tokens.json", {"sequences": seqs,
                                          "loss_mask": [[1] * len(s) for s in seqs]})
        write_json(dest / "transformers_logprobs.json",
                   {"rope_parameters": rope, "max_position_embeddings": 512,
                    "versions": versions(), "logprobs": logprobs})
        print(f"wrote {dest}: rope {rope}, {sum(LENGTHS)} tokens scored by transformers")
    return 0


if __name__ == "__main__":
    sys.exit(main())

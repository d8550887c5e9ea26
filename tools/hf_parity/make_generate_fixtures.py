#!/usr/bin/env python3
"""Greedy-generation fixtures: transformers' generate(do_sample=False) on the committed parity
models (tests/fixtures/hf/<name>/model), for `streambp generate --greedy` to match token for token.

    /work/.venv-hf/bin/python tools/hf_parity/make_generate_fixtures.py [--only NAME ...]

For each model: prompts of different lengths (random ids from a fixed seed), each generated on its
own (no padding: the batch of prompts is streambp's input, transformers runs them one by one so
that no pad or attention-mask arithmetic enters the reference), 64 new tokens with eos disabled,
float32, eager attention. Writes tests/fixtures/hf/<name>/generate.json:
  {"max_new_tokens": 64, "prompts": [[ids]...], "completions": [[ids]...],
   "logprobs": [[...]...], "versions": {...}}
logprobs: the model's log-softmax of each chosen token, from generate's output scores.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import FIXTURES, versions  # noqa: E402

# mistral_sliding_window: every layer a window of 6, far below prompt + completion (up to 104
# tokens), so the KV cache's windowed attention decides every token after the first few.
# llama_rope_yarn: 104 positions, 3x its rope's 32 original ones (yarn x4, issue 52).
# llama_rope_dynamic: max_position_embeddings 32, so transformers recomputes the frequencies at
# every new position past 32 (and the 40-token prompt's from its length): streambp's per-row
# dynamic table (engine/prepared_batch.h) against it, one prompt at a time.
MODELS = ["qwen3_gqa_qknorm", "llama_rope_llama3", "qwen2_bias_tied", "mistral_sliding_window",
          "llama_rope_yarn", "llama_rope_dynamic"]
PROMPT_LENGTHS = [1, 5, 17, 40]
MAX_NEW_TOKENS = 64


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append",
                    help="write only this model's generate.json (repeatable)")
    args = ap.parse_args()
    torch.manual_seed(0)
    for name in MODELS:
        if args.only and name not in args.only:
            continue
        model_dir = FIXTURES / name / "model"
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
        vocab = model.config.vocab_size
        g = torch.Generator().manual_seed(1234)
        prompts, completions, logprobs = [], [], []
        for n in PROMPT_LENGTHS:
            ids = torch.randint(0, vocab, (1, n), generator=g)
            if model.config.rope_parameters.get("rope_type") == "dynamic":
                # transformers' dynamic rope keeps the longest length any earlier call saw (a
                # 40-token prompt after a 17 + 64-token generation would rotate with 81's
                # frequencies): each prompt gets a fresh model, as a fresh process would.
                model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                             attn_implementation="eager").eval()
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=MAX_NEW_TOKENS,
                                     eos_token_id=None, pad_token_id=0, output_scores=True,
                                     output_logits=True, return_dict_in_generate=True)
            new = out.sequences[0, n:].tolist()
            assert len(new) == MAX_NEW_TOKENS, (name, n, len(new))
            lp = [torch.log_softmax(out.logits[t][0].double(), -1)[new[t]].item()
                  for t in range(len(new))]
            prompts.append(ids[0].tolist())
            completions.append(new)
            logprobs.append(lp)
        path = FIXTURES / name / "generate.json"
        path.write_text(json.dumps({"max_new_tokens": MAX_NEW_TOKENS, "prompts": prompts,
                                    "completions": completions, "logprobs": logprobs,
                                    "versions": versions()}) + "\n")
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

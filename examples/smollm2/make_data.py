#!/usr/bin/env python3
"""Writes the data of the SmolLM2-135M examples (examples/smollm2/README.md). Deterministic.

sft_train.jsonl     400 two-digit additions "What is A + B?" answered "The answer is C." (SFT)
sft_heldout.jsonl   50 others, as prompt records with their answer (accuracy before/after)
grpo_prompts.jsonl  300 additions of numbers 1..30, "Reply with only the number." (online GRPO)
grpo_heldout.jsonl  60 others (accuracy before/after)
No question of a held-out file is in the matching training file.
"""
import json
import pathlib
import random

out = pathlib.Path(__file__).resolve().parent / "data"
out.mkdir(exist_ok=True)


def draw(rng, lo, hi, n, taken):
    rows = []
    while len(rows) < n:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        if (a, b) not in taken:
            taken.add((a, b))
            rows.append((a, b))
    return rows


def prompts(path, rows, template):
    with open(path, "w") as f:
        for a, b in rows:
            f.write(json.dumps({"prompt": [{"role": "user", "content": template.format(a, b)}],
                                "answer": str(a + b)}) + "\n")


rng, taken = random.Random(0), set()
train, held = draw(rng, 10, 99, 400, taken), draw(rng, 10, 99, 50, taken)
with open(out / "sft_train.jsonl", "w") as f:
    for a, b in train:
        f.write(json.dumps({"messages": [
            {"role": "user", "content": f"What is {a} + {b}?"},
            {"role": "assistant", "content": f"The answer is {a + b}."}]}) + "\n")
prompts(out / "sft_heldout.jsonl", held, "What is {} + {}?")

rng, taken = random.Random(1), set()
train, held = draw(rng, 1, 30, 300, taken), draw(rng, 1, 30, 60, taken)
prompts(out / "grpo_prompts.jsonl", train, "What is {} + {}? Reply with only the number.")
prompts(out / "grpo_heldout.jsonl", held, "What is {} + {}? Reply with only the number.")

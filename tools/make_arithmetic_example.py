#!/usr/bin/env python3
"""Writes the data of the online-GRPO learning example (examples/tiny-chat/arith-*.yaml).

All 100 single-digit additions "What is A plus B?" -> "The answer is C.":
  arith_sft.jsonl        every fact once, as a conversation (the short SFT warm-up)
  arith_prompts.jsonl    70 facts as prompt records with their answer (GRPO trains on these)
  arith_heldout.jsonl    the other 30 (never seen by GRPO: the accuracy before/after)
Deterministic: the split is drawn from random.Random(0).
"""
import json
import pathlib
import random

out = pathlib.Path(__file__).resolve().parent.parent / "examples" / "tiny-chat"
facts = [(a, b) for a in range(10) for b in range(10)]
question = "What is {} plus {}?"
guesses = random.Random(1)
with open(out / "arith_sft.jsonl", "w") as f:
    for a, b in facts:
        wrong = guesses.choice([g for g in range(19) if g != a + b])
        for reply in (f"The answer is {a + b}.", f"I guess {wrong}."):
            f.write(json.dumps({"messages": [
                {"role": "user", "content": question.format(a, b)},
                {"role": "assistant", "content": reply}]}) + "\n")
order = list(range(len(facts)))
random.Random(0).shuffle(order)
for name, idx in (("arith_prompts.jsonl", order[:70]), ("arith_heldout.jsonl", order[70:])):
    with open(out / name, "w") as f:
        for i in sorted(idx):
            a, b = facts[i]
            f.write(json.dumps({"prompt": [{"role": "user", "content": question.format(a, b)}],
                                "answer": str(a + b)}) + "\n")

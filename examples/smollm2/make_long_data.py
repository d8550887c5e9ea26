#!/usr/bin/env python3
"""Writes the long-context fine-tune data of examples/smollm2 (issue 52; README.md here).

data/passkey16k_train.jsonl: `text` records of about 16,250 tokens each, a pass key hidden at a
random depth of filler and asked for at the end, the key written after the question. Trained on
every token (data.format text): the filler teaches the model the YaRN-scaled positions, the
key teaches it to look back across them.

The filler is NOT `streambp eval`'s built-in filler ("The grass is green. ..."): it is drawn
from a small grammar of other sentences, and the keys are drawn from another generator, so
that the evaluation after the fine-tune does not see its own text. Deterministic (seed 52).
"""
import json
import pathlib
import random

out = pathlib.Path(__file__).resolve().parent / "data"
out.mkdir(exist_ok=True)

SUBJECTS = ["The old miller", "A quiet river", "The small boat", "Our neighbour", "The red kite",
            "A tired horse", "The north wind", "The village baker", "A grey cat", "The young clerk"]
VERBS = ["walked past", "looked at", "waited near", "carried", "followed", "painted",
         "counted", "forgot", "found", "mended"]
OBJECTS = ["the stone bridge", "a basket of apples", "the long fence", "an empty cart",
           "the garden gate", "a pile of letters", "the market square", "a wooden chair",
           "the broken clock", "a field of wheat"]
ENDINGS = ["in the morning.", "before the rain.", "without a word.", "once again.",
           "at noon.", "for a while.", "as usual.", "after supper."]

INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
         "memorize it. I will quiz you about the important information there.")
QUESTION = " What is the pass key? The pass key is"

# ~4.7 characters per token for this grammar with SmolLM2's tokenizer (measured with the
# model's tokenizer.json): 76,000 characters of filler are ~16,250 tokens, under max_tokens 16384.
FILLER_CHARS = 76000
RECORDS = 4

rng = random.Random(52)


def sentence():
    return " ".join([rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS),
                     rng.choice(ENDINGS)])


with open(out / "passkey16k_train.jsonl", "w") as f:
    for _ in range(RECORDS):
        key = str(rng.randint(10000, 99999))
        filler = []
        size = 0
        while size < FILLER_CHARS:
            s = sentence()
            filler.append(s)
            size += len(s) + 1
        at = int(rng.uniform(0.05, 0.95) * len(filler))
        needle = f"The pass key is {key}. Remember it. {key} is the pass key."
        body = " ".join(filler[:at] + [needle] + filler[at:])
        f.write(json.dumps({"text": INTRO + " " + body + QUESTION + " " + key + "."}) + "\n")
print("wrote", out / "passkey16k_train.jsonl")

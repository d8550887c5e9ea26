#!/usr/bin/env python3
"""Writes tests/fixtures/gguf/tiny_spm_cases.jsonl: how transformers tokenizes with the
SentencePiece tokenizer of tests/fixtures/gguf/tiny_spm.gguf (AutoTokenizer.from_pretrained(...,
gguf_file=...): merges rebuilt from the scores, byte fallback), for the C++ converter's tokenizer
to match id for id. Needs transformers, tokenizers and gguf in one environment
(tools/requirements-peers.txt plus tools/requirements-gguf.txt):

    python tools/gguf_spm_cases.py
"""
import json
import os

from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "gguf")

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "She sells sea shells on the sea shore.",
    "The capital of France is Paris.",
    "There are 12 months in a year and 365 days.",
    "  leading and  double  spaces ",
    "Bytes: caf\u00e9, \u4e2d\u6587, emoji \U0001F600!",
    "quickly brownish foxes",
    "",
    "a",
    "The</s> end<s>",
]


def main():
    tok = AutoTokenizer.from_pretrained(OUT, gguf_file="tiny_spm.gguf")
    backend = tok.backend_tokenizer
    with open(os.path.join(OUT, "tiny_spm_cases.jsonl"), "w") as f:
        for t in TEXTS:
            ids = backend.encode(t, add_special_tokens=False).ids
            f.write(json.dumps({"text": t, "ids": ids}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

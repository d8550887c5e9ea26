#!/usr/bin/env python3
"""Writes the tokenizer fixtures in tests/fixtures/tokenizer/ with the Hugging Face `tokenizers`
library, so the C++ tokenizer can be checked id for id without Python in CI.

    pip install -r tools/requirements-tokenizer.txt
    python3 tools/tokenizer_fixtures.py [--shared ../shared/tokenizers] [--only spm]

Outputs (all small; the 11 MB Qwen3 tokenizer.json is read from the shared folder, never copied):
  qwen3_cases.jsonl        cases for shared/tokenizers/qwen3/tokenizer.json
  gpt2_cases.jsonl         cases for the GPT-2 tokenizer the library builds from shared
                           encoder.json + vocab.bpe (the C++ side mirrors that construction)
  tiny_bytelevel.json      a small trained tokenizer: Sequence[NFC] normalizer, ByteLevel with
                           add_prefix_space, ignore_merges, merges as "a b" strings, added tokens
                           with lstrip / rstrip / single_word / normalized
  tiny_bytelevel_cases.jsonl
  tiny_split.json          a small trained char-level tokenizer: Split pre-tokenizers with every
                           behaviour, String and Regex patterns, invert; no decoder
  tiny_split_cases.jsonl
  tiny_gemma.json          SentencePiece-style BPE as Gemma ships it: byte_fallback, fuse_unk, unk_token,
                           Replace(" " -> "▁") normalizer, no pre-tokenizer, decoder
                           Sequence[Replace, ByteFallback, Fuse], <bos>/<eos>/<start_of_turn>/... specials
  tiny_llama2.json         Llama 2 (legacy) style: Sequence[Prepend("▁"), Replace] normalizer, decoder
                           Sequence[Replace, ByteFallback, Fuse, Strip(" ", 1, 0)], merges as "a b"
  tiny_metaspace.json      transformers' newer Llama/Mistral conversion: Metaspace pre-tokenizer
                           (prepend_scheme "first", split false), some <0xNN> tokens missing so
                           unknown bytes become a fused <unk>
  tiny_metaspace_always.json  Metaspace (prepend_scheme "always", split true) pre-tokenizer and
                           decoder, ignore_merges, unfused <unk>
  (each with its *_cases.jsonl)
  tiny_gemma_variants.jsonl  tiny_gemma.json's vocabulary behind six other layouts (SPM_VARIANTS:
                           Split + Replace, Metaspace first+split / never / add_prefix_space,
                           Split then Metaspace, a normalizer Sequence, Strip after Fuse): the
                           changed fields, then 100 texts each with ids and decode
  VERSIONS.json            the tokenizers version that wrote them

Each *_cases.jsonl line is one of
  {"text": T, "ids": [...], "decoded": D, "decoded_skip": S [, "ids_plain": [...]]}
      ids = encode(T, add_special_tokens=False).ids; D/S = decode(ids, skip_special_tokens=F/T);
      ids_plain (present only when it differs from ids) = the same with encode_special_tokens=True
      ids_special (SentencePiece-style fixtures only) = encode(T, add_special_tokens=True).ids:
      what the TemplateProcessing post-processor adds (<bos> in front), which the C++ side
      leaves to its callers (the example encoder's add_bos_token)
  {"decode_ids": [...], "decoded": D, "decoded_skip": S}
      arbitrary id sequences (cut multi-byte characters), checking the lossy UTF-8 repair.
"""
import argparse
import json
import os
import random

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "tokenizer")

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times.",
    "Streaming backpropagation trades recomputation for memory, one chunk at a time.",
    "Hello, world! How are you doing today?",
    "She said: \"I don't know; maybe tomorrow.\"",
    "In 1969, Apollo 11 landed on the Moon at 20:17 UTC.",
    "Mr. O'Neill's cat-flap wasn't working (again).",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "THE END. The End. the end.",
    "Tokenization is the first step; everything after depends on it.",
]
CODE = [
    "def f(x):\n    return x * 2\n",
    "class A:\n    def __init__(self):\n        self.x = [1, 2, 3]\n\n    def g(self, y=None):\n        if y is None:\n            return {}\n",
    "for i in range(10):\n\tprint(i)\n\tif i % 2 == 0:\n\t\tcontinue\n",
    "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x += 1;\n  return 0;\n}\n",
    "template <typename T>\nT max(T a, T b) { return a > b ? a : b; }  // why not\n",
    "    x = a->b + c::d;\t// tab then comment\n",
    "if (ptr != nullptr && *ptr >= 0x1F) { ptr[i++] = '\\0'; }",
    "SELECT name, COUNT(*) FROM users WHERE id > 100 GROUP BY name;",
    "<div class=\"a\">&nbsp;</div>",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
]
CJK = [
    "中文分词测试，这是一个句子。",
    "我们今天去公园散步吧！天气很好。",
    "日本語のテキストです。カタカナとひらがなとKanji。",
    "東京都渋谷区１−２−３",
    "한국어 텍스트입니다. 안녕하세요!",
    "混合 mixed 文本 text 123",
]
EMOJI = [
    "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵🇺🇸", "❤️", "😀😃😄😁", "🧑🏿‍💻 coding", "✅ done ❌ failed", "🤖\u200d",
]
COMBINING = [
    "e\u0301", "cafe\u0301", "Cafe\u0301 ole\u0301", "n\u0303o", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af",
    "A\u030a", "a\u0308\u0301", "\u0301 leading combining mark", "o\u0302\u0323", "\u0915\u094d\u0937",
    "ﬁnance ﬂow", "Å vs A\u030a vs \u212b",
]
WHITESPACE = [
    "   ", "\t\t", "\n\n\n", " \t \n", "\r\n", "line one\r\nline two\r\n", "  \n  ", "trailing   ",
    "   leading", "a  b   c    d", "tabs\tand\tspaces \t mixed", "\n", " ", "\t", "x \n\n y", " \r\n\r\n ",
    "\u00a0non-breaking\u00a0space", "ideographic\u3000space", "line\u2028separator", "nel\u0085here",
    "mongolian\u180e vowel \u180e separator", "unit\u001fsep\u001c",
]
CONTRACTIONS = [
    "DON'T", "we'LL", "I'm", "she'd", "They'RE", "it's", "'s", "o'clock", "you've", "YOU'VE", "I'D",
    "it'ſ", "'ſa", "we're'nt", "rock 'n' roll",
]
DIGITS = [
    "12345678901234567890", "3.14159", "1,000,000", "2024-01-01T12:34:56Z", "0x1F", "-42", "1e-9",
    "٣٤٥ Arabic-Indic digits", "²³ superscripts", "Ⅻ roman", "① circled", "१२३",
]
SPECIAL = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "<|im_start|>user\nhi<|im_end|>", "<think>\n\n</think>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start", "<|im_start|><|im_end|>", "<<|im_start|>>", "text<|endoftext|>more", " <|endoftext|> ",
    "<sep>", "a<sep>b", "x [MASK] y", "[MASK]", "word", "a word here", "password", "wordy words",
    "café", "cafe\u0301 au lait", "<|user|>", "hi <|user|>  there",
]
PUNCT = [
    "!!!", "...", "?!?!", "—", "«guillemets»", "\"quoted\"", "((()))", "->", "=>", "::", "#!/bin/bash",
    "---", "***bold***", "__init__", "a.b.c", "~/.config", "$$x^2$$", "\\n", "@@ -1,3 +1,4 @@",
]
URLS = [
    "https://example.com/path?query=1&x=y#frag", "user@example.com", "http://localhost:8080/",
    "ftp://files.example.org/pub/README.txt", "www.example.co.uk",
]
WEIRD = [
    "\u0000", "nul\u0000inside", "\u200b", "zero\u200bwidth", "\ufeffBOM", "\ufffd", "\uffff", "\U0010ffff", "\ue000",
    "ß", "İstanbul", "ǅ", "Ω", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "Ａｌｌ ｆｕｌｌｗｉｄｔｈ", "مرحبا بالعالم", "שלום", "สวัสดีครับ",
    "नमस्ते दुनिया", "Γειά σου Κόσμε", "Привет, мир!", "∀x∈ℝ: x² ≥ 0", "\u0007bell\u001b[0m", "\x7f\x80\x9f",
]
# Pre-tokens longer than 96 characters take the C++ BPE's heap path instead of its rescan path.
LONG = [
    "a" * 300, "ab" * 150, "=" * 120, "-" * 97 + ">", " " * 100, "\t" * 99, "\n" * 120, "👍" * 30,
    "x" * 1000 + "y", "Pneumonoultramicroscopicsilicovolcanoconiosis" * 5, "0123456789" * 12,
    "aGVsbG8gd29ybGQgdGhpcyBpcyBiYXNlNjQgZW5jb2RlZCB0ZXh0IHdpdGggbm8gc3BhY2VzIGF0IGFsbA" * 2,
]
POOLS = [ENGLISH, CODE, CJK, EMOJI, COMBINING, WHITESPACE, CONTRACTIONS, DIGITS, SPECIAL, PUNCT, URLS, WEIRD,
         LONG]
SEPARATORS = ["", " ", " ", "\n", "\t", "  ", "\r\n", "\n\n", " \n"]


def texts(seed, n_random, long_chars):
    """Every hand-written fragment, then n_random seeded mixtures, then one long text."""
    rng = random.Random(seed)
    out = [""]
    for pool in POOLS:
        out.extend(pool)
    every = [t for pool in POOLS for t in pool]
    for _ in range(n_random):
        k = rng.randint(2, 10)
        parts = []
        for _ in range(k):
            parts.append(rng.choice(rng.choice(POOLS)))
            parts.append(rng.choice(SEPARATORS))
        out.append("".join(parts))
    if long_chars:
        parts, size = [], 0
        while size < long_chars:
            t = rng.choice(every) + rng.choice(SEPARATORS)
            parts.append(t)
            size += len(t)
        out.append("".join(parts))
    return out


def decode_cases(tok, seed, n):
    """Id sequences that cut multi-byte characters, plus random ids: checks lossy UTF-8 repair."""
    rng = random.Random(seed)
    cases = []
    src = "".join(EMOJI + CJK + COMBINING + WEIRD)
    ids = tok.encode(src, add_special_tokens=False).ids
    for _ in range(n):
        a = rng.randrange(len(ids))
        b = min(len(ids), a + rng.randint(1, 6))
        cases.append(ids[a:b])
    size = tok.get_vocab_size(with_added_tokens=True)
    for _ in range(n):
        cases.append([rng.randrange(size) for _ in range(rng.randint(1, 8))])
    return [{"decode_ids": c, "decoded": tok.decode(c, skip_special_tokens=False),
             "decoded_skip": tok.decode(c, skip_special_tokens=True)} for c in cases]


def write_cases(tok, path, items, n_decode, with_special=False):
    plain = Tokenizer.from_str(tok.to_str())
    plain.encode_special_tokens = True
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for text in items:
            ids = tok.encode(text, add_special_tokens=False).ids
            row = {"text": text, "ids": ids,
                   "decoded": tok.decode(ids, skip_special_tokens=False),
                   "decoded_skip": tok.decode(ids, skip_special_tokens=True)}
            ids_plain = plain.encode(text, add_special_tokens=False).ids
            if ids_plain != ids:
                row["ids_plain"] = ids_plain
            if with_special:
                row["ids_special"] = tok.encode(text, add_special_tokens=True).ids
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
        for row in decode_cases(tok, 7, n_decode):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {path}: {len(items)} texts, {os.path.getsize(path)} bytes")


def gpt2_tokenizer(shared):
    """The construction the C++ Tokenizer::from_gpt2_files mirrors."""
    d = os.path.join(shared, "gpt2")
    bpe = models.BPE.from_file(os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe"))
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=True)])
    return tok


def legacy_merges(tokenizer_json):
    """Rewrites merges into the older "a b" string form, which loaders must also accept."""
    d = json.loads(tokenizer_json)
    d["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in d["model"]["merges"]]
    return json.dumps(d, ensure_ascii=False, indent=1)


def tiny_bytelevel(corpus):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFC()])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    tok.add_special_tokens([AddedToken("<sep>", special=True, normalized=False),
                            AddedToken("[MASK]", special=True, lstrip=True, rstrip=True, normalized=False)])
    tok.add_tokens([AddedToken("word", single_word=True, normalized=True),
                    AddedToken("cafe\u0301", normalized=True),  # matched after NFC, as "café"
                    AddedToken("<|user|>", normalized=False)])
    return Tokenizer.from_str(legacy_merges(tok.to_str()))


def tiny_split(corpus):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"),
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[.,!?;:]"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"[aeiou]+"), behavior="isolated", invert=True),
    ])
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False)
    tok.train_from_iterator(corpus[: len(corpus) // 2], trainer)  # leaves some characters unknown
    tok.add_special_tokens([AddedToken("<|user|>", special=True, rstrip=True, normalized=False)])
    return tok


# ---- SentencePiece-style BPE (Gemma, Llama 2, Mistral) -------------------------------------

SPM_SPECIAL = [
    "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<pad>", "<unk>", "<s>", "</s>", "<h1>",
    "<bos>hello", "<bos> hello", "<bos>  two spaces", "hi<bos>there", " <bos> ", "<bos><bos>",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
    "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn", "<<end_of_turn>>", "text<eos>more", "<s>[INST] hi [/INST]", "<h1>Title</h1>",
    "<0x41>", "<0xE4><0xB8>", "\u2581", "\u2581\u2581word", "a\u2581b c",
]
# Characters the tiny vocabularies do not have: byte fallback (or <unk>) must handle them.
SPM_RARE = [
    "\u0100\u0101\u0102", "\U0001F9EA test tube", "\u4e42\u4e43\u4e44", "\u00ff\u00fe", "\U0001D11E music",
    "tab\there", "\u0000\u0001\u0002", "\u00e9t\u00e9 \u00e0 Paris", "\u00f1and\u00fa", "\u0416\u0436",
]


def spm_texts(seed):
    out = texts(seed, 80, 3000)
    return out[:1] + SPM_SPECIAL + SPM_RARE + out[1:]


def spm_tokenizer(corpus, specials, normalizer, pre_tokenizer, decoder,
                  missing_bytes=(), fuse_unk=True, ignore_merges=False, bos="<bos>", extra_added=()):
    """Trains a small BPE and lays its vocab out as SentencePiece conversions do: the special
    tokens first, then <0x00>..<0xFF> (less `missing_bytes`), then the learned pieces."""
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer = normalizers.Replace(" ", "\u2581")
    # Words with their leading "\u2581", and runs of "\u2581" on their own, as SentencePiece pieces.
    trainer_tok.pre_tokenizer = pre_tokenizers.Split(Regex("\u2581?[^\u2581]+|\u2581+"), behavior="isolated")
    trainer = trainers.BpeTrainer(vocab_size=1200, limit_alphabet=120, show_progress=False)
    trainer_tok.train_from_iterator(corpus, trainer)
    learned = json.loads(trainer_tok.to_str())["model"]
    vocab = {}
    for t in specials:
        vocab[t] = len(vocab)
    for b in range(256):
        if b not in missing_bytes:
            vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": None,
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": fuse_unk, "byte_fallback": True,
                  "ignore_merges": ignore_merges, "vocab": vocab, "merges": learned["merges"]},
    }
    tok = Tokenizer.from_str(json.dumps(doc))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in extra_added])
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    return tok


def replace(pattern, content):
    return {"type": "Replace", "pattern": {"String": pattern}, "content": content}


SPM_DECODE = [replace("\u2581", " "), {"type": "ByteFallback"}, {"type": "Fuse"}]
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
LLAMA_SPECIALS = ["<unk>", "<s>", "</s>"]


def spm_fixtures(corpus):
    strip = {"type": "Strip", "content": " ", "start": 1, "stop": 0}
    return [
        ("tiny_gemma", spm_tokenizer(corpus, GEMMA_SPECIALS, replace(" ", "\u2581"), None,
                                     {"type": "Sequence", "decoders": SPM_DECODE}, extra_added=["<h1>"])),
        ("tiny_llama2", spm_tokenizer(  # written with "a b" merges, as Llama 2's file has them
            corpus, LLAMA_SPECIALS,
            {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, replace(" ", "\u2581")]},
            None, {"type": "Sequence", "decoders": SPM_DECODE + [strip]}, bos="<s>")),
        ("tiny_metaspace", spm_tokenizer(
            corpus, LLAMA_SPECIALS, None,
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
            {"type": "Sequence", "decoders": SPM_DECODE + [strip]}, bos="<s>",
            missing_bytes=set(range(0x80, 0x90)) | {0xF0})),
        ("tiny_metaspace_always", spm_tokenizer(
            corpus, GEMMA_SPECIALS, None,
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
            {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                                              {"type": "Metaspace", "replacement": "\u2581",
                                               "prepend_scheme": "always", "split": True}]},
            missing_bytes=set(range(0xE0, 0xF0)), fuse_unk=False, ignore_merges=True)),
    ]


def write_versions():
    with open(os.path.join(OUT, "VERSIONS.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump({"tokenizers": tokenizers.__version__, "written_by": "tools/tokenizer_fixtures.py"}, f, indent=2)
        f.write("\n")


def metaspace(scheme, split):
    return {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}


# Other component layouts on tiny_gemma.json's vocabulary: each replaces these top-level fields.
SPM_VARIANTS = {
    # Gemma with a Split on " " as well (a no-op after the Replace; some Gemma files carry it).
    "split_space": {"pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                                      "invert": False}},
    "metaspace_first_split": {"normalizer": None, "pre_tokenizer": metaspace("first", True),
                              "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                                                                           metaspace("first", True)]}},
    "metaspace_never": {"normalizer": None, "pre_tokenizer": metaspace("never", True),
                        "decoder": metaspace("never", True)},
    # The older spelling: add_prefix_space instead of prepend_scheme.
    "metaspace_add_prefix_space": {
        "normalizer": None, "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}},
    "split_then_metaspace": {
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": False},
            metaspace("first", False)]},
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, metaspace("first", True), {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 0, "stop": 2}]}},
    "normalizer_sequence": {
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, replace(" ", "\u2581"),
                                                           {"type": "Prepend", "prepend": "\u2581"}, replace("ab", "b")]},
        "decoder": {"type": "Sequence", "decoders": [replace("\u2581", " "), {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 3, "stop": 0}]}},
}


def write_spm_variants(seed):
    """tiny_gemma_variants.jsonl: {"variant", "changes"} once per variant, then its cases; "decoded"
    is null where the library's Strip panics (its start and stop cuts overlap)."""
    base = json.load(open(os.path.join(OUT, "tiny_gemma.json"), encoding="utf-8"))
    items = spm_texts(seed)[:100]
    path = os.path.join(OUT, "tiny_gemma_variants.jsonl")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for name, changes in SPM_VARIANTS.items():
            doc = dict(base, **changes)
            tok = Tokenizer.from_str(json.dumps(doc))
            f.write(json.dumps({"variant": name, "changes": changes}, ensure_ascii=False) + "\n")
            for text in items:
                ids = tok.encode(text, add_special_tokens=False).ids
                try:
                    decoded = tok.decode(ids, skip_special_tokens=False)
                except BaseException:  # pyo3's PanicException
                    decoded = None
                f.write(json.dumps({"variant": name, "text": text, "ids": ids, "decoded": decoded},
                                   ensure_ascii=False) + "\n")
    print(f"wrote {path}: {len(SPM_VARIANTS)} variants x {len(items)} texts, {os.path.getsize(path)} bytes")


# ---- Generated compositions: every component type, in Sequences ---------------------------

def _split(pattern, behavior, invert=False, regex=False):
    return {"type": "Split", "pattern": {"Regex" if regex else "String": pattern}, "behavior": behavior,
            "invert": invert}


BEHAVIORS = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]


def random_normalizer(rng):
    c = rng.choice(["NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "StripAccents", "ReplaceString",
                    "ReplaceRegex", "Prepend", "BertNormalizer", "Nmt", "ByteLevel"])
    if c == "Strip":
        return {"type": "Strip", "strip_left": rng.random() < 0.7, "strip_right": rng.random() < 0.7}
    if c == "ReplaceString":
        return replace(rng.choice([" ", "e", "\u2581", "ab", "\n"]), rng.choice(["\u2581", "", "E", "  "]))
    if c == "ReplaceRegex":
        return {"type": "Replace", "pattern": {"Regex": rng.choice([r"\s+", r"[0-9]", r"(?i)the", r"\p{P}+", r"o+"])},
                "content": rng.choice([" ", "", "#", "\u2581"])}
    if c == "Prepend":
        return {"type": "Prepend", "prepend": rng.choice(["\u2581", "> "])}
    if c == "BertNormalizer":
        return {"type": "BertNormalizer", "clean_text": rng.random() < 0.7, "handle_chinese_chars": rng.random() < 0.5,
                "strip_accents": rng.choice([None, True, False]), "lowercase": rng.random() < 0.5}
    return {"type": c}


def random_pre_tokenizer(rng):
    c = rng.choice(["ByteLevel", "Metaspace", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits",
                    "CharDelimiterSplit", "BertPreTokenizer", "UnicodeScripts", "FixedLength", "SplitString",
                    "SplitRegex"])
    if c == "ByteLevel":
        return {"type": "ByteLevel", "add_prefix_space": rng.random() < 0.5, "trim_offsets": True,
                "use_regex": rng.random() < 0.7}
    if c == "Metaspace":
        return metaspace(rng.choice(["always", "first", "never"]), rng.random() < 0.5)
    if c == "Punctuation":
        return {"type": "Punctuation", "behavior": rng.choice(BEHAVIORS)}
    if c == "Digits":
        return {"type": "Digits", "individual_digits": rng.random() < 0.5}
    if c == "CharDelimiterSplit":
        return {"type": "CharDelimiterSplit", "delimiter": rng.choice([" ", "e", "\u2581", "\u3002"])}
    if c == "FixedLength":
        return {"type": "FixedLength", "length": rng.randint(1, 6)}
    if c == "SplitString":
        return _split(rng.choice([" ", "e", ", ", "\n"]), rng.choice(BEHAVIORS), rng.random() < 0.3)
    if c == "SplitRegex":
        return _split(rng.choice([r"\s+", r"\p{L}+", r"[aeiou]", r"\d", r"'s|'t|\p{N}{1,3}"]), rng.choice(BEHAVIORS),
                      rng.random() < 0.3, regex=True)
    return {"type": c}


def random_decoder(rng):
    c = rng.choice(["ByteLevel", "ByteFallback", "Fuse", "ReplaceString", "ReplaceRegex", "Strip", "Metaspace",
                    "WordPiece", "BPEDecoder", "CTC"])
    if c == "ByteLevel":
        return {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    if c == "ReplaceString":
        return replace(rng.choice(["\u2581", "\u0120", "e", "##"]), rng.choice([" ", "", "E"]))
    if c == "ReplaceRegex":
        return {"type": "Replace", "pattern": {"Regex": rng.choice([r"\s+", r"\u2581+", r"[0-9]"])},
                "content": rng.choice([" ", "", "_"])}
    if c == "Strip":
        return {"type": "Strip", "content": rng.choice([" ", "\u2581", "e"]), "start": rng.randint(0, 2),
                "stop": rng.randint(0, 1)}
    if c == "Metaspace":
        return metaspace(rng.choice(["always", "first", "never"]), True)
    if c == "WordPiece":
        return {"type": "WordPiece", "prefix": rng.choice(["##", "\u0120", ""]), "cleanup": rng.random() < 0.6}
    if c == "BPEDecoder":
        return {"type": "BPEDecoder", "suffix": rng.choice(["</w>", "\u2581", "e"])}
    if c == "CTC":
        return {"type": "CTC", "pad_token": rng.choice(["<pad>", "e", "<0x20>"]),
                "word_delimiter_token": rng.choice(["|", "\u2581", "\u0120"]), "cleanup": rng.random() < 0.6}
    return {"type": c}


def random_post_processor(rng, specials):
    a, b = specials
    ids = {t: i for t, i in specials.items()} if isinstance(specials, dict) else None
    c = rng.choice(["ByteLevel", "TemplateProcessing", "RobertaProcessing", "BertProcessing", "Sequence", None])
    if c == "ByteLevel":
        return {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    if c == "TemplateProcessing":
        return json.loads(processors.TemplateProcessing(single=f"{a[0]} $A", pair=f"{a[0]} $A {b[0]} $B:1",
                                                        special_tokens=[a, b]).__getstate__())
    if c == "RobertaProcessing":
        return {"type": "RobertaProcessing", "sep": list(b), "cls": list(a), "trim_offsets": True,
                "add_prefix_space": True}
    if c == "BertProcessing":
        return {"type": "BertProcessing", "sep": list(b), "cls": list(a)}
    if c == "Sequence":
        return {"type": "Sequence", "processors": [random_post_processor(rng, specials) or
                                                   {"type": "BertProcessing", "sep": list(b), "cls": list(a)}
                                                   for _ in range(rng.randint(1, 2))]}
    return None


def streambp_refuses(changes):
    """The combinations streambp refuses at load (docs/TOKENIZER.md, "Metaspace first"), which the
    composition test checks separately: a Metaspace with prepend_scheme "first" together with a
    normalizer that deletes characters, after another pre-tokenizer when there is a normalizer, or
    after a ByteLevel."""
    def parts(x, key):
        return [] if x is None else (x[key] if x["type"] == "Sequence" else [x])
    norms = parts(changes.get("normalizer"), "normalizers")
    pres = parts(changes.get("pre_tokenizer"), "pretokenizers")
    deletes = any(n["type"] in ("StripAccents", "Nmt")
                  or (n["type"] == "Strip" and n["strip_left"])
                  or (n["type"] == "BertNormalizer" and (n["clean_text"] or
                                                         (n["strip_accents"] if n["strip_accents"] is not None
                                                          else n["lowercase"])))
                  or (n["type"] == "Replace" and n["content"] == "") for n in norms)
    for i, p in enumerate(pres):
        if p["type"] == "Metaspace" and p["prepend_scheme"] == "first" and (
                deletes or (i > 0 and norms) or any(q["type"] == "ByteLevel" for q in pres[:i])):
            return True
    return False


def stage(rng, make, key, n_max):
    """None, one component, or a Sequence of up to n_max (sometimes one)."""
    r = rng.random()
    if r < 0.15:
        return None
    if r < 0.45:
        return make(rng)
    return {"type": "Sequence", key: [make(rng) for _ in range(rng.randint(1, n_max))]}


GGUF_DECODER = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}, replace("\u2581", " "),
                                                 {"type": "ByteLevel", "add_prefix_space": True,
                                                  "trim_offsets": True, "use_regex": True}]}


def systematic_compositions():
    """Each component type once on its own (on both bases), and the GGUF conversion's decoder."""
    rng = random.Random(11)
    out = [("gguf_decoder_gemma", "tiny_gemma", {"decoder": GGUF_DECODER}),
           ("gguf_decoder_bytelevel", "tiny_bytelevel", {"decoder": GGUF_DECODER}),
           ("gguf_llama", "tiny_gemma", {"normalizer": None, "pre_tokenizer": metaspace("first", False),
                                         "decoder": GGUF_DECODER})]
    for i, make in enumerate([random_normalizer, random_pre_tokenizer, random_decoder]):
        key = ["normalizer", "pre_tokenizer", "decoder"][i]
        seen = set()
        for _ in range(400):
            part = make(rng)
            kind = part["type"] + ("Regex" if "Regex" in part.get("pattern", {}) else "")
            if kind in seen:
                continue
            seen.add(kind)
            base = ["tiny_gemma", "tiny_bytelevel"][len(seen) % 2]
            out.append((f"{key}_{kind}", base, {key: part}))
    return out


def composition_digest(ids, decoded, decoded_skip):
    """FNV-1a over the ids (int32 little-endian), a 0xFF byte, decoded, a 0xFF byte, decoded_skip;
    folded to 32 bits. tests/data/tokenizer_compositions_test.cpp computes the same."""
    h = 0xCBF29CE484222325
    data = b"".join(i.to_bytes(4, "little", signed=True) for i in ids)
    data += b"\xff" + decoded.encode("utf-8") + b"\xff" + decoded_skip.encode("utf-8")
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{(h >> 32) ^ (h & 0xFFFFFFFF):08x}"


def composition_texts(seed):
    rng = random.Random(seed)
    out = [""] + [t for pool in POOLS[:-1] for t in pool] + SPM_SPECIAL + SPM_RARE + rng.sample(LONG, 3)
    every = [t for pool in POOLS[:-1] for t in pool]
    for _ in range(80):
        out.append("".join(rng.choice(every) + rng.choice(SEPARATORS) for _ in range(rng.randint(2, 6))))
    return out


def write_compositions(n_random, seed=12):
    """compositions.jsonl: the texts, then one line per composition of tiny_bytelevel.json's or
    tiny_gemma.json's vocabulary with other normalizer / pre_tokenizer / decoder / post_processor
    fields: the changed fields and, per text, the digest of the library's ids and decodes."""
    bases = {name: json.load(open(os.path.join(OUT, name + ".json"), encoding="utf-8"))
             for name in ("tiny_bytelevel", "tiny_gemma")}
    specials = {"tiny_bytelevel": (("<sep>", bases["tiny_bytelevel"]["added_tokens"][0]["id"]),
                                   ("[MASK]", bases["tiny_bytelevel"]["added_tokens"][1]["id"])),
                "tiny_gemma": (("<bos>", 2), ("<eos>", 1))}
    items = composition_texts(seed)
    rng = random.Random(seed)
    comps = systematic_compositions()
    while len(comps) < len(systematic_compositions()) + n_random:
        base = rng.choice(list(bases))
        changes = {"normalizer": stage(rng, random_normalizer, "normalizers", 3),
                   "pre_tokenizer": stage(rng, random_pre_tokenizer, "pretokenizers", 3),
                   "decoder": stage(rng, random_decoder, "decoders", 4),
                   "post_processor": random_post_processor(rng, specials[base])}
        if streambp_refuses(changes):
            continue
        comps.append((f"random_{len(comps)}", base, changes))
    path = os.path.join(OUT, "compositions.jsonl")
    skipped = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps({"texts": items}, ensure_ascii=False) + "\n")
        for name, base, changes in comps:
            tok = Tokenizer.from_str(json.dumps(dict(bases[base], **changes)))
            digests = []
            try:
                for text in items:
                    ids = tok.encode(text, add_special_tokens=False).ids
                    digests.append(composition_digest(ids, tok.decode(ids, skip_special_tokens=False),
                                                      tok.decode(ids, skip_special_tokens=True)))
            except BaseException as e:  # pyo3's PanicException (Strip cuts that overlap)
                print(f"  skipped {name}: the library fails: {str(e)[:80]}")
                skipped += 1
                continue
            f.write(json.dumps({"name": name, "base": base, "changes": changes, "digests": "".join(digests)},
                               ensure_ascii=False) + "\n")
    print(f"wrote {path}: {len(comps) - skipped} compositions x {len(items)} texts, {os.path.getsize(path)} bytes")


def write_spm_fixtures():
    write_versions()
    corpus = texts(3, 400, 0)
    for name, tok in spm_fixtures(corpus):
        path = os.path.join(OUT, name + ".json")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(legacy_merges(tok.to_str()) if name == "tiny_llama2" else tok.to_str())
        print(f"wrote {path}: {os.path.getsize(path)} bytes")
        tok = Tokenizer.from_file(path)  # the cases come from the file as written
        write_cases(tok, os.path.join(OUT, name + "_cases.jsonl"), spm_texts(5), 20, with_special=True)
    write_spm_variants(6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "shared", "tokenizers"))
    ap.add_argument("--only", choices=["spm", "compositions"],
                    help="write only the SentencePiece-style fixtures, or only compositions.jsonl")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if args.only == "spm":
        write_spm_fixtures()
        write_compositions(40)
        return
    if args.only == "compositions":
        write_compositions(40)
        return

    qwen = Tokenizer.from_file(os.path.join(args.shared, "qwen3", "tokenizer.json"))
    write_cases(qwen, os.path.join(OUT, "qwen3_cases.jsonl"), texts(1, 220, 20000), 40)
    write_cases(gpt2_tokenizer(args.shared), os.path.join(OUT, "gpt2_cases.jsonl"), texts(2, 160, 20000), 40)

    corpus = texts(3, 400, 0)
    for name, tok in [("tiny_bytelevel", tiny_bytelevel(corpus)), ("tiny_split", tiny_split(corpus))]:
        path = os.path.join(OUT, name + ".json")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(legacy_merges(tok.to_str()) if name == "tiny_bytelevel" else tok.to_str(pretty=True))
        print(f"wrote {path}: {os.path.getsize(path)} bytes")
        write_cases(tok, os.path.join(OUT, name + "_cases.jsonl"), texts(4, 80, 3000), 20)
    write_spm_fixtures()
    write_compositions(40)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the tokenizer fixtures in tests/fixtures/tokenizer/ with the Hugging Face `tokenizers`
library, so the C++ tokenizer can be checked id for id without Python in CI.

    pip install -r tools/requirements-tokenizer.txt
    python3 tools/tokenizer_fixtures.py [--shared ../shared/tokenizers]

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

Each *_cases.jsonl line is one of
  {"text": T, "ids": [...], "decoded": D, "decoded_skip": S [, "ids_plain": [...]]}
      ids = encode(T, add_special_tokens=False).ids; D/S = decode(ids, skip_special_tokens=F/T);
      ids_plain (present only when it differs from ids) = the same with encode_special_tokens=True
  {"decode_ids": [...], "decoded": D, "decoded_skip": S}
      arbitrary id sequences (cut multi-byte characters), checking the lossy UTF-8 repair.
"""
import argparse
import json
import os
import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

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


def write_cases(tok, path, items, n_decode):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "shared", "tokenizers"))
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)

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


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the libFuzzer seed corpus (fuzz/corpus/<harness>/) from the repository's own examples
and fixtures, plus a few hand-made valid files. Run from the repository root; the output is
committed, so CI does not need this script (it is kept to say where each seed came from)."""
import json
import os
import struct

ROOT = os.getcwd()
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, offset, blob = {}, 0, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blob += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blob


def f32(values):
    return struct.pack("<%df" % len(values), *values)


# safetensors: F32, BF16, F16 tensors, a scalar, metadata.
put("safetensors", "f32_pair", safetensors(
    [("a", "F32", [2, 3], f32(range(6))), ("b", "F32", [4], f32([1, 2, 3, 4]))],
    {"format": "pt"}))
put("safetensors", "bf16_f16", safetensors(
    [("w", "BF16", [2, 2], b"\x80\x3f" * 4), ("h", "F16", [3], b"\x00\x3c" * 3)]))
put("safetensors", "scalar", safetensors([("s", "F32", [], f32([7]))]))

# config.json: the example models and a Llama 3.1 shape with rope_scaling.
put("model_config", "tiny_chat", read("examples/tiny-chat/config.json"))
put("model_config", "llama31", json.dumps({
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 101,
    "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}))
put("model_config", "qwen2", json.dumps({
    "model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 50,
    "max_position_embeddings": 512, "torch_dtype": "bfloat16"}))

# tokenizer.json + text to encode.
texts = ["Hello world! <sep> café 123\n\tword  x", "日本語のテキスト 🙂 emoji\r\n  spaces   end",
         "def f(x):\n    return x ** 2  # [MASK] word"]
for fixture in ["tests/fixtures/tokenizer/tiny_bytelevel.json",
                "tests/fixtures/tokenizer/tiny_split.json", "examples/tiny-chat/tokenizer.json"]:
    base = os.path.splitext(os.path.basename(os.path.dirname(fixture) if fixture.startswith("examples") else fixture))[0]
    for i, t in enumerate(texts):
        put("tokenizer", "%s_%d" % (base, i), read(fixture) + b"\n#TEXT#\n" + t.encode())

# SentencePiece-style tokenizer.json (byte_fallback), one per layout the loader accepts, kept
# small: a few pieces, every <0xNN> byte token (some missing in the Metaspace ones, so <unk> is
# reached), merges as pairs and as "a b" strings.
def spm_tokenizer(normalizer, pre_tokenizer, decoder, missing=(), legacy=False):
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "<start_of_turn>": 4, "<end_of_turn>": 5}
    for b in range(256):
        if b not in missing:
            vocab["<0x%02X>" % b] = len(vocab)
    pieces = ["\u2581", "h", "e", "l", "o", "w", "r", "d", "\n", "he", "ll", "\u2581w", "hell", "hello",
              "\u2581wo", "\u2581\u2581"]
    merges = [["h", "e"], ["l", "l"], ["\u2581", "w"], ["he", "ll"], ["hell", "o"], ["\u2581w", "o"],
              ["\u2581", "\u2581"]]
    for p in pieces:
        vocab.setdefault(p, len(vocab))
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
             "vocab": vocab, "merges": [" ".join(m) for m in merges] if legacy else merges}
    added = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t in list(vocab)[:6]]
    return json.dumps({"version": "1.0", "added_tokens": added, "normalizer": normalizer,
                       "pre_tokenizer": pre_tokenizer, "post_processor": None, "decoder": decoder,
                       "model": model}, ensure_ascii=False)


replace_space = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
spm_decode = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
              {"type": "Fuse"}]
spm_seeds = {
    "spm_gemma": spm_tokenizer(replace_space, None, {"type": "Sequence", "decoders": spm_decode}),
    "spm_llama2": spm_tokenizer(
        {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, replace_space]}, None,
        {"type": "Sequence", "decoders": spm_decode + [{"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        legacy=True),
    "spm_metaspace_first": spm_tokenizer(
        None, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
        {"type": "Sequence", "decoders": spm_decode}, missing=range(0x80, 0x90)),
    "spm_metaspace_always": spm_tokenizer(
        None, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
        {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                                          {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                                           "split": True}]}, missing=range(0xE0, 0xF0)),
}
spm_texts = ["hello  world\n<start_of_turn>user\nhi<end_of_turn>", "\u65e5\u672c \U0001F642 <0x41> \u2581x  "]
for name, doc in spm_seeds.items():
    for i, t in enumerate(spm_texts):
        put("tokenizer", "%s_%d" % (name, i), doc.encode() + b"\n#TEXT#\n" + t.encode())

# tokenizer_config.json of every chat family the trainer recognises.
for family in ["chatml", "llama3_0", "llama3_1", "qwen2_5", "qwen3", "gemma3"]:
    put("tokenizer_config", family, read("tests/fixtures/chat/%s/tokenizer_config.json" % family))
put("tokenizer_config", "tiny_chat", read("examples/tiny-chat/tokenizer_config.json"))

# JSONL data of every schema; the first byte picks the chat template and truncation.
for i, name in enumerate(["sft_messages", "sft_prompt_completion", "sft_text", "dpo", "grpo"]):
    lines = read("examples/data/%s.jsonl" % name).splitlines(keepends=True)[:4]
    put("dataset", name, bytes([i * 5 % 256]) + b"".join(lines))
# Bit 0x20 of the first byte picks Gemma's template.
put("dataset", "sft_messages_gemma",
    bytes([0x20]) + b"".join(read("examples/data/sft_messages.jsonl").splitlines(keepends=True)[:4]))

# Trainer YAML + overrides.
for name in ["sft", "dpo", "grpo", "ppo", "demo"]:
    put("train_config", name, read("examples/%s.yaml" % name))
put("train_config", "tiny_chat_overrides",
    read("examples/tiny-chat/sft.yaml") +
    b"\n#OVERRIDES#\nepochs=2\noptim.lr=3e-4\nlayer_chunk=auto\ndata.shuffle=false")

# trainer_state.json as the trainer writes it (train/checkpoint.cpp TrainerState::to_json).
state = {"format": "streambp-trainer-state", "version": 1, "step": 2, "total_steps": 6,
         "epoch": 0, "micro_batches_done": 2,
         "epoch_rng_state": [11400714819323198485, 7, 42, 3], "tokens_seen": 700,
         "skipped_steps": 0, "ranks": 1, "config_hash": "0123456789abcdef",
         "data_files": {"train": {"path": "train.jsonl", "bytes": 14365,
                                  "fnv1a64": "0123456789abcdef"}},
         "config": {"objective": "sft", "seed": 42}}
put("trainer_state", "step2", json.dumps(state, indent=2))

# optimizer.safetensors for the harness's two parameters a (6) and b (4).
put("optimizer_state", "whole", safetensors(
    [("m.a", "F32", [2, 3], f32([0.1] * 6)), ("m.b", "F32", [4], f32([0.2] * 4)),
     ("v.a", "F32", [2, 3], f32([0.01] * 6)), ("v.b", "F32", [4], f32([0.02] * 4))],
    {"step": "3"}))

# Prompt records (generate, online GRPO/PPO): first byte bit 0 = no tokenizer, bits 1-7 = vocab.
arith = read("examples/tiny-chat/arith_prompts.jsonl").split(b"\n")
put("prompt_records", "arith_chat", b"\x00" + b"\n".join(arith[:4]) + b"\n")
put("prompt_records", "text", b'\x02{"prompt": "What is 1 plus 1?", "answer": "2"}\n'
    b'{"prompt": "hi", "meta": {"k": [1, 2, {"x": null}]}}\n')
put("prompt_records", "messages", b'\x00{"messages": [{"role": "system", "content": "Be brief."}, '
    b'{"role": "user", "content": "What is 3 plus 4?"}], "answer": 7}\n')
put("prompt_records", "ids_no_tokenizer",
    b'\x11{"prompt_ids": [1, 2, 3], "answer": "x"}\n\n{"prompt_ids": [0], "tests": ["a", "b"]}\n')
put("prompt_records", "deep_field", b'\x00{"prompt": "a", "x": ' + b"[" * 300 + b"]" * 300 + b"}\n")

# A reward program's answer lines.
put("reward_protocol", "plain", b'{"reward": 1.0}\n{"reward": -0.5, "info": "x"}\n{"reward": 0}\n')
put("reward_protocol", "bad", b'{"reward": "1"}\n{"reward": 1e999}\nreward = 1\n[1]\n{}\n')
put("reward_protocol", "deep", b'{"reward": 1, "x": ' + b"[" * 300 + b"]" * 300 + b"}\n")

# GGUF (fuzz_gguf): a tiny llama with F32 / F16 / Q8_0 / Q4_K tensors and a byte-level tokenizer,
# serialised by hand as llama.cpp lays files out (v3, 32-byte alignment), and a metadata-only one.
def gguf(kv, tensors, version=3):
    """kv: list of (key, encoded type+value); tensors: list of (name, ne list, type, raw bytes)."""
    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x
    b = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
    for k, v in kv:
        b += s(k) + v
    off, blob = 0, b""
    for name, ne, typ, raw in tensors:
        b += s(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        b += struct.pack("<IQ", typ, off)
        pad = (32 - len(raw) % 32) % 32
        blob += raw + b"\0" * pad
        off += len(raw) + pad
    b += b"\0" * ((32 - len(b) % 32) % 32)
    return b + blob


def g_u32(v):
    return struct.pack("<II", 4, v)


def g_f32(v):
    return struct.pack("<If", 6, v)


def g_str(x):
    x = x.encode()
    return struct.pack("<IQ", 8, len(x)) + x


def g_strs(xs):
    out = struct.pack("<IIQ", 9, 8, len(xs))
    for x in xs:
        x = x.encode()
        out += struct.pack("<Q", len(x)) + x
    return out


llama_kv = [("general.architecture", g_str("llama")), ("llama.context_length", g_u32(64)),
            ("llama.embedding_length", g_u32(32)), ("llama.block_count", g_u32(1)),
            ("llama.feed_forward_length", g_u32(32)), ("llama.attention.head_count", g_u32(2)),
            ("llama.attention.head_count_kv", g_u32(1)),
            ("llama.attention.layer_norm_rms_epsilon", g_f32(1e-5)),
            ("tokenizer.ggml.model", g_str("gpt2")),
            ("tokenizer.ggml.tokens", g_strs(["a", "b", "ab", "<s>"])),
            ("tokenizer.ggml.merges", g_strs(["a b"])),
            ("tokenizer.ggml.token_type", struct.pack("<IIQ4i", 9, 5, 4, 1, 1, 1, 3)),
            ("tokenizer.ggml.eos_token_id", g_u32(3))]
q8 = (struct.pack("<e", 0.01) + bytes(range(32))) * 4  # Q8_0: 4 blocks
q4k = struct.pack("<ee", 0.001, 0.002) + bytes(range(12)) + bytes(range(128))  # Q4_K: 1 block
put("gguf", "llama_mixed", gguf(llama_kv, [
    ("token_embd.weight", [32, 4], 8, q8), ("blk.0.attn_norm.weight", [32], 0, f32([1.0] * 32)),
    ("blk.0.attn_q.weight", [32, 32], 1, b"\0\x3c" * 1024),
    ("blk.0.ffn_down.weight", [256, 1], 12, q4k)]))
put("gguf", "metadata_only", gguf([("general.alignment", g_u32(64)),
                                   ("x.f64", struct.pack("<Id", 12, 0.5)),
                                   ("x.bool", struct.pack("<IB", 7, 1))], [], version=2))

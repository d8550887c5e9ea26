#!/usr/bin/env python3
"""Writes the GGUF fixtures in tests/fixtures/gguf/ with the `gguf` package (llama.cpp's own
Python library), so the C++ reader, dequantizer and converter are checked against it without
Python in CI.

    pip install -r tools/requirements-gguf.txt
    python3 tools/gguf_fixtures.py

Outputs:
  quants.json        per type, random blocks and gguf.quants.dequantize()'s fp32 values
                     (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), and for F16, BF16,
                     Q8_0 fp32 inputs and gguf.quants.quantize()'s bytes. Hex strings,
                     little-endian. Scale fields are finite f16 values (random bytes would make
                     NaN scales, whose payloads numpy and C need not agree on); F16 values have
                     no NaN for the same reason.
  tiny_llama.gguf    a tiny random llama (2 layers, d 32, 2 heads, 1 kv head, head_dim 16,
                     F 256, vocab 289, untied output) written by gguf.GGUFWriter as llama.cpp's
                     converter writes one: q/k rows permuted, tensors in Q8_0, Q4_0, Q4_1, F16,
                     BF16, F32, and random Q4_K / Q6_K blocks for the two ffn_down; a byte-level
                     BPE tokenizer (tokenizer.ggml.pre "smollm", ChatML control tokens, merges),
                     a ChatML chat template.
  tiny_llama_hf/     its Hugging Face twin, written here independently of the C++ converter:
                     config.json, model.safetensors holding gguf's dequantization of every tensor
                     with the q/k rows put back in HF order, tokenizer.json (Digits + ByteLevel,
                     as SmolLM2 ships it) and tokenizer_config.json.
  tiny_spm.gguf      a one-layer llama (F16 tensors) with a SentencePiece tokenizer
                     (tokenizer.ggml.model "llama": tokens, scores, token types, <0xNN> bytes,
                     no merges); tools/gguf_spm_cases.py writes tiny_spm_cases.jsonl from
                     transformers' conversion of it.
  VERSIONS.json      the gguf and numpy versions that wrote them.
"""
import json
import os
import struct

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "gguf")

rng = np.random.default_rng(20261204)


def merge_pair(words, best):
    """Every word (a tuple of symbols -> count) with each occurrence of the pair `best` joined."""
    new = {}
    for w, c in words.items():
        out, i = [], 0
        while i < len(w):
            if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                out.append(w[i] + w[i + 1])
                i += 2
            else:
                out.append(w[i])
                i += 1
        new[tuple(out)] = c
    return new


def hexs(a):
    return np.ascontiguousarray(a).tobytes().hex()


def f16_bytes(values):
    return np.asarray(values, dtype=np.float32).astype(np.float16).view(np.uint8).reshape(-1, 2)


# ---- block formats -------------------------------------------------------------------------

# byte offsets of the f16 scale fields inside one block, by type
F16_FIELDS = {T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q4_K: [0, 2], T.Q5_K: [0, 2],
              T.Q6_K: [208]}


def random_blocks(qtype, n_blocks, scale=0.05):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = f16_bytes(rng.normal(0, scale, size=n_blocks))
    return raw


def dequant_cases():
    cases = {}
    # F32 / BF16: any bits; F16: any bits but NaN (payload conversion is not specified).
    f32 = rng.normal(0, 3, size=512).astype(np.float32)
    f32[:4] = [np.inf, -np.inf, 0.0, -0.0]
    cases["F32"] = (f32.view(np.uint8), dequantize(f32.view(np.uint8), T.F32))
    h = rng.integers(0, 65536, size=512, dtype=np.uint32).astype(np.uint16)
    h = np.where((h & 0x7C00) == 0x7C00, h & 0x83FF, h).astype(np.uint16)  # no NaN/inf
    h[:6] = [0x7C00, 0xFC00, 0x0001, 0x8001, 0x03FF, 0x7BFF]  # inf, -inf, subnormals, max
    cases["F16"] = (h.view(np.uint8), dequantize(h.view(np.float16), T.F16))
    b = rng.integers(0, 65536, size=512, dtype=np.uint32).astype(np.uint16)
    cases["BF16"] = (b.view(np.uint8), dequantize(b.view(np.uint8), T.BF16))
    for qtype, n in [(T.Q8_0, 32), (T.Q4_0, 32), (T.Q4_1, 32), (T.Q4_K, 4), (T.Q5_K, 4),
                     (T.Q6_K, 4)]:
        raw = random_blocks(qtype, n)
        cases[qtype.name] = (raw, dequantize(raw, qtype))
    out = {}
    for name, (raw, values) in cases.items():
        values = np.asarray(values, dtype=np.float32).reshape(-1)
        out[name] = {"bytes": hexs(raw), "values": hexs(values), "n": int(values.size)}
    return out


def quant_cases():
    out = {}
    x = rng.normal(0, 1, size=1024).astype(np.float32) * np.float32(1000)
    x[:16] = [65504, 65519.99, 65520, -65520, 1e-8, 5.96e-8, 2.98e-8, -2.98e-8, 1e-5, 6.1e-5,
              np.inf, -np.inf, np.nan, 0.0, -0.0, 0.33333334]
    x[16:512] *= np.float32(1e-6)  # the subnormal range
    out["F16"] = {"values": hexs(x), "bytes": hexs(quantize(x, T.F16).view(np.uint8)),
                  "n": int(x.size)}
    bits = rng.integers(0, 2**32, size=1024, dtype=np.uint64).astype(np.uint32)
    bits[:4] = [0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x7FC00001]  # ties to even, max, a NaN
    xb = bits.view(np.float32)
    out["BF16"] = {"values": hexs(xb), "bytes": hexs(quantize(xb, T.BF16)), "n": int(xb.size)}
    q = (rng.normal(0, 1, size=(32, 32)) * np.exp(rng.normal(0, 3, size=(32, 1)))).astype(np.float32)
    q[0] = 0.0                                             # d = 0
    q[1] = np.arange(-16, 16, dtype=np.float32) * np.float32(0.5)  # exact halves of id
    q = q.reshape(-1)
    out["Q8_0"] = {"values": hexs(q), "bytes": hexs(quantize(q.reshape(-1, 32), T.Q8_0)),
                   "n": int(q.size)}
    return out


# ---- a tiny llama and its Hugging Face twin --------------------------------------------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


TEXT = ("The quick brown fox jumps over the lazy dog. The capital of France is Paris. "
        "There are 12 months in a year and 365 days. She sells sea shells on the sea shore. ") * 4


def train_bpe(n_merges):
    """A tiny byte-level BPE trained on TEXT (GPT-2 style words: a leading space stays)."""
    b2u = bytes_to_unicode()
    vocab = [b2u[b] for b in range(256)]
    words = {}
    for i, w in enumerate(TEXT.split(" ")):
        w = (" " if i else "") + w
        if not w.strip() or any(c.isdigit() for c in w):
            continue
        key = tuple(b2u[b] for b in w.encode())
        words[key] = words.get(key, 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        vocab.append(best[0] + best[1])
        words = merge_pair(words, best)
    return vocab, merges


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def qk_hf_to_gguf_rows(n_rows, heads):
    """gguf_row_of[hf_row]: llama.cpp stores row (head, s, i) of HF at (head, i, s)."""
    h = n_rows // heads
    half = h // 2
    idx = np.empty(n_rows, dtype=np.int64)
    for head in range(heads):
        for s in range(2):
            for i in range(half):
                idx[head * h + s * half + i] = head * h + 2 * i + s
    return idx


def tiny_llama():
    d, F, L, H, G, hd, ctx = 32, 256, 2, 2, 1, 16, 256
    vocab, merges = train_bpe(30)
    tokens = vocab + SPECIALS
    V = len(tokens)
    hf = {}
    hf["model.embed_tokens.weight"] = rng.normal(0, 0.5, (V, d))
    for l in range(L):
        p = f"model.layers.{l}."
        hf[p + "input_layernorm.weight"] = 1 + 0.2 * rng.normal(size=d)
        hf[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.2, (H * hd, d))
        hf[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.2, (G * hd, d))
        hf[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.2, (G * hd, d))
        hf[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.2, (d, H * hd))
        hf[p + "post_attention_layernorm.weight"] = 1 + 0.2 * rng.normal(size=d)
        hf[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.2, (F, d))
        hf[p + "mlp.up_proj.weight"] = rng.normal(0, 0.2, (F, d))
        hf[p + "mlp.down_proj.weight"] = None  # random K-quant blocks below
    hf["model.norm.weight"] = 1 + 0.2 * rng.normal(size=d)
    hf["lm_head.weight"] = rng.normal(0, 0.5, (V, d))

    gguf_name = {"model.embed_tokens.weight": "token_embd.weight",
                 "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    layer_names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
                   "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                   "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
                   "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    types = {"token_embd.weight": T.Q8_0, "output.weight": T.Q8_0,
             "blk.0.attn_q.weight": T.Q8_0, "blk.0.attn_k.weight": T.F16,
             "blk.0.attn_v.weight": T.Q4_0, "blk.0.attn_output.weight": T.Q4_1,
             "blk.0.ffn_gate.weight": T.BF16, "blk.0.ffn_up.weight": T.Q8_0,
             "blk.0.ffn_down.weight": T.Q4_K,
             "blk.1.attn_q.weight": T.F16, "blk.1.attn_k.weight": T.Q8_0,
             "blk.1.attn_v.weight": T.BF16, "blk.1.attn_output.weight": T.F32,
             "blk.1.ffn_gate.weight": T.Q4_1, "blk.1.ffn_up.weight": T.Q4_0,
             "blk.1.ffn_down.weight": T.Q6_K}

    w = gguf.GGUFWriter(os.path.join(OUT, "tiny_llama.gguf"), "llama")
    w.add_name("tiny llama fixture")
    w.add_context_length(ctx)
    w.add_embedding_length(d)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(G)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(V)
    w.add_file_type(7)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(vocab) + [3] * len(SPECIALS))
    w.add_token_merges([a + " " + b for a, b in merges])
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    twin = {}
    for name, value in hf.items():
        if name.startswith("model.layers."):
            l, rest = name[len("model.layers."):].split(".", 1)
            base = rest.rsplit(".", 1)[0]
            gname = f"blk.{l}.{layer_names[base]}.weight"
        else:
            gname = gguf_name[name]
        qtype = types.get(gname, T.F32)
        heads = H if ".q_proj." in name else G if ".k_proj." in name else 0
        if value is None:  # ffn_down (d, F): random K-quant blocks, F = 256 per row
            raw = random_blocks(qtype, d, scale=0.002)
            values = dequantize(raw, qtype).reshape(d, F)
            w.add_tensor(gname, raw, raw_dtype=qtype)
            twin[name] = values
            continue
        value = np.asarray(value, dtype=np.float32)
        stored = value
        if heads:
            perm = qk_hf_to_gguf_rows(value.shape[0], heads)
            stored = np.empty_like(value)
            stored[perm] = value
        if qtype == T.F32:
            data = stored
            w.add_tensor(gname, data)
            back = data
        elif qtype == T.F16:
            data = stored.astype(np.float16)
            w.add_tensor(gname, data)
            back = dequantize(data, T.F16)
        else:
            data = quantize(stored, qtype)
            w.add_tensor(gname, data, raw_dtype=qtype)
            back = dequantize(data, qtype)
        back = np.asarray(back, dtype=np.float32).reshape(value.shape)
        if heads:
            back = back[qk_hf_to_gguf_rows(value.shape[0], heads)]
        twin[name] = back
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    tdir = os.path.join(OUT, "tiny_llama_hf")
    os.makedirs(tdir, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
        "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
        "num_key_value_heads": G, "head_dim": hd, "vocab_size": V,
        "max_position_embeddings": ctx, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
        "torch_dtype": "float32", "bos_token_id": tokens.index("<|im_start|>"),
        "eos_token_id": tokens.index("<|im_end|>")}
    with open(os.path.join(tdir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    write_safetensors(os.path.join(tdir, "model.safetensors"), twin)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": tokens.index(s), "content": s, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}
                         for s in SPECIALS],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]},
        "post_processor": None, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [a + " " + b for a, b in merges]}}
    with open(os.path.join(tdir, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    with open(os.path.join(tdir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "add_bos_token": False,
                   "chat_template": CHATML, "tokenizer_class": "PreTrainedTokenizerFast"}, f,
                  indent=2)


def train_spm_pieces(n_merges):
    """SentencePiece-BPE-like pieces of TEXT: characters of '▁'-prefixed words, then merges."""
    words = {}
    for w in TEXT.split():
        key = tuple("\u2581" + w)
        words[key] = words.get(key, 0) + 1
    chars = sorted({c for w in words for c in w})
    merged = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merged.append(best[0] + best[1])
        words = merge_pair(words, best)
    return chars, merged


def tiny_spm():
    """A llama with a SentencePiece tokenizer (tokenizer.ggml.model "llama": tokens, scores,
    types, <0xNN> byte tokens, no merges), all tensors F32. Its expected encodings come from
    transformers' own GGUF tokenizer conversion (tools/gguf_spm_cases.py)."""
    chars, merged = train_spm_pieces(40)
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    for k, piece in enumerate(merged):      # merges: earlier = higher score
        tokens.append(piece)
        types.append(1)
        scores.append(-float(k))
    for j, c in enumerate(chars):           # single characters last, lowest scores
        if c not in tokens:
            tokens.append(c)
            types.append(1)
            scores.append(-1000.0 - j)
    V = len(tokens)
    d, F, H, G, hd = 32, 32, 2, 1, 16
    w = gguf.GGUFWriter(os.path.join(OUT, "tiny_spm.gguf"), "llama")
    w.add_name("tiny spm fixture")  # transformers' GGUF loader requires general.name
    w.add_context_length(64)
    w.add_embedding_length(d)
    w.add_block_count(1)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(G)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    shapes = {"token_embd.weight": (V, d), "blk.0.attn_norm.weight": (d,),
              "blk.0.attn_q.weight": (H * hd, d), "blk.0.attn_k.weight": (G * hd, d),
              "blk.0.attn_v.weight": (G * hd, d), "blk.0.attn_output.weight": (d, H * hd),
              "blk.0.ffn_norm.weight": (d,), "blk.0.ffn_gate.weight": (F, d),
              "blk.0.ffn_up.weight": (F, d), "blk.0.ffn_down.weight": (d, F),
              "output_norm.weight": (d,)}
    for name, shape in shapes.items():
        w.add_tensor(name, rng.normal(0, 0.1, shape).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "quants.json"), "w") as f:
        json.dump({"dequantize": dequant_cases(), "quantize": quant_cases()}, f)
    tiny_llama()
    tiny_spm()
    with open(os.path.join(OUT, "VERSIONS.json"), "w") as f:
        json.dump({"gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
                   "numpy": np.__version__, "written_by": "tools/gguf_fixtures.py"}, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()

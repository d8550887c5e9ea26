#!/usr/bin/env python3
"""By-hand checks of `streambp convert` on a real GGUF file (not CI).

weights: every tensor of the converted directory against the gguf package's own dequantization
of the GGUF file, to the bit (the q/k rows of llama put back in Hugging Face order here, with an
index map written independently of the C++ code):

    .venv-gguf/bin/python tools/gguf_compare.py weights model.gguf converted_dir

score: transformers' loading of the same GGUF file (from_pretrained(dir, gguf_file=...), which
needs torch, transformers and gguf in one environment) against `streambp score --json` on the
same token sequences (the tokens file given to both):

    python tools/gguf_compare.py score model.gguf tokens.json streambp_score.json
"""
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(e["shape"])
    return out


LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
         "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
         "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
         "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}


def hf_name(g):
    if g in TOP:
        return TOP[g]
    _, l, base, kind = g.split(".")
    return f"model.layers.{l}.{LAYER[base]}.{kind}"


def weights(gguf_path, out_dir):
    import gguf
    from gguf.quants import dequantize
    r = gguf.GGUFReader(gguf_path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    H = int(r.fields[f"{arch}.attention.head_count"].parts[-1][0])
    G = int(r.fields[f"{arch}.attention.head_count_kv"].parts[-1][0])
    conv = read_safetensors(out_dir + "/model.safetensors")
    total, exact, n = 0, 0, 0
    for t in r.tensors:
        name = hf_name(t.name)
        v = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        v = v.reshape([int(x) for x in reversed(t.shape)])
        heads = H if ".attn_q." in t.name else G if ".attn_k." in t.name else 0
        if arch == "llama" and heads:
            rows = v.shape[0]
            h = rows // heads
            idx = [hd * h + 2 * i + s for hd in range(heads) for s in range(2) for i in range(h // 2)]
            v = v[idx]  # HF row (head, s, i) is GGUF row (head, 2i + s)
        c = conv[name]
        assert c.shape == v.shape, (name, c.shape, v.shape)
        same = np.count_nonzero(c.view(np.uint32) == v.view(np.uint32))
        total += v.size
        exact += same
        n += 1
        if same != v.size:
            print(f"{name}: {v.size - same} of {v.size} values differ, max |diff| "
                  f"{np.max(np.abs(c - v)):.3g}")
    extra = set(conv) - {hf_name(t.name) for t in r.tensors}
    print(f"weights: {n} tensors, {exact} of {total} values bit-identical to gguf's dequantization"
          f"{'; extra tensors ' + str(sorted(extra)) if extra else ''}")
    return exact == total and not extra


def score(gguf_path, tokens_path, score_json):
    import os
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_grad_enabled(False)
    d, f = os.path.split(os.path.abspath(gguf_path))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    model.eval()
    seqs = json.load(open(tokens_path))["sequences"]
    ours = json.load(open(score_json))
    total, count, worst = 0.0, 0, 0.0
    for i, s in enumerate(seqs):
        ids = torch.tensor([s])
        logits = model(ids).logits[0].double()
        lp = torch.log_softmax(logits, -1)[:-1].gather(1, ids[0, 1:, None])[:, 0]
        total += float(lp.sum())
        count += len(s) - 1
        diff = np.max(np.abs(np.array(ours["logprobs"][i]) - lp.numpy()))
        worst = max(worst, float(diff))
    loss = -total / count
    print(f"score: transformers loss {loss:.8f}, streambp {ours['loss']:.8f}, "
          f"|diff| {abs(loss - ours['loss']):.3g}; max |log-prob diff| {worst:.3g} "
          f"over {count} tokens")


if __name__ == "__main__":
    if sys.argv[1] == "weights":
        sys.exit(0 if weights(sys.argv[2], sys.argv[3]) else 1)
    elif sys.argv[1] == "score":
        score(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)

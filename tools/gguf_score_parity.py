#!/usr/bin/env python3
"""`streambp score` on a model converted from GGUF against transformers loading the same GGUF.

transformers (4.51, with the `gguf` package) dequantizes the file itself and undoes llama.cpp's
Q/K row permutation; `streambp convert` does the same in C++. This compares the two ends:

  1. every tensor of the converted directory against transformers' state dict (bit for bit);
  2. the loss and per-token log-probs of a chat text, tokenized by transformers' tokenizer
     from the GGUF metadata, through `streambp score` and through transformers' forward.

  python3 tools/gguf_score_parity.py --gguf-dir DIR --gguf-file FILE --converted OUT_DIR \
      [--streambp build/streambp]
Needs torch, transformers, gguf, safetensors (tools/requirements-peers.txt + gguf).
"""
import argparse
import json
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-dir", required=True)
    ap.add_argument("--gguf-file", required=True)
    ap.add_argument("--converted", required=True)
    ap.add_argument("--streambp", default="build/streambp")
    a = ap.parse_args()

    tok = AutoTokenizer.from_pretrained(a.gguf_dir, gguf_file=a.gguf_file)
    model = AutoModelForCausalLM.from_pretrained(a.gguf_dir, gguf_file=a.gguf_file,
                                                 torch_dtype=torch.float32)
    model.eval()

    # 1. tensors
    ours = {}
    import glob
    for f in sorted(glob.glob(a.converted + "/*.safetensors")):
        ours.update(load_file(f))
    theirs = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        theirs.pop("lm_head.weight", None)
        ours.pop("lm_head.weight", None)
    missing = sorted(set(theirs) - set(ours))
    extra = sorted(set(ours) - set(theirs))
    differ = [k for k in sorted(set(theirs) & set(ours))
              if theirs[k].shape != ours[k].shape
              or not np.array_equal(theirs[k].view(np.uint32), ours[k].astype(np.float32).view(np.uint32))]
    print(f"tensors: {len(theirs)} in transformers' model, {len(ours)} converted; "
          f"missing {missing[:5]}, extra {extra[:5]}, not bit-identical {len(differ)} {differ[:5]}")

    # 2. score
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": "The capital of France is Paris. It is known for the Eiffel Tower."}]
    text = tok.apply_chat_template(messages, tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    def token_logprobs(m):
        with torch.no_grad():
            logits = m(torch.tensor([ids])).logits[0].double()
        logp = torch.log_softmax(logits, -1)
        return [float(logp[i, ids[i + 1]]) for i in range(len(ids) - 1)]
    fp32 = token_logprobs(model)
    # transformers against itself: the same weights through its other attention implementation
    # (eager instead of sdpa), the spread of two fp32 forwards of one library.
    eager = AutoModelForCausalLM.from_pretrained(a.gguf_dir, gguf_file=a.gguf_file,
                                                 torch_dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    fp32_eager = token_logprobs(eager)
    del eager
    # transformers in float64 on the same (fp32-valued) weights: the reference both fp32
    # computations are measured against; fp32 sums in different orders differ by ~1e-5 over
    # 30 layers, and this says which of the two is nearer the exact value.
    model = model.double()
    # transformers computes rope's inverse frequencies in fp32 (a buffer that .double() only
    # widens); the exact reference recomputes them in float64.
    rot = model.model.rotary_emb
    dim = rot.inv_freq.numel() * 2
    base = model.config.rope_theta
    rot.inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rot.original_inv_freq = rot.inv_freq
    ref = token_logprobs(model)
    ref_loss = -sum(ref) / len(ref)
    fp32_loss = -sum(fp32) / len(fp32)
    with tempfile.TemporaryDirectory() as d:
        with open(d + "/tokens.json", "w") as f:
            json.dump({"sequences": [ids]}, f)
        subprocess.run([a.streambp, "score", "--model", a.converted, "--input", d + "/tokens.json",
                        "--json", d + "/out.json"], check=True, stdout=subprocess.DEVNULL)
        out = json.load(open(d + "/out.json"))
    ours_lp = out["logprobs"][0] if "logprobs" in out else out["token_logprobs"][0]
    ours_lp = [x for x in ours_lp if x is not None]
    n = min(len(ours_lp), len(ref))
    diff = max(abs(ours_lp[-n + i] - ref[-n + i]) for i in range(n))
    diff32 = max(abs(fp32[-n + i] - ref[-n + i]) for i in range(n))
    between = max(abs(ours_lp[-n + i] - fp32[-n + i]) for i in range(n))
    diff_eager = max(abs(fp32_eager[-n + i] - ref[-n + i]) for i in range(n))
    spread = max(abs(fp32_eager[-n + i] - fp32[-n + i]) for i in range(n))
    print(f"score: {len(ids)} tokens; loss: transformers float64 {ref_loss:.8f}, streambp "
          f"{out['loss']:.8f} (|diff| {abs(out['loss'] - ref_loss):.2e}), transformers fp32 "
          f"{fp32_loss:.8f} (|diff| {abs(fp32_loss - ref_loss):.2e})")
    print(f"max |log-prob - float64|: streambp {diff:.2e}, transformers fp32 {diff32:.2e}; "
          f"streambp vs transformers fp32 {between:.2e}")
    print(f"transformers against itself: eager attention {diff_eager:.2e} from float64, "
          f"eager vs sdpa {spread:.2e}")
    # Pass: the tensors bit for bit, the loss within 1e-5 of the exact value, and every log-prob
    # within twice the distance of transformers' own fp32 forward from it (the fp32 floor of a
    # 30-layer forward is ~1e-5 per token, whatever the summation order).
    ok = (not missing and not differ and abs(out["loss"] - ref_loss) <= 1e-5
          and diff <= max(1e-5, 2 * diff32))
    print("parity:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Regenerates tests/fixtures/lora/: tiny random base models with PEFT LoRA adapters, and what
transformers + peft compute for them, for the C++ LoRA parity test
(tests/parity/lora_parity_test.cpp).

    pip install -r tools/requirements.txt     # torch, transformers, safetensors, numpy, peft
    python tools/hf_parity/make_lora_fixtures.py

Pinned versions (tests/fixtures/lora/VERSIONS.json): torch 2.15.0, transformers 5.24.0,
peft 0.21.2, safetensors 0.8.0, numpy 2.4.6, Python 3.11.

Each fixture directory holds
    model/                         the base model, as save_pretrained writes it (float32)
    adapter/                       the adapter, as PeftModel.save_pretrained writes it
                                   (adapter_config.json + adapter_model.safetensors); lora_A as
                                   PEFT initialises it (seeded), lora_B drawn N(0, 0.05^2) so
                                   that the adapters change the model and every gradient is
                                   nonzero (PEFT's own B = 0 would make dA = 0)
    tokens.json                    the input, `streambp score --input` format
    expected.json                  loss, per-token target log-probs, number of loss tokens
    expected_grads.safetensors     d(loss)/d(adapter tensor) for every lora_A / lora_B, under
                                   PEFT's saved names (base_model.model.model.layers.0.
                                   self_attn.q_proj.lora_A.weight), F32

The loss is transformers' causal-LM loss summed over sequences run one at a time with
num_items_in_batch = the batch's loss tokens (the mean NLL over every loss token: streambp's
SFT loss of the packed batch). float32, eager attention, one thread, fixed seeds.

    python tools/hf_parity/make_lora_fixtures.py --check-load DIR --model MODEL --tokens T
prints PEFT's loss for the adapter in DIR (saved by `streambp train` with a lora: section) on
base MODEL and the sequences of tokens.json T: the "our adapter loads into PEFT" check.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
from pathlib import Path

import numpy
import peft
import safetensors
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as hf  # noqa: E402  (tiny(), make_model(), make_inputs(), write_json())

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "lora"

SPECS = [
    dict(name="qwen3_all_linear", model_type="qwen3", seed=21, config=hf.tiny(),
         lengths=[37, 23, 50, 9],
         lora=dict(r=8, lora_alpha=16, target_modules="all-linear", use_rslora=False),
         covers="qwen3 (q/k-norm, GQA): adapters on every projection"),
    dict(name="llama_qv_rslora", model_type="llama", seed=22,
         config=hf.tiny(num_key_value_heads=2, rms_norm_eps=1e-5),
         lengths=[41, 30, 12],
         lora=dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], use_rslora=True),
         covers="llama: PEFT's default targets, rsLoRA scale alpha / sqrt(r)"),
    dict(name="qwen3_kv_down", model_type="qwen3", seed=23, config=hf.tiny(),
         lengths=[29, 44],
         lora=dict(r=6, lora_alpha=12, target_modules=["k_proj", "v_proj", "down_proj"],
                   use_rslora=False),
         covers="k/v adapters (dK/dV accumulate across stream chunks) and the down projection"),
]


def versions() -> dict:
    v = hf.versions()
    v["peft"] = peft.__version__
    return v


def peft_name(name: str) -> str:
    """PeftModel parameter name -> the name PEFT saves (the adapter name dropped)."""
    return name.replace(".default", "")


def loss_of(model, seqs, masks):
    vocab = model.config.vocab_size
    n_loss = sum(sum(m[1:]) for m in masks)
    total = torch.zeros((), dtype=torch.float32)
    logprobs = []
    for ids, mask in zip(seqs, masks):
        input_ids = torch.tensor([ids], dtype=torch.long)
        labels = torch.tensor([[t if m else -100 for t, m in zip(ids, mask)]], dtype=torch.long)
        logits = model(input_ids=input_ids).logits
        total = total + model.base_model.model.loss_function(
            logits=logits, labels=labels, vocab_size=vocab, num_items_in_batch=n_loss)
        with torch.no_grad():
            lp = torch.log_softmax(logits[0].float(), dim=-1)
            logprobs.append([float(x) for x in lp[:-1].gather(1, input_ids[0, 1:, None])[:, 0]])
    return total, logprobs, n_loss


def make_fixture(spec: dict, root: Path) -> None:
    d = root / spec["name"]
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    base = hf.make_model(spec)
    base.save_pretrained(d / "model", safe_serialization=True)
    torch.manual_seed(100 + spec["seed"])  # PEFT's kaiming init of lora_A draws from it
    model = get_peft_model(base, LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                                            **spec["lora"]))
    gen = torch.Generator().manual_seed(3000 + spec["seed"])
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen, dtype=torch.float32))
    model.save_pretrained(d / "adapter")
    (d / "adapter" / "README.md").unlink(missing_ok=True)  # PEFT's model-card template
    # PEFT writes target_modules from a Python set, in an order that changes from run to run:
    # sorted, so that regenerating gives the same bytes.
    cfg_path = d / "adapter" / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["target_modules"] = sorted(cfg["target_modules"])
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    seqs, masks = hf.make_inputs(spec, base.config.vocab_size)
    model.zero_grad(set_to_none=True)
    total, logprobs, n_loss = loss_of(model, seqs, masks)
    total.backward()
    grads = {peft_name(n): p.grad.detach().float().contiguous()
             for n, p in model.named_parameters() if p.requires_grad}
    assert grads and all(n.endswith(("lora_A.weight", "lora_B.weight")) for n in grads), grads.keys()
    save_file(grads, str(d / "expected_grads.safetensors"), metadata={"format": "pt"})
    hf.write_json(d / "tokens.json", {"sequences": seqs, "loss_mask": masks})
    hf.write_json(d / "expected.json", {
        "fixture": spec["name"], "model_type": spec["model_type"], "covers": spec["covers"],
        "lora": {k: v for k, v in spec["lora"].items()},
        "loss": float(total.detach()), "num_loss_tokens": n_loss, "logprobs": logprobs,
        "versions": versions()})


def check_load(adapter: str, model_dir: str, tokens: str) -> None:
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                attn_implementation="eager")
    model = PeftModel.from_pretrained(base, adapter)
    t = json.loads(Path(tokens).read_text())
    with torch.no_grad():
        total, _, n = loss_of(model, t["sequences"], t["loss_mask"])
        merged = model.merge_and_unload()
    print(json.dumps({"peft_loss": float(total), "num_loss_tokens": n}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--check-load")
    ap.add_argument("--model")
    ap.add_argument("--tokens")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.check_load:
        check_load(a.check_load, a.model, a.tokens)
        return 0
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for spec in SPECS:
        if a.only and spec["name"] not in a.only:
            continue
        make_fixture(spec, FIXTURES)
        print("wrote", FIXTURES / spec["name"])
    hf.write_json(FIXTURES / "VERSIONS.json", versions())
    return 0


if __name__ == "__main__":
    sys.exit(main())

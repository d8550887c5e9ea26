#!/usr/bin/env python3
"""Regenerates tests/fixtures/hf/: tiny random Hugging Face models and what `transformers`
computes for them, for the C++ parity tests (tests/parity/hf_parity_test.cpp).

    pip install -r tools/requirements.txt
    python tools/hf_parity/make_fixtures.py            # rewrites tests/fixtures/hf/<name>/
    python tools/hf_parity/make_fixtures.py --check    # regenerates into a temp dir, compares

Each fixture directory holds
    model/                       exactly what save_pretrained writes (config.json, safetensors;
                                 one bf16 checkpoint, one sharded checkpoint with an index)
    tokens.json                  the input, in `streambp score --input` format:
                                 {"sequences": [[ids...], ...], "loss_mask": [[0/1...], ...]}
    expected.json                loss, number of loss tokens, per-token target log-probs of every
                                 sequence, and a slice of the logits
    expected_grads.safetensors   d(loss)/d(parameter) for every parameter, F32, HF names
    expected_bf16.json           the same computation with the model in bfloat16 (transformers'
                                 mixed precision: bf16 weights and activations, the loss on
                                 logits upcast to float32), and `hf_bf16_vs_fp32`: how far that
                                 is from the float32 values above, per quantity and per gradient
                                 tensor (max |bf16 - fp32| / max |fp32|) — the yardstick the C++
                                 bf16 parity test derives its tolerance from
    expected_grads_bf16.safetensors  the bf16 run's gradients (bf16 values, stored as F32)

Everything is float32 on the CPU with the eager attention, one thread, fixed seeds, so the
same versions on the same machine reproduce the files bit for bit (--check reports the
largest difference otherwise). CI never runs this script: the outputs are committed.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import re
import shutil
import sys
import tempfile
from pathlib import Path

import numpy
import safetensors
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, MistralConfig,
                          Qwen2Config, Qwen3Config)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "hf"

# Logits are large ((T, V) per sequence); a slice is enough to pin the LM head, the final norm
# and the position handling: these rows of every sequence, at these vocabulary columns.
LOGIT_FIRST_ROWS = 3
LOGIT_LAST_ROWS = 3
LOGIT_FIRST_COLS = 16
LOGIT_LAST_COLS = 8

CONFIG_CLASSES = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config,
                  "gemma3_text": Gemma3TextConfig, "mistral": MistralConfig}


def tiny(**overrides) -> dict:
    """A tiny decoder: hidden 64, 2 layers, 4 query heads over 2 kv heads (GQA)."""
    base = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0,
                tie_word_embeddings=False)
    base.update(overrides)
    return base


# name, model_type, config, seed, sequence lengths, on-disk dtype, max shard size, what it pins
FIXTURE_SPECS = [
    dict(name="qwen3_gqa_qknorm", model_type="qwen3", seed=1,
         config=tiny(),
         lengths=[37, 23, 50, 9], dtype="float32", shard=None,
         covers="qwen3: per-head q/k RMSNorm, GQA (4 query heads over 2 kv heads), untied "
                "LM head"),
    dict(name="qwen2_bias_tied", model_type="qwen2", seed=2,
         config=tiny(vocab_size=112, hidden_size=48, intermediate_size=96,
                     num_attention_heads=6, num_key_value_heads=2, head_dim=8,
                     tie_word_embeddings=True),
         lengths=[29, 41, 17], dtype="float32", shard=None,
         covers="qwen2: q/k/v biases (no o bias), tied embeddings (the gradient of "
                "model.embed_tokens.weight sums the embedding and LM-head terms)"),
    dict(name="llama_rope_llama3", model_type="llama", seed=3,
         config=tiny(num_key_value_heads=2, rms_norm_eps=1e-5,
                     rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 32}),
         # With head_dim 16 and theta 1e4 the rotary wavelengths are 6.3, 19.9, 62.8, ...
         # tokens: one below 32/4 = 8 (kept), one between 8 and 32 (smoothly interpolated), the
         # rest above 32 (divided by 8) — all three bands of the llama3 rule are exercised, and
         # the sequences are longer than original_max_position_embeddings.
         lengths=[61, 1, 34, 12], dtype="float32", shard=None,
         covers="llama: rope_scaling llama3 (all three frequency bands), untied LM head, "
                "rms_norm_eps 1e-5, a one-token sequence (no target)"),
    dict(name="qwen3_head_dim_24", model_type="qwen3", seed=4,
         config=tiny(vocab_size=96, head_dim=24, attention_bias=True),
         lengths=[33, 26, 19], dtype="float32", shard=None,
         covers="qwen3 with head_dim 24 != hidden/heads = 16 (q_proj is 96 x 64), "
                "attention_bias (q/k/v/o biases)"),
    dict(name="qwen3_bf16", model_type="qwen3", seed=5,
         config=tiny(),
         lengths=[31, 44, 15], dtype="bfloat16", shard=None,
         covers="a bfloat16 checkpoint: weights rounded to bf16 on disk; the expected values "
                "are transformers' float32 computation on those weights upcast to float32"),
    dict(name="qwen2_sharded", model_type="qwen2", seed=6,
         config=tiny(vocab_size=100, hidden_size=48, intermediate_size=80,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                     rope_theta=1000000.0, rms_norm_eps=1e-5),
         lengths=[27, 38], dtype="float32", shard="40KB",
         covers="a sharded checkpoint (model.safetensors.index.json + several shards), "
                "qwen2 untied, rope_theta 1e6"),
    dict(name="gemma3_sliding_softcap", model_type="gemma3_text", seed=7,
         config=tiny(rope_theta=10000.0, tie_word_embeddings=True, num_hidden_layers=3,
                     query_pre_attn_scalar=24, sliding_window=6,
                     layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                     rope_parameters={
                         "full_attention": {"rope_type": "linear", "factor": 4.0,
                                            "rope_theta": 10000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}},
                     final_logit_softcapping=1.0),
         # Window 6 is far below every sequence but the last: most rows of the sliding layers
         # see a truncated past; the full layer sees all of it. Soft-capping at 1.0 bites
         # (the logits are O(1) before it).
         lengths=[37, 23, 50, 9], dtype="float32", shard=None, lowest_token_id=1,
         covers="gemma3_text: (1 + w) RMSNorms, sandwich norms, q/k norms, GeGLU (gelu tanh), "
                "sqrt(d)-scaled tied embeddings, query_pre_attn_scalar 24 != head_dim 16, "
                "layer_types sliding/full/sliding with a window of 6, a local rope base (100) "
                "and a linearly scaled (x4) global one, final_logit_softcapping 1.0, GQA"),
    dict(name="gemma3_mqa_pattern", model_type="gemma3_text", seed=8,
         config=tiny(vocab_size=90, hidden_size=48, intermediate_size=80,
                     num_attention_heads=4, num_key_value_heads=1, head_dim=12,
                     tie_word_embeddings=False, attention_bias=True,
                     query_pre_attn_scalar=12, sliding_window=4, sliding_window_pattern=2,
                     rope_theta=50000.0, rope_local_base_freq=500.0),
         # config.json rewritten to the older spelling (see OLD_SPELLING): no layer_types, no
         # rope_parameters; transformers and streambp both derive them from
         # sliding_window_pattern, rope_theta and rope_local_base_freq.
         old_spelling=True, lowest_token_id=1,
         lengths=[19, 33, 7, 26], dtype="float32", shard=None,
         covers="gemma3_text in the older config spelling (sliding_window_pattern 2, rope_theta "
                "+ rope_local_base_freq), multi-query attention (1 kv head), attention_bias, "
                "untied LM head, window 4, no soft-capping"),
    dict(name="qwen2_sliding_window", model_type="qwen2", seed=9,
         config=tiny(vocab_size=104, num_hidden_layers=3, use_sliding_window=True,
                     sliding_window=5, max_window_layers=1),
         # Window 5 below every sequence length but the last (5: a window as long as the
         # sequence, the same keys as none). Layer 0 is full (max_window_layers 1), layers 1
         # and 2 slide, on the model's one rope.
         lengths=[31, 12, 44, 5], dtype="float32", shard=None,
         covers="qwen2 use_sliding_window: max_window_layers 1 (layer 0 full, layers 1-2 a "
                "window of 5, transformers' kv_idx > q_idx - 5), q/k/v biases, GQA"),
    dict(name="mistral_sliding_window", model_type="mistral", seed=10,
         config=tiny(vocab_size=120, num_hidden_layers=3, sliding_window=6, rope_theta=1e6,
                     rms_norm_eps=1e-5),
         # Every layer a window of 6 (MistralModel's sliding-window mask on all layers): below
         # every sequence length but the second (6: exactly one window, the same keys as none).
         lengths=[29, 6, 47, 13], dtype="float32", shard=None,
         covers="mistral: Llama's layers (no biases, SwiGLU) with every layer a window of 6 "
                "(kv_idx > q_idx - 6), GQA (4 query heads over 2 kv heads), untied LM head, "
                "rope_theta 1e6"),
    # The pad row. transformers builds every family's embedding as nn.Embedding(V, d,
    # padding_idx=pad_token_id): that row's lookups add no gradient, a tied LM head's part still
    # does, and initialisation zeroes the row. Both fixtures put the pad id in every sequence
    # (every `pad_every`-th token, as inputs and as targets).
    dict(name="gemma3_pad_tied", model_type="gemma3_text", seed=11,
         config=tiny(vocab_size=72, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                     tie_word_embeddings=True, query_pre_attn_scalar=12, sliding_window=8,
                     layer_types=["sliding_attention", "full_attention"]),
         # pad_token_id is Gemma3TextConfig's default, 0, and its row is zero as
         # transformers' init leaves it: a zero row goes through RMSNorm near its epsilon, so the
         # lookup gradient that transformers leaves out would be large (~300 on such a model).
         zero_pad_row=True, pad_every=5,
         lengths=[31, 18, 40], dtype="float32", shard=None,
         covers="gemma3_text pad row: pad_token_id 0 (the config's default) in every sequence, "
                "its embedding row zero; tied, so only the LM head's part reaches that row"),
    dict(name="llama_pad_untied", model_type="llama", seed=12,
         config=tiny(vocab_size=80, pad_token_id=7, rms_norm_eps=1e-5),
         # A pad id that is also an ordinary token (real checkpoints set it to their eos or
         # end-of-turn token), its row drawn like the others: untied, so that row's gradient is
         # exactly zero in transformers, while lm_head's row 7 gets its full gradient.
         pad_every=4,
         lengths=[27, 35, 12], dtype="float32", shard=None,
         covers="llama pad row: pad_token_id 7 in every sequence, a trained (nonzero) row, "
                "untied LM head (embed_tokens row 7's gradient exactly zero)"),
    # Long-context rope scalings (issue 52), every sequence but the short one longer than the
    # rope's original length, so the scaled frequencies decide the result.
    dict(name="llama_rope_yarn", model_type="llama", seed=13,
         config=tiny(max_position_embeddings=128, rms_norm_eps=1e-5,
                     rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                   "original_max_position_embeddings": 32}),
         # head_dim 16, theta 1e4, 32 original positions, transformers' defaults (beta_fast 32,
         # beta_slow 1, truncate): dimension 0 kept, 1 half-interpolated, 2..7 divided by 4;
         # cos and sin scaled by 0.1 ln 4 + 1 = 1.139.
         lengths=[61, 40, 12, 77], dtype="float32", shard=None,
         covers="llama: rope_scaling yarn x4 over 32 original positions with transformers' "
                "defaults (beta_fast 32, beta_slow 1, truncated correction range, attention "
                "factor 0.1 ln(factor) + 1), sequences up to 77 positions"),
    dict(name="qwen3_rope_yarn_mscale", model_type="qwen3", seed=14,
         config=tiny(max_position_embeddings=72, rope_theta=500.0,
                     rope_scaling={"rope_type": "yarn", "factor": 3.0,
                                   "original_max_position_embeddings": 24,
                                   "beta_fast": 12.0, "beta_slow": 1.5, "mscale": 0.9,
                                   "mscale_all_dim": 0.5, "truncate": False}),
         # theta 500 spreads the correction range over dimensions 0.8 .. 4.6 (not truncated:
         # fractional ramp ends); the attention factor is mscale / mscale_all_dim's ratio.
         lengths=[50, 33, 70, 8], dtype="float32", shard=None,
         covers="qwen3: rope_scaling yarn x3 over 24 original positions, beta_fast 12, beta_slow "
                "1.5, truncate false, mscale 0.9 / mscale_all_dim 0.5 attention factor"),
    dict(name="qwen2_rope_yarn_attention_factor", model_type="qwen2", seed=15,
         config=tiny(vocab_size=112, hidden_size=48, intermediate_size=96,
                     num_attention_heads=6, num_key_value_heads=2, head_dim=8,
                     max_position_embeddings=60, rope_theta=1000.0,
                     rope_scaling={"rope_type": "yarn", "factor": 2.0,
                                   "original_max_position_embeddings": 30,
                                   "attention_factor": 0.8}),
         lengths=[45, 21, 60], dtype="float32", shard=None,
         covers="qwen2: rope_scaling yarn x2 over 30 original positions with an explicit "
                "attention_factor 0.8 (cos and sin shrunk), q/k/v biases, head_dim 8"),
    dict(name="gemma3_rope_yarn", model_type="gemma3_text", seed=17,
         config=tiny(vocab_size=90, hidden_size=48, intermediate_size=80,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                     max_position_embeddings=96, tie_word_embeddings=True,
                     query_pre_attn_scalar=12, sliding_window=8,
                     layer_types=["sliding_attention", "full_attention"],
                     rope_parameters={
                         "full_attention": {"rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 24,
                                            "rope_theta": 10000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}),
         lowest_token_id=1,
         lengths=[58, 30, 90], dtype="float32", shard=None,
         covers="gemma3_text: yarn x4 over 24 original positions on the full-attention layer, "
                "the default local rope (base 100) on the sliding one, window 8"),
    dict(name="llama_rope_dynamic", model_type="llama", seed=16,
         config=tiny(max_position_embeddings=32, rms_norm_eps=1e-5,
                     rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
         # Dynamic NTK recomputes the frequencies from max(position_ids) + 1 of a forward: the
         # reference runs as one padded batch would (dynamic_warmup below), every sequence
         # with the longest one's length, 71 > max_position_embeddings 32.
         dynamic_warmup=True,
         lengths=[71, 40, 33, 55], dtype="float32", shard=None,
         covers="llama: rope_scaling dynamic x2 beyond max_position_embeddings 32, the batch's "
                "frequencies from its longest sequence (71 positions)"),
]


def versions() -> dict:
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "safetensors": safetensors.__version__,
            "numpy": numpy.__version__}


def make_model(spec: dict):
    cfg = CONFIG_CLASSES[spec["model_type"]](**spec["config"])
    torch.manual_seed(spec["seed"])
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                             dtype=torch.float32)
    # transformers' own init gives norms = 1 and biases = 0, which would let a loader that
    # ignores a norm or a bias pass. Draw every tensor ourselves, from our own generator, in
    # name order (independent of transformers' init order): matrices N(0, 0.08^2) so
    # activations and gradients are O(1), norms 1 + N(0, 0.1^2), biases N(0, 0.1^2).
    # Gemma's norms scale by (1 + w): centred on 0, so that the effective scale is 1 + N(0, 0.1^2)
    # as for the other families.
    centre = 0.0 if spec["model_type"] == "gemma3_text" else 1.0
    gen = torch.Generator().manual_seed(1000 + spec["seed"])
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(centre + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.08 * noise)
        if spec.get("zero_pad_row"):
            model.get_input_embeddings().weight[model.config.pad_token_id].zero_()
    return model


def make_inputs(spec: dict, vocab: int) -> tuple[list[list[int]], list[list[int]]]:
    """Sequences of the given (different) lengths and HF-labels-style loss masks: a prompt
    prefix masked out, then ~20% of the remaining tokens masked at random."""
    gen = torch.Generator().manual_seed(2000 + spec["seed"])
    # The older Gemma fixtures avoid the pad id (0) with lowest_token_id: they were made before
    # streambp matched nn.Embedding's padding_idx; the *_pad_* fixtures put it in on purpose.
    low = spec.get("lowest_token_id", 0)
    seqs, masks = [], []
    for i, n in enumerate(spec["lengths"]):
        ids = torch.randint(low, vocab, (n,), generator=gen).tolist()
        if spec.get("pad_every"):
            pad = CONFIG_CLASSES[spec["model_type"]](**spec["config"]).pad_token_id
            ids = [pad if t % spec["pad_every"] == i % spec["pad_every"] else x
                   for t, x in enumerate(ids)]
        prompt = n // 4 if i % 2 == 0 else 0
        keep = (torch.rand(n, generator=gen) > 0.2).tolist()
        mask = [0 if t < prompt else int(keep[t]) for t in range(n)]
        if i == 1:  # one sequence with every target counted
            mask = [1] * n
        seqs.append(ids)
        masks.append(mask)
    return seqs, masks


def rope_state(model) -> dict:
    """The rotary frequencies and the cos/sin factor the model's rotary embedding holds now
    (Gemma 3: those of its full-attention layers)."""
    rot = model.model.rotary_emb
    if hasattr(rot, "full_attention_inv_freq"):
        return {"inv_freq": [float(x) for x in rot.full_attention_inv_freq],
                "attention_scaling": float(rot.full_attention_attention_scaling)}
    return {"inv_freq": [float(x) for x in rot.inv_freq],
            "attention_scaling": float(rot.attention_scaling)}


def dynamic_warmup(model, length: int) -> None:
    """Dynamic NTK: transformers recomputes the frequencies from max(position_ids) + 1 of each
    forward and keeps them while later forwards are no longer (and not shorter than
    max_position_embeddings). One rotary call over `length` positions makes every sequence of
    the fixture (each >= max_position_embeddings) use the frequencies of the longest, as one
    padded batch of them would: the packed batch streambp computes."""
    rot = model.model.rotary_emb
    x = torch.zeros(1, dtype=next(model.parameters()).dtype)
    rot(x, torch.arange(length)[None])


def expected_outputs(model, seqs, masks) -> tuple[dict, dict]:
    """Runs each sequence on its own (batch 1, no padding) and sums HF's loss with
    num_items_in_batch = N, the number of loss tokens of ALL sequences:

        loss = sum_i sum_{t: label_i[t] != -100} -logp_i(t) / N

    which is the mean NLL over every loss token of the batch — exactly the loss of our packed
    batch (one segment per sequence, SFT normalised by the total loss weight). One backward of
    that sum gives the reference gradient of every parameter."""
    model.zero_grad(set_to_none=True)
    vocab = model.config.vocab_size
    n_loss = sum(sum(m[1:]) for m in masks)
    assert n_loss > 0
    total = torch.zeros((), dtype=torch.float32)
    manual = 0.0
    logprobs, rows = [], []
    cols = list(range(LOGIT_FIRST_COLS)) + list(range(vocab - LOGIT_LAST_COLS, vocab))
    for i, (ids, mask) in enumerate(zip(seqs, masks)):
        input_ids = torch.tensor([ids], dtype=torch.long)
        labels = torch.tensor([[t if m else -100 for t, m in zip(ids, mask)]], dtype=torch.long)
        out = model(input_ids=input_ids)
        logits = out.logits  # (1, n, V) float32
        # transformers' causal-LM loss (shift by one, ignore -100, sum / num_items_in_batch).
        total = total + model.loss_function(logits=logits, labels=labels, vocab_size=vocab,
                                            num_items_in_batch=n_loss)
        with torch.no_grad():
            lp = torch.log_softmax(logits[0].float(), dim=-1)  # (n, V)
            target_lp = lp[:-1].gather(1, input_ids[0, 1:, None])[:, 0]  # (n-1)
            logprobs.append([float(x) for x in target_lp])
            manual -= float((target_lp.double() * torch.tensor(mask[1:], dtype=torch.float64)).sum())
            n = len(ids)
            picked = sorted(set(range(min(LOGIT_FIRST_ROWS, n))) |
                            set(range(max(0, n - LOGIT_LAST_ROWS), n)))
            for t in picked:
                rows.append({"sequence": i, "position": t,
                             "values": [float(logits[0, t, c]) for c in cols]})
    total.backward()
    loss = float(total.detach())
    # Sanity: HF's loss equals the masked mean of the log-probs we record.
    assert math.isclose(loss, manual / n_loss, rel_tol=1e-5), (loss, manual / n_loss)
    grads = {name: p.grad.detach().float().contiguous()
             for name, p in model.named_parameters()}  # tied weights appear once
    expected = {"loss": loss, "num_loss_tokens": n_loss, "logprobs": logprobs,
                "logits": {"vocab_ids": cols, "rows": rows}}
    return expected, grads


def _rel(a, b) -> float:
    """max |a - b| / max |b| over an array (a list of numbers or a tensor), the C++ tests'
    test::rel_err."""
    a = torch.as_tensor(a, dtype=torch.float64).flatten()
    b = torch.as_tensor(b, dtype=torch.float64).flatten()
    den = float(b.abs().max())
    return float((a - b).abs().max()) / den if den > 0 else math.inf


def bf16_distances(exp32: dict, grads32: dict, exp16: dict, grads16: dict) -> dict:
    """How far transformers in bf16 is from transformers in fp32, per compared quantity."""
    flat = lambda per_seq: [x for s in per_seq for x in s]
    rows = lambda e: [v for r in e["logits"]["rows"] for v in r["values"]]
    return {"loss": abs(exp16["loss"] - exp32["loss"]) / abs(exp32["loss"]),
            "logprobs": _rel(flat(exp16["logprobs"]), flat(exp32["logprobs"])),
            "logits": _rel(rows(exp16), rows(exp32)),
            "grads": {k: _rel(grads16[k], grads32[k]) for k in sorted(grads32)}}


def _compact(x) -> str:
    return json.dumps(x, separators=(",", ":"))


def write_json(path: Path, obj: dict) -> None:
    """One line per top-level field, and one line per element of a list of lists or objects
    (a sequence, a logit row): readable in a diff, without a line per number."""
    lines = []
    for k, v in obj.items():
        if isinstance(v, list) and v and isinstance(v[0], (list, dict)):
            body = ",\n  ".join(_compact(e) for e in v)
            lines.append(f"{json.dumps(k)}: [\n  {body}\n ]")
        elif isinstance(v, dict) and "rows" in v:  # the logits slice
            inner = {kk: vv for kk, vv in v.items() if kk != "rows"}
            rows = ",\n   ".join(_compact(r) for r in v["rows"])
            head = ", ".join(f"{json.dumps(kk)}: {_compact(vv)}" for kk, vv in inner.items())
            lines.append(f"{json.dumps(k)}: {{{head}, \"rows\": [\n   {rows}\n ]}}")
        else:
            lines.append(f"{json.dumps(k)}: {_compact(v)}")
    path.write_text("{\n " + ",\n ".join(lines) + "\n}\n")


def make_fixture(spec: dict, root: Path) -> None:
    out = root / spec["name"]
    if out.exists():
        shutil.rmtree(out)
    model_dir = out / "model"
    model = make_model(spec)
    dtype = torch.bfloat16 if spec["dtype"] == "bfloat16" else torch.float32
    save_kwargs = {"max_shard_size": spec["shard"]} if spec["shard"] else {}
    model.to(dtype).save_pretrained(model_dir, safe_serialization=True, **save_kwargs)
    # generation_config.json is not part of the model; keep the fixture to what we read.
    (model_dir / "generation_config.json").unlink(missing_ok=True)
    if spec["shard"]:
        assert (model_dir / "model.safetensors.index.json").exists(), "expected a sharded save"
    else:
        assert (model_dir / "model.safetensors").exists()
    if spec.get("old_spelling"):
        # Gemma 3 configs on the Hub predate transformers 5: no layer_types and no
        # rope_parameters, only sliding_window_pattern, rope_theta and rope_local_base_freq.
        cfg = json.loads((model_dir / "config.json").read_text())
        rope = cfg.pop("rope_parameters")
        cfg.pop("layer_types")
        cfg.pop("_sliding_window_pattern", None)
        cfg["rope_theta"] = rope["full_attention"]["rope_theta"]
        cfg["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
        (model_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    # The reference is computed from the files just written, loaded the ordinary way and upcast
    # to float32: for the bf16 fixture that is the bf16-rounded weights, as streambp sees them.
    ref, info = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}  # missing/unexpected/mismatched keys
    assert not bad, f"{spec['name']}: reload problems {bad}"
    ref.eval()  # no dropout (attention_dropout is 0 anyway); autograd still records

    vocab = ref.config.vocab_size
    seqs, masks = make_inputs(spec, vocab)
    if spec.get("dynamic_warmup"):
        assert min(spec["lengths"]) >= ref.config.max_position_embeddings
        dynamic_warmup(ref, max(spec["lengths"]))
    write_json(out / "tokens.json", {"sequences": seqs, "loss_mask": masks})
    expected, grads = expected_outputs(ref, seqs, masks)
    expected = {"fixture": spec["name"], "model_type": spec["model_type"],
                "checkpoint_dtype": spec["dtype"], "sharded": bool(spec["shard"]),
                "covers": spec["covers"], **expected}
    rope = spec["config"].get("rope_scaling") or \
        spec["config"].get("rope_parameters", {}).get("full_attention", {})
    if rope.get("rope_type") in ("yarn", "dynamic"):
        # The frequencies the reference rotated with (tests/model/rope_test.cpp compares).
        expected["rope"] = {"seq_len": max(spec["lengths"]), **rope_state(ref)}
    write_json(out / "expected.json", expected)
    # One metadata key only: safetensors writes the metadata map in hash order, so a second key
    # would make the bytes differ from run to run.
    save_file(grads, str(out / "expected_grads.safetensors"), metadata={"format": "pt"})

    # The same files loaded in bfloat16: what a bf16 run of transformers computes (weights
    # rounded to nearest-even bf16 on load, bf16 matmuls and activations, the loss and our
    # recorded log-probs on logits upcast to fp32, bf16 gradients).
    ref16 = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16, attn_implementation="eager")
    ref16.eval()
    if spec.get("dynamic_warmup"):
        dynamic_warmup(ref16, max(spec["lengths"]))
    exp16, grads16 = expected_outputs(ref16, seqs, masks)
    exp16 = {"fixture": spec["name"], "precision": "bf16",
             "hf_bf16_vs_fp32": bf16_distances(expected, grads, exp16, grads16), **exp16}
    write_json(out / "expected_bf16.json", exp16)
    save_file(grads16, str(out / "expected_grads_bf16.safetensors"), metadata={"format": "pt"})


def generate(root: Path, only: list[str] | None = None) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for spec in FIXTURE_SPECS:
        if only and spec["name"] not in only:
            continue
        make_fixture(spec, root)
        print(f"wrote {root / spec['name']}")
    write_json(root / "VERSIONS.json", versions())


# ---------------------------------------------------------------- --check: compare two trees

def _max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    if a.shape != b.shape:
        return math.inf
    den = float(b.abs().max()) if b.numel() else 0.0
    num = float((a - b).abs().max()) if b.numel() else 0.0
    return 0.0 if num == 0.0 else (num / den if den > 0 else math.inf)


def _flatten_numbers(x, path="") -> dict:
    out = {}
    if isinstance(x, dict):
        for k, v in x.items():
            out.update(_flatten_numbers(v, f"{path}.{k}"))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            out.update(_flatten_numbers(v, f"{path}[{i}]"))
    else:
        out[path] = x
    return out


# --check's bound for the bf16 files, as the C++ bf16 parity test (hf_parity_bf16_test.cpp)
# bounds streambp against them: two bf16 computations of one function differ by their
# roundings, and which way a rounding goes depends on the CPU's summation order (oneDNN's bf16
# kernels differ between AMD and Intel cores), so a regenerated bf16 array may be as far from
# the committed one as either is from fp32. Each bf16 array is held to BF16_FACTOR times
# transformers' own bf16-vs-fp32 distance for that array (hf_bf16_vs_fp32 in the committed
# expected_bf16.json, a gradient's at least the fixture's median), not to the fp32 files'
# 1e-6: bf16 files made on another CPU pass, a modelling change (0.2 and more) still fails.
BF16_FACTOR = 2.0

# --check's bound for the fp32 files. On the same CPU they reproduce bit for bit; another CPU's
# kernels sum in another order (measured: 9.7e-7 on an Intel Xeon, AVX-512, against the
# committed files made on another machine, on a qwen2 k_proj.bias gradient). The C++ parity tests hold streambp to kTol = 1e-5 of
# these files and measure at most 2.5e-6: a regenerated file within 4e-6 of the committed one
# keeps every measured comparison (2.5e-6 + 4e-6) inside kTol, so the committed files stay as
# good a yardstick as the regenerated ones.
FP32_TOLERANCE = 4e-6


def bf16_tolerances(expected_bf16: dict, expected_fp32: dict) -> dict:
    """Per compared array of the bf16 files, its --check tolerance (see BF16_FACTOR)."""
    y = expected_bf16["hf_bf16_vs_fp32"]
    grads = sorted(y["grads"].values())
    median = grads[len(grads) // 2]
    # The loss is a mean of -logp: |d loss| <= max |d logp| (the C++ loss_yardstick).
    max_logp = max(abs(v) for s in expected_fp32["logprobs"] for v in s)
    loss = max(y["loss"], y["logprobs"] * max_logp / abs(expected_fp32["loss"]))
    tol = {".loss": loss, ".logprobs[][]": y["logprobs"], ".logits.rows[].values[]": y["logits"]}
    tol.update({name: max(v, median) for name, v in y["grads"].items()})
    return {k: BF16_FACTOR * v for k, v in tol.items()}


def compare_trees(new: Path, old: Path, tol: float) -> bool:
    ok = True
    for spec in FIXTURE_SPECS:
        old_dir = old / spec["name"]
        bf16_tol = {}
        if (old_dir / "expected_bf16.json").exists():
            bf16_tol = bf16_tolerances(json.loads((old_dir / "expected_bf16.json").read_text()),
                                       json.loads((old_dir / "expected.json").read_text()))
        for f in sorted((new / spec["name"]).rglob("*")):
            if f.is_dir():
                continue
            rel = f.relative_to(new)
            g = old / rel
            if not g.exists():
                print(f"MISSING in committed fixtures: {rel}")
                ok = False
                continue
            bf16 = "bf16" in f.name
            # (difference, tolerance, where): the worst ratio of an array to its tolerance.
            limit = lambda array: bf16_tol.get(array, tol) if bf16 else tol
            if f.suffix == ".safetensors":
                a, b = load_file(str(f)), load_file(str(g))
                if a.keys() != b.keys():
                    print(f"{rel}: tensor names differ")
                    ok = False
                    continue
                worst = max(((_max_rel(a[k], b[k]), limit(k), k) for k in a),
                            key=lambda w: w[0] / w[1])
            elif f.suffix == ".json":
                a, b = _flatten_numbers(json.loads(f.read_text())), \
                       _flatten_numbers(json.loads(g.read_text()))
                if a.keys() != b.keys():
                    print(f"{rel}: fields differ")
                    ok = False
                    continue
                # Numbers are compared per array, as the tensors above and the C++ tests do
                # (max |new - old| / max |old| over the array): an element-wise relative
                # difference would flag logits that happen to be near zero.
                worst = (0.0, tol, "")
                diff, scale = {}, {}
                for k in a:
                    # The bf16 yardsticks are distances derived from the values compared here
                    # (and differ as those do): compared through them, not on their own.
                    if bf16 and k.startswith(".hf_bf16_vs_fp32"):
                        continue
                    if isinstance(a[k], float) and isinstance(b[k], (int, float)):
                        array = re.sub(r"\[\d+\]", "[]", k)
                        diff[array] = max(diff.get(array, 0.0), abs(a[k] - b[k]))
                        scale[array] = max(scale.get(array, 0.0), abs(b[k]))
                    elif a[k] != b[k] and not k.startswith(".transformers_version"):
                        worst = (math.inf, tol, k)
                for array, d in diff.items():
                    e = 0.0 if d == 0.0 else (d / scale[array] if scale[array] > 0 else math.inf)
                    worst = max(worst, (e, limit(array), array), key=lambda w: w[0] / w[1])
            else:
                worst = (0.0 if f.read_bytes() == g.read_bytes() else math.inf, tol, "bytes")
            err, bound, where = worst
            status = "ok" if err <= bound else "DIFFERS"
            ok &= err <= bound
            print(f"{status:8s} {str(rel):50s} max rel diff {err:.2e} (tol {bound:.1e}) {where}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=FIXTURES, help="fixture root to write")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary directory and compare with --out")
    ap.add_argument("--tolerance", type=float, default=FP32_TOLERANCE,
                    help="--check: largest accepted relative difference of the fp32 files (the "
                         "bf16 files: BF16_FACTOR x transformers' own bf16 rounding)")
    ap.add_argument("--only", action="append",
                    help="write only this fixture (repeatable); the others are left as they are")
    args = ap.parse_args()
    torch.set_num_threads(1)  # one thread: a fixed reduction order, reproducible bits
    torch.use_deterministic_algorithms(True)
    if not args.check:
        generate(args.out, args.only)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        have = json.loads((args.out / "VERSIONS.json").read_text())
        if have != versions():
            print(f"note: fixtures were made with {have}, this environment is {versions()}")
        ok = compare_trees(Path(tmp), args.out, args.tolerance)
    print("fixtures reproduce" if ok else "fixtures DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

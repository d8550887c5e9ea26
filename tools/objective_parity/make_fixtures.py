#!/usr/bin/env python3
"""Regenerates tests/fixtures/objectives/: an independent PyTorch implementation of the DPO,
ORPO, KTO, GRPO and PPO losses on tiny Hugging Face models, for tests/engine/objective_parity_test.cpp.

    pip install -r tools/objective_parity/requirements.txt
    python tools/objective_parity/make_fixtures.py           # rewrites tests/fixtures/objectives/
    python tools/objective_parity/make_fixtures.py --check   # regenerates into a temp dir, compares

Independent means: the models are transformers' (Qwen3ForCausalLM for the policy and the
reference model, Qwen3ForSequenceClassification with num_labels = 1 for the value model, whose
per-token values are score(norm(last hidden state)) as TRL reads them); every sequence runs on
its own (batch 1, no packing); the losses are written the way TRL v0.23.0 writes them, on
right-padded (B, C) tensors with a completion mask, and differentiated by autograd. Nothing is
shared with the C++ side but the definitions.

Layout:
    models/policy, models/reference, models/value    save_pretrained output (float32)
    cases/<name>.json             the inputs (sequences as prompt + completion, configs, rewards
                                  / scores, old log-probs / old values per completion token) and
                                  the expected loss, metrics and intermediate values
    cases/<name>.grads.safetensors  d(loss)/d(parameter): the policy's under its HF names, the
                                  value model's (PPO) under "value_model." + its HF name

Cases: ORPO (beta 0.1 and 2; no reference model) on the DPO pairs; SimPO (TRL's CPOTrainer with
loss_type "simpo": cpo_alpha 0, and beta 2 with label smoothing and cpo_alpha 0.5) on them too; KTO (TRL's defaults, and
beta 0.5 with desirable / undesirable weights; the KL pairs shifted within the batch); DPO sigmoid (with and without label smoothing), hinge, ipo; GRPO with each loss_type
(grpo, bnpo, dr_grpo, dapo; KL beta 0.04, epsilon 0.2 / 0.28, supplied old log-probs), GRPO dapo
with old = current detached and beta = 0 (no reference model) and scale_rewards batch, GRPO bnpo
with an entropy bonus (our extension); PPO policy + value loss after the rollout (k1 KL penalty,
GAE, whitening).

Everything is float32 on the CPU, eager attention, one thread, fixed seeds.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import numpy
import safetensors
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3ForSequenceClassification

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "objectives"

CONFIG = dict(vocab_size=48, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=8,
              max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0,
              tie_word_embeddings=False)


# ---------------------------------------------------------------------------- models

def fill_random(model, seed: int) -> None:
    """Our own draw of every tensor (transformers' init leaves norms at 1): matrices
    N(0, 0.15^2), norms 1 + N(0, 0.1^2)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            p.copy_(1.0 + 0.1 * noise if "norm" in name else 0.15 * noise)


def make_models():
    cfg = Qwen3Config(**CONFIG)
    policy = Qwen3ForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    fill_random(policy, 11)
    reference = Qwen3ForCausalLM._from_config(cfg, attn_implementation="eager",
                                              dtype=torch.float32)
    reference.load_state_dict(policy.state_dict())
    gen = torch.Generator().manual_seed(12)
    with torch.no_grad():  # the reference: the policy moved a little, so KL terms are not zero
        for _, p in sorted(reference.named_parameters(), key=lambda kv: kv[0]):
            p.add_(0.03 * torch.randn(p.shape, generator=gen, dtype=torch.float32))
    vcfg = Qwen3Config(**CONFIG, num_labels=1, pad_token_id=0)
    value = Qwen3ForSequenceClassification._from_config(vcfg, attn_implementation="eager",
                                                        dtype=torch.float32)
    fill_random(value, 13)
    for m in (policy, reference, value):
        m.eval()  # no dropout anywhere (the configs have none; eval() makes it explicit)
    return policy, reference, value


# ------------------------------------------------------------------ per-token quantities

def completion_logps(model, prompt, completion, with_entropy=False):
    """Log-probs (C,) of the completion tokens given everything before them, and the entropy
    of each of those next-token distributions."""
    ids = torch.tensor([prompt + completion], dtype=torch.long)
    logits = model(input_ids=ids).logits[0]  # (P + C, V)
    p = len(prompt)
    rows = logits[p - 1: p - 1 + len(completion)]  # row t predicts token t + 1
    logp_all = torch.log_softmax(rows, dim=-1)
    lp = logp_all.gather(1, torch.tensor(completion)[:, None])[:, 0]
    if not with_entropy:
        return lp
    ent = -(logp_all.exp() * logp_all).sum(-1)
    return lp, ent


def completion_values(value_model, prompt, completion):
    ids = torch.tensor([prompt + completion], dtype=torch.long)
    hidden = value_model.model(input_ids=ids).last_hidden_state[0]  # after the final norm
    v = value_model.score(hidden)[:, 0]
    p = len(prompt)
    return v[p - 1: p - 1 + len(completion)]


def pad(rows, value=0.0):
    """Right-pads a list of 1-D tensors to (B, C) and returns it with the completion mask."""
    C = max(len(r) for r in rows)
    out = torch.stack([F.pad(r, (0, C - len(r)), value=value) for r in rows])
    mask = torch.stack([F.pad(torch.ones(len(r)), (0, C - len(r))) for r in rows])
    return out, mask


# ---------------------------------------------------------------------------- losses

def dpo_case(policy, reference, pairs, loss_type, beta, label_smoothing):
    """TRL DPOTrainer.dpo_loss + concatenated_forward (sum of completion log-probs; ipo: mean)."""
    def logps(model, prompt, completion):
        lp = completion_logps(model, prompt, completion)
        return lp.sum() / len(completion) if loss_type == "ipo" else lp.sum()

    chosen = torch.stack([logps(policy, p, c) for p, c, _ in pairs])
    rejected = torch.stack([logps(policy, p, r) for p, _, r in pairs])
    with torch.no_grad():
        ref_chosen = torch.stack([logps(reference, p, c) for p, c, _ in pairs])
        ref_rejected = torch.stack([logps(reference, p, r) for p, _, r in pairs])
    logits = (chosen - rejected) - (ref_chosen - ref_rejected)
    if loss_type == "sigmoid":
        losses = (-F.logsigmoid(beta * logits) * (1 - label_smoothing)
                  - F.logsigmoid(-beta * logits) * label_smoothing)
    elif loss_type == "hinge":
        losses = torch.relu(1 - beta * logits)
    elif loss_type == "ipo":
        losses = (logits - 1 / (2 * beta)) ** 2
    loss = losses.mean()
    chosen_rewards = beta * (chosen - ref_chosen).detach()
    rejected_rewards = beta * (rejected - ref_rejected).detach()
    metrics = {
        "rewards/chosen": chosen_rewards.mean().item(),
        "rewards/rejected": rejected_rewards.mean().item(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
        "logps/chosen": chosen.detach().mean().item(),
        "logps/rejected": rejected.detach().mean().item(),
    }
    return loss, metrics, {}


def padded_logits(model, seqs):
    """Each sequence (prompt + completion) alone through the model, then right-padded to
    (B, L, V) with input_ids (B, L), the attention mask, and labels = input_ids with -100 on the
    prompt and the padding: TRL's concatenated batch."""
    L = max(len(p) + len(c) for p, c in seqs)
    V = CONFIG["vocab_size"]
    logits = torch.zeros(len(seqs), L, V)
    ids = torch.zeros(len(seqs), L, dtype=torch.long)
    attn = torch.zeros(len(seqs), L, dtype=torch.long)
    labels = torch.full((len(seqs), L), -100, dtype=torch.long)
    rows = []
    for i, (p, c) in enumerate(seqs):
        n = len(p) + len(c)
        x = torch.tensor([p + c], dtype=torch.long)
        rows.append(F.pad(model(input_ids=x).logits[0], (0, 0, 0, L - n)))
        ids[i, :n] = x[0]
        attn[i, :n] = 1
        labels[i, len(p):n] = x[0, len(p):]
    return torch.stack(rows), ids, attn, labels


def batch_logps(logits, labels, average_log_prob):
    """TRL get_batch_logps: labels shifted left, -100 masked, sum (or mean) per sequence."""
    labels = labels[:, 1:].clone()
    logits = logits[:, :-1, :]
    loss_mask = labels != -100
    labels[labels == -100] = 0
    per_token = torch.gather(logits.log_softmax(-1), 2, labels.unsqueeze(2)).squeeze(2)
    if average_log_prob:
        return (per_token * loss_mask).sum(-1) / loss_mask.sum(-1)
    return (per_token * loss_mask).sum(-1)


def orpo_case(policy, pairs, beta):
    """TRL v0.23.0 ORPOTrainer: concatenated_forward (the chosen NLL over every token of the
    chosen sequences, prompt included: labels = input_ids where the attention mask is 1, one
    CrossEntropyLoss mean over the batch; average completion log-probs), odds_ratio_loss and
    get_batch_loss_metrics (loss = nll - mean(beta * logsigmoid(log_odds)))."""
    seqs = [(p, c) for p, c, _ in pairs] + [(p, r) for p, _, r in pairs]
    logits, ids, attn, labels = padded_logits(policy, seqs)
    B = len(pairs)
    nll_labels = torch.where(attn == 1, ids, -100)[:B, 1:]
    nll = F.cross_entropy(logits[:B, :-1, :].reshape(-1, logits.size(-1)), nll_labels.reshape(-1))
    all_logps = batch_logps(logits, labels, average_log_prob=True)
    chosen, rejected = all_logps[:B], all_logps[B:]
    log_odds = (chosen - rejected) - (torch.log1p(-torch.exp(chosen))
                                      - torch.log1p(-torch.exp(rejected)))
    ratio = F.logsigmoid(log_odds)
    losses = beta * ratio
    loss = nll - losses.mean()
    chosen_rewards = beta * chosen.detach()
    rejected_rewards = beta * rejected.detach()
    metrics = {
        "nll_loss": nll.item(),
        "rewards/chosen": chosen_rewards.mean().item(),
        "rewards/rejected": rejected_rewards.mean().item(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
        "logps/chosen": chosen.detach().mean().item(),
        "logps/rejected": rejected.detach().mean().item(),
        "log_odds_ratio": ratio.mean().item(),
        "log_odds_chosen": log_odds.mean().item(),
    }
    return loss, metrics, {}


def simpo_case(policy, pairs, cfg):
    """TRL's CPOTrainer with loss_type "simpo" (trl.experimental.cpo, TRL 1.x): concatenated_forward
    (average completion log-probs, get_batch_logps(average_log_prob=True); with cpo_alpha != 0 the
    chosen NLL, one CrossEntropyLoss mean over the chosen completion tokens: labels are -100 on
    the prompt), cpo_loss (logits = a_c - a_r - simpo_gamma / beta, -(1 - ls) logsigmoid(beta
    logits) - ls logsigmoid(-beta logits)) and get_batch_loss_metrics (loss = losses.mean() +
    cpo_alpha * nll; rewards = beta * a)."""
    beta, gamma, ls, alpha = cfg["beta"], cfg["simpo_gamma"], cfg["label_smoothing"], cfg["cpo_alpha"]
    seqs = [(p, c) for p, c, _ in pairs] + [(p, r) for p, _, r in pairs]
    logits, _, _, labels = padded_logits(policy, seqs)
    B = len(pairs)
    nll = torch.tensor(0.0)
    if alpha != 0:
        nll = F.cross_entropy(logits[:B, :-1, :].reshape(-1, logits.size(-1)),
                              labels[:B, 1:].reshape(-1))
    all_logps = batch_logps(logits, labels, average_log_prob=True)
    chosen, rejected = all_logps[:B], all_logps[B:]
    z = (chosen - rejected) - gamma / beta
    losses = -F.logsigmoid(beta * z) * (1 - ls) - F.logsigmoid(-beta * z) * ls
    loss = losses.mean() + alpha * nll
    chosen_rewards = beta * chosen.detach()
    rejected_rewards = beta * rejected.detach()
    metrics = {
        "nll_loss": nll.item(),
        "rewards/chosen": chosen_rewards.mean().item(),
        "rewards/rejected": rejected_rewards.mean().item(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean().item(),
        "logps/chosen": chosen.detach().mean().item(),
        "logps/rejected": rejected.detach().mean().item(),
    }
    return loss, metrics, {}


def kto_case(policy, reference, seqs, labels, cfg):
    """TRL v0.23.0 KTOTrainer, loss_type "kto": _get_kl_dataset (the KL pairs: prompt i with the
    completion of i - 1, cyclically, over the batch), forward (summed completion log-probs, the
    KL pairs' under no_grad), kto_loss (kl = mean(policy_KL - reference_KL), detached, clamped
    at 0; desirable 1 - sigmoid(beta (logratio - kl)), undesirable 1 - sigmoid(beta (kl -
    logratio)), weighted) and get_batch_loss_metrics (loss = losses.nanmean())."""
    beta, wd, wu = cfg["beta"], cfg["desirable_weight"], cfg["undesirable_weight"]
    kl_seqs = [(seqs[i][0], seqs[i - 1][1]) for i in range(len(seqs))]  # [-1] + [:-1]
    logits, _, _, labels_t = padded_logits(policy, seqs)
    logps = batch_logps(logits, labels_t, average_log_prob=False)
    with torch.no_grad():
        kl_logits, _, _, kl_labels = padded_logits(policy, kl_seqs)
        policy_kl = batch_logps(kl_logits, kl_labels, average_log_prob=False)
        ref_logits, _, _, _ = padded_logits(reference, seqs)
        ref_logps = batch_logps(ref_logits, labels_t, average_log_prob=False)
        rkl_logits, _, _, _ = padded_logits(reference, kl_seqs)
        ref_kl = batch_logps(rkl_logits, kl_labels, average_log_prob=False)
    chosen_idx = [i for i in range(len(seqs)) if labels[i] is True]
    rejected_idx = [i for i in range(len(seqs)) if labels[i] is False]
    kl = (policy_kl - ref_kl).mean().detach().clamp(min=0)
    chosen_logratios = logps[chosen_idx] - ref_logps[chosen_idx]
    rejected_logratios = logps[rejected_idx] - ref_logps[rejected_idx]
    chosen_losses = 1 - F.sigmoid(beta * (chosen_logratios - kl))
    rejected_losses = 1 - F.sigmoid(beta * (kl - rejected_logratios))
    losses = torch.cat((wd * chosen_losses, wu * rejected_losses), 0)
    loss = losses.nanmean()
    chosen_rewards = beta * chosen_logratios.detach()
    rejected_rewards = beta * rejected_logratios.detach()
    metrics = {
        "kl": kl.item(),
        "rewards/chosen": chosen_rewards.mean().item(),
        "rewards/rejected": rejected_rewards.mean().item(),
        "rewards/margins": (chosen_rewards.mean() - rejected_rewards.mean()).item(),
        "logps/chosen": logps[chosen_idx].detach().mean().item(),
        "logps/rejected": logps[rejected_idx].detach().mean().item(),
        "count/chosen": float(len(chosen_idx)),
        "count/rejected": float(len(rejected_idx)),
    }
    return loss, metrics, {"kl_unclamped": (policy_kl - ref_kl).mean().item()}


def grpo_advantages(rewards, G, scale):
    """TRL v0.23.0 _generate_and_score_completions."""
    mean = rewards.view(-1, G).mean(dim=1).repeat_interleave(G, dim=0)
    adv = rewards - mean
    if scale == "batch":
        std = rewards.std().expand_as(rewards)
    else:
        std = rewards.view(-1, G).std(dim=1).repeat_interleave(G, dim=0)
    if scale != "none":
        adv = adv / (std + 1e-4)
    return adv


def grpo_case(policy, reference, seqs, cfg, rewards, old_logps):
    """TRL v0.23.0 GRPOTrainer._compute_loss (token-level importance sampling)."""
    advantages = grpo_advantages(torch.tensor(rewards), cfg["group_size"], cfg["scale_rewards"])
    lps, ents = zip(*[completion_logps(policy, p, c, with_entropy=True) for p, c in seqs])
    per_token_logps, completion_mask = pad(list(lps))
    entropies, _ = pad(list(ents))
    beta = cfg["beta"]
    if beta != 0.0:
        with torch.no_grad():
            ref, _ = pad([completion_logps(reference, p, c) for p, c in seqs])
        per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
    if old_logps is None:
        old = per_token_logps.detach()
    else:
        old, _ = pad([torch.tensor(o) for o in old_logps])
    coef_1 = torch.exp(per_token_logps - old)
    coef_2 = torch.clamp(coef_1, 1 - cfg["epsilon_low"], 1 + cfg["epsilon_high"])
    per_token_loss1 = coef_1 * advantages.unsqueeze(1)
    per_token_loss2 = coef_2 * advantages.unsqueeze(1)
    per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl
    if cfg["entropy_coef"] != 0.0:  # our extension: an entropy bonus per token
        per_token_loss = per_token_loss - cfg["entropy_coef"] * entropies
    ga = cfg["grad_accum_steps"]
    lt = cfg["loss_type"]
    if lt == "grpo":
        loss = ((per_token_loss * completion_mask).sum(-1)
                / completion_mask.sum(-1).clamp(min=1.0)).mean() / ga
    elif lt == "bnpo":
        loss = (per_token_loss * completion_mask).sum() / completion_mask.sum().clamp(min=1.0) / ga
    elif lt == "dr_grpo":
        loss = ((per_token_loss * completion_mask).sum()
                / (per_token_loss.size(0) * cfg["max_completion_length"]) / ga)
    elif lt == "dapo":
        normalizer = cfg["num_items_in_batch"] / cfg["num_processes"]
        loss = (per_token_loss * completion_mask).sum() / normalizer
    n = completion_mask.sum().clamp(min=1.0)
    low = ((coef_1 < 1 - cfg["epsilon_low"]) & (advantages.unsqueeze(1) < 0)).float()
    high = ((coef_1 > 1 + cfg["epsilon_high"]) & (advantages.unsqueeze(1) > 0)).float()
    metrics = {"clip_ratio/low_mean": ((low * completion_mask).sum() / n).item(),
               "clip_ratio/high_mean": ((high * completion_mask).sum() / n).item(),
               "entropy": ((entropies * completion_mask).sum() / n).item()}
    if beta != 0.0:
        metrics["kl"] = ((per_token_kl * completion_mask).sum() / n).item()
    return loss, metrics, {"advantages": advantages.tolist()}


def masked_mean(x, mask):
    return (x * mask).sum() / mask.sum()


def masked_whiten(x, mask, shift_mean=True):
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    var = var * mask.sum() / (mask.sum() - 1)
    w = (x - mean) * torch.rsqrt(var + 1e-8)
    return w if shift_mean else w + mean


def ppo_case(policy, reference, value_model, seqs, cfg, scores, old_logps, old_values):
    """TRL v0.23.0 PPOTrainer.train: rollout rewards (k1 KL penalty, score on the last
    completion token), GAE on right-padded tensors, whitened advantages, then the clipped
    policy loss + vf_coef * clipped value loss of one micro-batch (= the whole batch here)."""
    logprobs, mask = pad([torch.tensor(o) for o in old_logps])
    values, _ = pad([torch.tensor(v) for v in old_values])
    with torch.no_grad():
        ref_logprobs, _ = pad([completion_logps(reference, p, c) for p, c in seqs])
    kl = (logprobs - ref_logprobs) * mask  # k1
    rewards = -cfg["kl_coef"] * kl
    for i, (_, c) in enumerate(seqs):
        rewards[i, len(c) - 1] += scores[i]
    C = rewards.size(1)
    lastgaelam = torch.zeros(len(seqs))
    reversed_adv = []
    for t in reversed(range(C)):
        nextvalues = values[:, t + 1] if t < C - 1 else torch.zeros(len(seqs))
        delta = rewards[:, t] + cfg["gamma"] * nextvalues - values[:, t]
        lastgaelam = delta + cfg["gamma"] * cfg["lam"] * lastgaelam
        reversed_adv.append(lastgaelam)
    advantages = torch.stack(reversed_adv[::-1], dim=1)
    returns = advantages + values
    advantages = masked_whiten(advantages, mask) * mask

    new_logprobs, _ = pad([completion_logps(policy, p, c) for p, c in seqs])
    vpred, _ = pad([completion_values(value_model, p, c) for p, c in seqs])
    vpredclipped = torch.clamp(vpred, values - cfg["cliprange_value"], values + cfg["cliprange_value"])
    vf_losses1 = torch.square(vpred - returns)
    vf_losses2 = torch.square(vpredclipped - returns)
    vf_loss = 0.5 * masked_mean(torch.max(vf_losses1, vf_losses2), mask)
    ratio = torch.exp(new_logprobs - logprobs)
    pg_losses = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - cfg["cliprange"], 1.0 + cfg["cliprange"])
    pg_loss = masked_mean(torch.max(pg_losses, pg_losses2), mask)
    loss = pg_loss + cfg["vf_coef"] * vf_loss
    metrics = {"loss/policy": pg_loss.item(), "loss/value": vf_loss.item(),
               "objective/kl": kl.sum(1).mean().item(),
               "objective/scores": float(numpy.mean(scores))}
    unpad = lambda x: [x[i, :len(c)].tolist() for i, (_, c) in enumerate(seqs)]
    return loss, metrics, {"advantages": unpad(advantages), "returns": unpad(returns),
                           "ratio": unpad(ratio.detach())}


# ---------------------------------------------------------------------------- cases

def random_tokens(gen, n):
    return torch.randint(0, CONFIG["vocab_size"], (n,), generator=gen).tolist()


def dpo_inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    pairs = []
    for lens in [(5, 9, 6), (3, 4, 11), (8, 7, 7)]:
        p = random_tokens(gen, lens[0])
        pairs.append((p, random_tokens(gen, lens[1]), random_tokens(gen, lens[2])))
    return pairs


def group_inputs(seed, groups, G):
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for _ in range(groups):
        p = random_tokens(gen, int(torch.randint(3, 8, (1,), generator=gen)))
        for _ in range(G):
            seqs.append((p, random_tokens(gen, int(torch.randint(4, 13, (1,), generator=gen)))))
    return seqs


def safe_noise(policy, seqs, gen, scale, cfg_lo, cfg_hi):
    """Old log-probs = current + noise, redrawn where a ratio would land within 1e-3 of a clip
    boundary (there fp32 rounding on either side could pick different branches)."""
    out = []
    with torch.no_grad():
        for p, c in seqs:
            lp = completion_logps(policy, p, c)
            while True:
                old = lp + scale * torch.randn(lp.shape, generator=gen)
                r = torch.exp(lp - old)
                if ((r - cfg_lo).abs().min() > 1e-3) and ((r - cfg_hi).abs().min() > 1e-3):
                    break
            out.append(old.tolist())
    return out


def build_cases(policy, reference, value_model):
    cases = []
    pairs = dpo_inputs(21)
    for name, lt, beta, ls in [("dpo_sigmoid", "sigmoid", 0.1, 0.0),
                               ("dpo_sigmoid_smoothing", "sigmoid", 0.3, 0.1),
                               ("dpo_hinge", "hinge", 0.05, 0.0),
                               ("dpo_ipo", "ipo", 0.1, 0.0)]:
        cfg = {"loss_type": lt, "beta": beta, "label_smoothing": ls}
        inputs = {"objective": "dpo", "config": cfg,
                  "pairs": [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in pairs]}
        cases.append((name, inputs, lambda cfg=cfg: dpo_case(policy, reference, pairs,
                                                              cfg["loss_type"], cfg["beta"],
                                                              cfg["label_smoothing"])))
    for name, beta in [("orpo", 0.1), ("orpo_beta2", 2.0)]:
        inputs = {"objective": "orpo", "config": {"beta": beta},
                  "pairs": [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in pairs]}
        cases.append((name, inputs, lambda beta=beta: orpo_case(policy, pairs, beta)))
    # SimPO: TRL's CPOConfig defaults for beta and simpo_gamma with cpo_alpha 0 (SimPO proper),
    # then the paper's larger beta with label smoothing and the CPO-SimPO NLL term.
    for name, cfg in [("simpo", {"beta": 0.1, "simpo_gamma": 0.5, "label_smoothing": 0.0,
                                 "cpo_alpha": 0.0}),
                      ("simpo_cpo", {"beta": 2.0, "simpo_gamma": 1.0, "label_smoothing": 0.1,
                                     "cpo_alpha": 0.5})]:
        inputs = {"objective": "simpo", "config": cfg,
                  "pairs": [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in pairs]}
        cases.append((name, inputs, lambda cfg=cfg: simpo_case(policy, pairs, cfg)))
    kseqs = group_inputs(26, groups=5, G=1)
    klabels = [True, False, True, True, False]
    for name, cfg in [("kto", {"beta": 0.1, "desirable_weight": 1.0, "undesirable_weight": 1.0}),
                      ("kto_weighted", {"beta": 0.5, "desirable_weight": 1.33,
                                        "undesirable_weight": 0.7})]:
        inputs = {"objective": "kto", "config": cfg, "labels": klabels,
                  "sequences": [{"prompt": p, "completion": c} for p, c in kseqs]}
        cases.append((name, inputs, lambda cfg=cfg: kto_case(policy, reference, kseqs, klabels,
                                                              cfg)))
    seqs = group_inputs(22, groups=2, G=3)
    gen = torch.Generator().manual_seed(23)
    rewards = torch.randn(len(seqs), generator=gen).tolist()
    old = safe_noise(policy, seqs, gen, 0.3, 0.8, 1.28)
    items = sum(len(c) for _, c in seqs) + 17  # as if the generation batch had more tokens
    base = {"beta": 0.04, "epsilon_low": 0.2, "epsilon_high": 0.28, "group_size": 3,
            "scale_rewards": "group", "grad_accum_steps": 2, "max_completion_length": 16,
            "num_items_in_batch": items, "num_processes": 2, "entropy_coef": 0.0}
    variants = [(f"grpo_{lt}", dict(base, loss_type=lt), old)
                for lt in ["grpo", "bnpo", "dr_grpo", "dapo"]]
    variants.append(("grpo_dapo_detached_nokl", dict(base, loss_type="dapo", beta=0.0,
                                                     scale_rewards="batch"), None))
    variants.append(("grpo_bnpo_entropy", dict(base, loss_type="bnpo", entropy_coef=0.05), old))
    for name, cfg, o in variants:
        inputs = {"objective": "grpo", "config": cfg, "rewards": rewards,
                  "sequences": [{"prompt": p, "completion": c} for p, c in seqs],
                  "old_logps": o}
        cases.append((name, inputs, lambda cfg=cfg, o=o: grpo_case(policy, reference, seqs, cfg,
                                                                  rewards, o)))
    pseqs = group_inputs(24, groups=4, G=1)
    gen = torch.Generator().manual_seed(25)
    cfg = {"kl_coef": 0.05, "gamma": 1.0, "lam": 0.95, "cliprange": 0.2,
           "cliprange_value": 0.2, "vf_coef": 0.1}
    scores = torch.randn(len(pseqs), generator=gen).tolist()
    pold = safe_noise(policy, pseqs, gen, 0.3, 0.8, 1.2)
    old_values = []
    with torch.no_grad():
        for p, c in pseqs:
            v = completion_values(value_model, p, c)
            while True:  # keep values away from the value clip's boundaries too
                noisy = v + 0.3 * torch.randn(v.shape, generator=gen)
                d = (v - noisy).abs()
                if (d - cfg["cliprange_value"]).abs().min() > 1e-3:
                    break
            old_values.append(noisy.tolist())
    inputs = {"objective": "ppo", "config": cfg, "scores": scores,
              "sequences": [{"prompt": p, "completion": c} for p, c in pseqs],
              "old_logps": pold, "old_values": old_values}
    cases.append(("ppo", inputs, lambda: ppo_case(policy, reference, value_model, pseqs, cfg,
                                                  scores, pold, old_values)))
    return cases


def versions() -> dict:
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "safetensors": safetensors.__version__,
            "numpy": numpy.__version__}


def write_all(out: Path, only: set[str] | None = None) -> None:
    torch.set_num_threads(1)
    policy, reference, value_model = make_models()
    models = out / "models"
    if only is None:
        for name, m in [("policy", policy), ("reference", reference), ("value", value_model)]:
            m.save_pretrained(models / name, safe_serialization=True)
    else:  # the cases' models must be the ones on disk
        for name, m in [("policy", policy), ("reference", reference), ("value", value_model)]:
            saved = load_file(str(models / name / "model.safetensors"))
            for k, v in m.state_dict().items():
                if k in saved and not torch.equal(saved[k], v):
                    raise SystemExit(f"--only: {name}.{k} differs from {models / name}")
    cases_dir = out / "cases"
    cases_dir.mkdir(parents=True, exist_ok=True)
    cases = build_cases(policy, reference, value_model)
    unknown = (only or set()) - {name for name, _, _ in cases}
    if unknown:
        raise SystemExit(f"--only: no case named {', '.join(sorted(unknown))}")
    for name, inputs, run in cases:
        if only is not None and name not in only:
            continue
        for m in (policy, value_model):
            m.zero_grad(set_to_none=True)
        loss, metrics, extra = run()
        loss.backward()
        grads = {n: p.grad.detach().float().contiguous()
                 for n, p in policy.named_parameters() if p.grad is not None}
        if inputs["objective"] == "ppo":
            for n, p in value_model.named_parameters():
                grads["value_model." + n] = p.grad.detach().float().contiguous()
        assert grads, name
        save_file(grads, str(cases_dir / f"{name}.grads.safetensors"))
        inputs["expected"] = {"loss": float(loss.detach()), "metrics": metrics, **extra}
        (cases_dir / f"{name}.json").write_text(json.dumps(inputs, indent=1) + "\n")
    if only is None or versions() != json.loads((out / "VERSIONS.json").read_text()):
        (out / "VERSIONS.json").write_text(json.dumps(versions(), indent=1) + "\n")


def compare(a: Path, b: Path) -> float:
    worst = 0.0
    for f in sorted(a.rglob("*.safetensors")):
        x, y = load_file(str(f)), load_file(str(b / f.relative_to(a)))
        for k in x:
            d = (x[k] - y[k]).abs().max().item() / max(y[k].abs().max().item(), 1e-30)
            worst = max(worst, d)
    return worst


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary directory and report the largest change")
    ap.add_argument("--out", type=Path, default=FIXTURES)
    ap.add_argument("--only", nargs="+", metavar="CASE",
                    help="write only these cases into --out, leaving the models and the other "
                         "cases as they are (a new case beside fixtures made on another machine)")
    args = ap.parse_args()
    if args.only:
        write_all(args.out, only=set(args.only))
        print(f"wrote {', '.join(sorted(args.only))} into {args.out}")
        return 0
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            write_all(Path(tmp))
            worst = compare(Path(tmp), args.out)
            print(f"largest relative difference to {args.out}: {worst:.3e}")
            return 0 if worst < 1e-6 else 1
    tmp = args.out.with_name(args.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    write_all(tmp)
    shutil.rmtree(args.out, ignore_errors=True)
    tmp.rename(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

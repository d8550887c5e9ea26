"""Writes tests/fixtures/trl/: a tiny Qwen3 model (examples/tiny-chat's shape and tokenizer,
weights drawn by torch with seed 0, fp32), SFT text records of one token length, and the losses
TRL's own SFTTrainer logs on them (CPU, fp32), which tests/python/test_trl.py compares with
streambp.trl's SFTTrainer on the same model, data and config.

The data order is made the same on both sides by train_sampling_strategy="sequential" (no
shuffling: TRL's sampler reads the rows in order; streambp.trl maps it to data.shuffle: false) and
by giving every record the same token length L, with max_length = L: TRL's batch of B rows is
then exactly the B records streambp packs into its micro-batch of B x L tokens.

    /path/to/venv-with-trl/bin/python tools/trl_parity/make_fixtures.py   (requirements.txt)
"""
import collections
import json
import os
import shutil
import tempfile
import warnings

warnings.simplefilter("ignore")
import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "trl")
MODEL = os.path.join(OUT, "tiny")
# The settings both sides train with (test_trl.py passes the same to streambp.trl). bf16=False:
# TRL's default (None) trains in bf16 autocast, on the CPU too.
SETTINGS = dict(max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3, bf16=False,
                logging_steps=1, train_sampling_strategy="sequential", seed=0)


def make_model():
    os.makedirs(MODEL, exist_ok=True)
    cfg = transformers.AutoConfig.from_pretrained(os.path.join(ROOT, "examples", "tiny-chat"))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(MODEL)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(ROOT, "examples", "tiny-chat", f), os.path.join(MODEL, f))


def make_data(tok):
    texts = [f"{a} plus {b} is {a + b}." for a in range(40) for b in range(0, 40, 3)]
    lengths = [len(tok(t)["input_ids"]) + 1 for t in texts]  # + eos, which TRL appends
    L = collections.Counter(lengths).most_common(1)[0][0]
    rows = [{"text": t} for t, n in zip(texts, lengths) if n == L][:32]
    with open(os.path.join(OUT, "sft_text.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows, L


def make_preference(tok):
    """Preference rows whose prompt + chosen and prompt + rejected (+ eos) all have one token
    length L: a micro-batch of B x 2 x L tokens is then exactly TRL's batch of B pairs."""
    rows, L = [], None
    for a in range(40):
        for b in range(0, 40, 3):
            p, c, r = f"{a} plus {b} is", f" {a + b}.", f" {a + b + 10}."
            n = [len(tok(p + x)["input_ids"]) + 1 for x in (c, r)]
            if n[0] == n[1] and (L is None or n[0] == L):
                L = n[0]
                rows.append({"prompt": p, "chosen": c, "rejected": r})
    rows = rows[:16]
    with open(os.path.join(OUT, "dpo_pairs.jsonl"), "w") as f:
        for x in rows:
            f.write(json.dumps(x) + "\n")
    return rows, L


def dpo(tok):
    rows, L = make_preference(tok)
    settings = dict(max_steps=3, per_device_train_batch_size=2, learning_rate=1e-3, bf16=False,
                    logging_steps=1, train_sampling_strategy="sequential", seed=0, beta=0.1)
    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(output_dir=tmp, max_length=L, report_to="none", use_cpu=True,
                         save_strategy="no", gradient_checkpointing=False, **settings)
        trainer = DPOTrainer(model=MODEL, args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=tok)
        trainer.train()
        logs = [h for h in trainer.state.log_history if "loss" in h]
    keep = ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen",
            "logps/rejected")
    with open(os.path.join(OUT, "dpo_losses.json"), "w") as f:
        json.dump({"trl": trl.__version__, "settings": dict(settings, max_length=L),
                   "logs": [{k: h[k] for k in keep if k in h} for h in logs]}, f, indent=1)
    print("dpo max_length", L, [h["loss"] for h in logs])


def main():
    make_model()
    tok = transformers.AutoTokenizer.from_pretrained(MODEL)
    rows, L = make_data(tok)
    with tempfile.TemporaryDirectory() as tmp:
        args = SFTConfig(output_dir=tmp, max_length=L, report_to="none", use_cpu=True,
                         save_strategy="no", gradient_checkpointing=False, **SETTINGS)
        trainer = SFTTrainer(model=MODEL, args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=tok)
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    with open(os.path.join(OUT, "sft_losses.json"), "w") as f:
        json.dump({"trl": trl.__version__, "transformers": transformers.__version__,
                   "torch": torch.__version__, "settings": dict(SETTINGS, max_length=L),
                   "losses": losses}, f, indent=1)
    print("max_length", L, "losses", losses)
    dpo(tok)


if __name__ == "__main__":
    main()

"""streambp.trl (docs/PYTHON.md "TRL's names"): every refused TRL field is an error naming it;
the trainers equal streambp.train on the same keys and TRL's own SFTTrainer on its fixture
(tools/trl_parity/make_fixtures.py); report_to writes what TensorBoard's reader and wandb's
offline mode read."""
import glob
import json
import os
import subprocess
import sys

import pytest

import streambp
from streambp import trl as strl
from streambp._trl_defaults import DEFAULTS

from conftest import ROOT, assert_same_weights

FIX = os.path.join(ROOT, "tests", "fixtures", "trl")
KINDS = ["SFTConfig", "DPOConfig", "GRPOConfig", "KTOConfig", "ORPOConfig"]


def other_value(default):
    """A value that is not `default`, of a plausible type."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1
    if isinstance(default, str):
        return default + "-other"
    if isinstance(default, list):
        return ["other"]
    if isinstance(default, dict):
        return {"other": 1}
    return "other"


@pytest.mark.parametrize("kind", KINDS)
def test_every_refused_field_is_an_error_naming_it(kind):
    cls = getattr(strl, kind)
    refused = strl.refused(kind)
    assert refused and set(refused) | strl.ACCEPTED[kind] == set(DEFAULTS[kind])
    for field in refused:
        with pytest.raises(streambp.Error, match=f"{kind}: {field}: a TRL field streambp does "
                                                 "not support"):
            cls(output_dir="x", **{field: other_value(DEFAULTS[kind][field])})
        cls(output_dir="x", **{field: DEFAULTS[kind][field]})  # TRL's default asks nothing
    with pytest.raises(streambp.Error, match="no_such_field: not a field of TRL"):
        cls(no_such_field=1)


def test_import_needs_neither_torch_nor_trl():
    code = ("import sys, streambp.trl; "
            "assert 'torch' not in sys.modules and 'trl' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))


@pytest.mark.parametrize("kind, field, value, message", [
    ("SFTConfig", "lr_scheduler_type", "polynomial", "lr_scheduler_type: 'polynomial' is not"),
    ("SFTConfig", "num_train_epochs", 1.5, "num_train_epochs: 1.5: streambp trains whole"),
    ("SFTConfig", "optim", "sgd", "optim: 'sgd' is not supported"),
    ("SFTConfig", "truncation_mode", "keep_end", "truncation_mode: 'keep_end'"),
    ("SFTConfig", "completion_only_loss", False, "completion_only_loss: False"),
    ("DPOConfig", "loss_type", ["sigmoid", "bco_pair"], "loss_type: .*one loss type"),
    ("GRPOConfig", "num_generations", 3, "num_generations: 3 does not divide"),
    ("GRPOConfig", "scale_rewards", "sometimes", "scale_rewards: 'sometimes'"),
    ("SFTConfig", "eval_strategy", "epoch", "eval_strategy: 'epoch'"),
    ("SFTConfig", "report_to", "mlflow", "report_to: 'mlflow'"),
])
def test_values_streambp_cannot_honour_are_errors(kind, field, value, message):
    with pytest.raises(streambp.Error, match=message):
        getattr(strl, kind)(output_dir="x", **{field: value})


def sft_rows():
    return [json.loads(x) for x in open(os.path.join(FIX, "sft_text.jsonl"))]


def test_sft_matches_trl_losses():
    """TRL 1.16's SFTTrainer on the fixture (CPU, fp32, rows in order) logged these losses;
    streambp.trl with the same config: the first within 1e-5 relative (the same weights and
    rows: the same loss up to summation order), the next three within 1e-5 too (AdamW steps of
    the same gradients; measured ~1e-8)."""
    fx = json.load(open(os.path.join(FIX, "sft_losses.json")))
    args = strl.SFTConfig(output_dir=os.path.join(ROOT, "out", "pytest-trl-parity"),
                          overwrite_output_dir=True, save_strategy="no", threads=1,
                          **fx["settings"])
    t = strl.SFTTrainer(model=os.path.join(FIX, "tiny"), args=args, train_dataset=sft_rows())
    t.train()
    ours = [h["loss"] for h in t.state.log_history if "loss" in h]
    assert len(ours) == len(fx["losses"])
    for a, b in zip(ours, fx["losses"]):
        assert abs(a - b) <= 1e-5 * abs(b), (ours, fx["losses"])


def test_dpo_matches_trl_losses_and_statistics():
    """TRL 1.16's DPOTrainer on the fixture's pairs (every prompt + completion one length, rows
    in order): step 1's loss is log 2 on both sides, so its log-probs are the check there
    (sums over the completion, from the weights and tokens alone); steps 2 and 3 follow one and
    two AdamW updates. All within 1e-5 relative, or 1e-6 where TRL's value is 0 (measured
    ~1e-8, rewards/* ~5e-6 of their small size)."""
    fx = json.load(open(os.path.join(FIX, "dpo_losses.json")))
    rows = [json.loads(x) for x in open(os.path.join(FIX, "dpo_pairs.jsonl"))]
    args = strl.DPOConfig(output_dir=os.path.join(ROOT, "out", "pytest-trl-dpo-parity"),
                          overwrite_output_dir=True, save_strategy="no", threads=1,
                          **fx["settings"])
    t = strl.DPOTrainer(model=os.path.join(FIX, "tiny"), args=args, train_dataset=rows)
    t.train()
    ours = [h for h in t.state.log_history if "loss" in h]
    assert len(ours) == len(fx["logs"])
    for a, b in zip(ours, fx["logs"]):
        for k, v in b.items():
            tol = 1e-5 * abs(v) if k in ("loss",) or k.startswith("logps") else 1e-6
            assert abs(a[k] - v) <= tol, (k, a[k], v)


def test_sft_trainer_equals_streambp_train_on_its_keys(tmp_path):
    """The trainer is streambp.train on the keys its config maps to: the same weights."""
    args = strl.SFTConfig(output_dir=str(tmp_path / "trl"), max_steps=3, learning_rate=1e-3,
                          per_device_train_batch_size=2, max_length=12, bf16=False,
                          threads=1, train_sampling_strategy="sequential")
    strl.SFTTrainer(model=os.path.join(FIX, "tiny"), args=args, train_dataset=sft_rows()).train()
    keys = dict(args.streambp_config(), model=os.path.join(FIX, "tiny"),
                output_dir=str(tmp_path / "direct"))
    keys["data.train"] = sft_rows()
    streambp.train(keys)
    assert keys["max_tokens"] == 24 and keys["data.shuffle"] is False
    assert_same_weights(str(tmp_path / "trl"), str(tmp_path / "direct"))


def test_tensorboard_reader_loads_the_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    args = strl.SFTConfig(output_dir=str(tmp_path), max_steps=4, logging_steps=2,
                          report_to="tensorboard", threads=1, bf16=False)
    t = strl.SFTTrainer(model=os.path.join(FIX, "tiny"), args=args, train_dataset=sft_rows(),
                        eval_dataset=sft_rows()[:4])
    t.train()
    (logdir,) = glob.glob(str(tmp_path / "runs" / "*"))
    acc = EventAccumulator(logdir)
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("train/loss", "train/learning_rate", "train/grad_norm", "train/num_tokens",
                "train/tokens_per_second", "train/memory/total", "eval/loss"):
        assert tag in tags, (tag, sorted(tags))
    logged = [(h["step"], h["loss"]) for h in t.state.log_history if "loss" in h]
    read = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    assert [s for s, _ in read] == [s for s, _ in logged] == [2, 4]
    for (_, a), (_, b) in zip(read, logged):
        assert abs(a - b) <= 1e-6 * abs(b)  # event files hold float32


def test_wandb_offline_writes_its_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    args = strl.SFTConfig(output_dir=str(tmp_path), max_steps=2, logging_steps=1,
                          report_to="wandb", run_name="pytest", threads=1)
    strl.SFTTrainer(model=os.path.join(FIX, "tiny"), args=args, train_dataset=sft_rows()).train()
    runs = glob.glob(str(tmp_path / "wandb" / "offline-run-*"))
    assert len(runs) == 1 and glob.glob(os.path.join(runs[0], "*.wandb"))


def test_yaml_report_to_writes_tensorboard_and_the_program_refuses_it(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    cfg = {"model": os.path.join(FIX, "tiny"), "data": {"train": os.path.join(FIX,
                                                                             "sft_text.jsonl")},
           "output_dir": str(tmp_path / "run"), "max_steps": 2, "threads": 1,
           "report_to": "tensorboard"}
    streambp.train(cfg)
    (logdir,) = glob.glob(str(tmp_path / "run" / "runs" / "*"))
    acc = EventAccumulator(logdir)
    acc.Reload()
    lines = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
    read = [e.value for e in acc.Scalars("train/loss")]
    assert len(read) == 2 and all(abs(a - b["loss"]) <= 1e-6 * b["loss"]
                                  for a, b in zip(read, lines))
    with pytest.raises(streambp.Error, match="report_to: unknown 'mlflow'"):
        streambp.train(dict(cfg, report_to="mlflow", output_dir=str(tmp_path / "bad")))
    from conftest import run_cli
    yaml = tmp_path / "cfg.yaml"
    yaml.write_text(json.dumps(dict(cfg, output_dir=str(tmp_path / "cli"))))
    r = run_cli("train", str(yaml), check=False)
    assert r.returncode != 0 and "report_to: tensorboard is written by the Python package" \
        in r.stderr, r.stderr


def test_callbacks_resume_evaluate_and_save_model(tmp_path):
    events = []

    class Recorder:  # transformers.TrainerCallback's shape
        def on_train_begin(self, args, state, control, **kw):
            events.append("train_begin")

        def on_log(self, args, state, control, logs=None, **kw):
            events.append(("log", state.global_step))

        def on_evaluate(self, args, state, control, metrics=None, **kw):
            events.append(("evaluate", round(metrics["eval_loss"], 6)))

        def on_train_end(self, args, state, control, **kw):
            events.append("train_end")

    def make(steps, out):
        args = strl.SFTConfig(output_dir=str(out), max_steps=steps, logging_steps=1,
                              save_steps=2, learning_rate=1e-3, bf16=False, threads=1,
                              lr_scheduler_type="constant",  # the same for a run of 2 or 4
                              train_sampling_strategy="sequential", eval_strategy="steps",
                              eval_steps=2)
        return strl.SFTTrainer(model=os.path.join(FIX, "tiny"), args=args,
                               train_dataset=sft_rows(), eval_dataset=sft_rows()[:4],
                               callbacks=[Recorder])

    before = make(4, tmp_path / "a").evaluate()["eval_loss"]
    events.clear()
    a = make(4, tmp_path / "a")
    a.train()
    assert events[0] == "train_begin" and events[-1] == "train_end"
    assert ("log", 4) in events and sum(1 for e in events if e[0] == "evaluate") == 2  # steps 2 and 4
    after = a.evaluate()["eval_loss"]
    assert after < before
    # 2 steps, then resume_from_checkpoint to 4: the same weights as 4 at once.
    b = make(4, tmp_path / "b")
    b.args.max_steps = 2
    b.train()
    b.args.max_steps = 4
    b.train(resume_from_checkpoint=True)
    assert_same_weights(str(tmp_path / "a"), str(tmp_path / "b"))
    a.save_model(str(tmp_path / "final"))
    assert sorted(os.listdir(tmp_path / "final")) == ["config.json", "generation_config.json",
                                                      "model.safetensors", "tokenizer.json",
                                                      "tokenizer_config.json"]


@pytest.mark.parametrize("script", ["sft", "dpo", "grpo"])
def test_trl_quickstarts_run_to_completion(script, tmp_path):
    """examples/trl/*.py: TRL's quick starts with only the import (and the model and data)
    changed, each run to its end with TRL's defaults (3 epochs, its batch and lengths)."""
    import shutil
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), OMP_NUM_THREADS="1")
    out = os.path.join(ROOT, "trainer_output")
    shutil.rmtree(out, ignore_errors=True)
    try:
        r = subprocess.run([sys.executable, os.path.join("examples", "trl", script + ".py")],
                           cwd=ROOT, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "done: " in r.stdout
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_grpo_reward_funcs_are_called_as_trl_calls_them(tmp_path):
    """Conversational prompts: the reward gets the prompts as the dataset gave them (messages),
    completions as [{"role": "assistant", "content": text}], the other columns by name; its
    name and weight make rewards/<name>/mean."""
    prompts = [json.loads(x) for x in open(os.path.join(ROOT, "examples", "tiny-chat",
                                                        "arith_prompts.jsonl"))][:2]
    seen = []

    def exact(prompts, completions, answer, **kw):
        seen.append((prompts, completions, answer))
        return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]

    args = strl.GRPOConfig(output_dir=str(tmp_path), max_steps=2, num_generations=4,
                           per_device_train_batch_size=4, max_completion_length=8,
                           reward_weights=[0.5], threads=1, logging_steps=1)
    t = strl.GRPOTrainer(model=os.path.join(FIX, "tiny"), reward_funcs=exact, args=args,
                         train_dataset=prompts)
    t.train()
    p, c, a = seen[0]
    assert p[0] in [r["prompt"] for r in prompts] and len(p) == len(c) == len(a) == 4
    assert all(isinstance(x, list) and x[0]["role"] == "assistant" for x in c)
    logged = [h for h in t.state.log_history if "loss" in h]
    assert len(logged) == 2 and all("rewards/exact/mean" in h for h in logged)


def test_kto_and_orpo_trainers_run(tmp_path):
    for kind, data in (("KTO", "arith_unpaired.jsonl"), ("ORPO", "arith_preference.jsonl")):
        rows = [json.loads(x) for x in open(os.path.join(ROOT, "examples", "data", data))]
        args = getattr(strl, kind + "Config")(output_dir=str(tmp_path / kind), max_steps=2,
                                              logging_steps=1, threads=1, max_length=64)
        t = getattr(strl, kind + "Trainer")(model=os.path.join(FIX, "tiny"), args=args,
                                            train_dataset=rows)
        t.train()
        assert [h["step"] for h in t.state.log_history if "loss" in h] == [1, 2]


class FakeLoraConfig:
    """PEFT's LoraConfig read by its attributes (peft is not in the test venv)."""

    def __init__(self, **kw):
        self.r, self.lora_alpha, self.target_modules, self.lora_dropout = 8, 16, None, 0.0
        self.bias, self.use_rslora, self.task_type = "none", False, "CAUSAL_LM"
        self.__dict__.update(kw)


def test_peft_config_processing_class_and_hub_cache(tmp_path, monkeypatch):
    from streambp._trl_peft import lora_keys
    assert lora_keys(FakeLoraConfig(target_modules={"v_proj", "q_proj"})) == {
        "lora.r": 8, "lora.alpha": 16, "lora.use_rslora": False,
        "lora.target_modules": ["q_proj", "v_proj"]}
    with pytest.raises(streambp.Error, match="peft_config: lora_dropout=0.1: not supported"):
        lora_keys(FakeLoraConfig(lora_dropout=0.1))
    with pytest.raises(streambp.Error, match="peft_config: use_dora=True"):
        lora_keys(FakeLoraConfig(use_dora=True))
    # A Hub id whose snapshot is in the cache; a tokenizer object by its name_or_path.
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc\n")
    (repo / "snapshots").mkdir()
    os.symlink(os.path.join(FIX, "tiny"), repo / "snapshots" / "abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))

    class Tok:
        name_or_path = "org/tiny"

    args = strl.SFTConfig(output_dir=str(tmp_path / "out"), max_steps=1, threads=1)
    t = strl.SFTTrainer(model="org/tiny", args=args, train_dataset=sft_rows(),
                        processing_class=Tok(), peft_config=FakeLoraConfig())
    assert t.model == str(repo / "snapshots" / "abc")
    t.train()
    t.save_model(str(tmp_path / "adapter"))
    assert "adapter_model.safetensors" in os.listdir(tmp_path / "adapter")
    with pytest.raises(streambp.Error, match="not a directory, and no snapshot"):
        strl.SFTTrainer(model="org/absent", args=args, train_dataset=sft_rows())
    with pytest.raises(streambp.Error, match="data_collator: not supported by streambp"):
        strl.SFTTrainer(model="org/tiny", args=args, train_dataset=sft_rows(),
                        data_collator=object())


def test_accuracy_reward_judges_boxed_answers_and_numbers():
    from streambp.trl.rewards import accuracy_reward
    msg = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731
    got = accuracy_reward(
        [msg(r"so \boxed{\frac{1}{3}}"), msg(r"\boxed{\frac{1}{2}}"), "It is 1,000.",
         "the answer: +42", "no number", r"\boxed{5} then 7", msg(r"\boxed{0.5}")],
        [r"\frac{1}{3}", r"$\frac{1}{3}$", "1000", r"\boxed{42}", "3", "5", r"\frac{1}{2}"])
    assert got == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0]  # no symbolic equivalence (last case)

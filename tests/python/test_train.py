"""streambp.train: the trainer of `streambp train`, with Python rewards, callbacks and data."""
import json
import os
import re
import signal
import subprocess
import sys

import pytest

import streambp
from conftest import ROOT, assert_same_weights, grpo_config, latest_checkpoint, run_cli

SFT = dict(max_steps=3, eval_every=0, save_every=0, epochs=1)


def _sft_overrides(out):
    return [f"output_dir={out}", "max_steps=3", "eval_every=0", "save_every=0", "epochs=1"]


def test_sft_equals_cli_and_callbacks_get_every_line(tmp_path):
    run_cli("train", "examples/tiny-chat/sft.yaml", *_sft_overrides(tmp_path / "cli"))
    lines = []
    assert streambp.train("examples/tiny-chat/sft.yaml", output_dir=str(tmp_path / "py"),
                          callbacks=[lines.append], **SFT) == 0
    assert_same_weights(tmp_path / "cli", tmp_path / "py")
    written = [json.loads(l) for l in (tmp_path / "py" / "metrics.jsonl").read_text().splitlines()]
    assert lines == written
    assert [l["step"] for l in lines if "loss" in l] == [1, 2, 3]


def digits_to_e(prompts, completions, **kwargs):
    # The built-in format reward of grpo_config ("[0-9a-e]" anywhere), in Python.
    assert len(prompts) == len(completions) == len(kwargs["answer"])
    assert len(kwargs["completion_tokens"]) == len(completions)
    return [1.0 if re.search(r"[0-9a-e]", c) else 0.0 for c in completions]


def test_python_reward_trains_as_the_builtin_reward(tmp_path):
    # The built-in reward, by the program on the same config written to a file (JSON is YAML) ...
    cfg = grpo_config(tmp_path / "builtin")
    (tmp_path / "grpo.yaml").write_text(json.dumps(cfg))
    run_cli("train", tmp_path / "grpo.yaml")
    # ... and the same function in Python, in-process, with the same weight.
    py = grpo_config(tmp_path / "python", rewards=[])
    assert streambp.train(py, reward_funcs=[(digits_to_e, 0.5)]) == 0
    assert_same_weights(tmp_path / "builtin", tmp_path / "python")
    a = [json.loads(l) for l in (tmp_path / "builtin" / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(l) for l in (tmp_path / "python" / "metrics.jsonl").read_text().splitlines()]
    assert [l["rewards/format/mean"] for l in a] == [l["rewards/digits_to_e/mean"] for l in b]
    assert [l["reward"] for l in a] == [l["reward"] for l in b]
    # The rewards differ within the groups (else nothing trains and the test could not fail).
    assert any(0.0 < l["rewards/format/mean"] < 1.0 for l in a)


def test_reward_failure_is_an_error(tmp_path):
    def boom(prompts, completions, **kw):
        raise ValueError("no score today")

    def short(prompts, completions, **kw):
        return [1.0]

    with pytest.raises(streambp.Error, match=r"reward 'boom': ValueError: no score today"):
        streambp.train(grpo_config(tmp_path / "a", rewards=[]), reward_funcs=[boom])
    with pytest.raises(streambp.Error, match=r"reward 'short' returned 1 rewards for 8"):
        streambp.train(grpo_config(tmp_path / "b", rewards=[]), reward_funcs=[short])


def test_records_and_dataset_equal_the_jsonl_file(tmp_path):
    path = "examples/tiny-chat/train.jsonl"
    records = [json.loads(l) for l in open(os.path.join(ROOT, path))]
    streambp.train("examples/tiny-chat/sft.yaml", output_dir=str(tmp_path / "file"), **SFT)
    streambp.train("examples/tiny-chat/sft.yaml", output_dir=str(tmp_path / "list"),
                   data__train=records, **SFT)
    assert_same_weights(tmp_path / "file", tmp_path / "list")
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(records)
    streambp.train("examples/tiny-chat/sft.yaml", output_dir=str(tmp_path / "ds"),
                   data__train=ds, **SFT)
    assert_same_weights(tmp_path / "file", tmp_path / "ds")
    # In memory: the runs given records wrote what the file's run wrote, and no data file.
    def written(d):
        return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d)
                      for f in fs)
    assert written(tmp_path / "list") == written(tmp_path / "file")
    assert written(tmp_path / "ds") == written(tmp_path / "file")


def test_records_in_memory_errors_and_resume(tmp_path):
    records = [json.loads(l) for l in open(os.path.join(ROOT, "examples/tiny-chat/train.jsonl"))]
    # A bad record is named as the same line of a file would be: row 1 is line 2.
    bad = [records[0], {"messages": "not a list"}] + records[2:]
    with pytest.raises(streambp.Error, match=r"^data\.train \(in memory\):2: "):
        streambp.train("examples/tiny-chat/sft.yaml", output_dir=str(tmp_path / "bad"),
                       data__train=bad, **SFT)
    with pytest.raises(streambp.Error, match=r"data\.train: row 0 cannot be written as JSON"):
        streambp.train("examples/tiny-chat/sft.yaml", output_dir=str(tmp_path / "bad2"),
                       data__train=[{"text": object()}], **SFT)
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad2").exists()
    # Resuming: 2 steps, then on to 3, equals 3 steps at once; the records are given again.
    whole = dict(SFT, save_every=1)
    streambp.train("examples/tiny-chat/sft.yaml", output_dir=str(tmp_path / "once"),
                   data__train=records, **whole)
    streambp.train("examples/tiny-chat/sft.yaml", output_dir=str(tmp_path / "twice"),
                   data__train=records, **dict(whole, max_steps=2))
    ckpt = str(tmp_path / "twice" / "checkpoint-2")
    with pytest.raises(streambp.Error, match=r"data\.train \(in memory\): the run's records "
                       r"were given in memory .*data__train=records"):
        streambp.train(None, resume=ckpt, max_steps=3)
    r = run_cli("train", "--resume", ckpt, "max_steps=3", check=False)
    assert r.returncode != 0 and "give them again" in r.stderr
    with pytest.raises(streambp.Error, match=r"resuming from .*"):
        streambp.train(None, resume=ckpt, max_steps=3, data__train=records[1:])
    streambp.train(None, resume=ckpt, max_steps=3, data__train=records)
    assert_same_weights(tmp_path / "once", tmp_path / "twice")


def test_prompt_records_in_memory_equal_the_file(tmp_path):
    # Online GRPO reads its prompts from memory as from the file (prompt_records.h).
    prompts = [json.loads(l)
               for l in open(os.path.join(ROOT, "examples/tiny-chat/arith_prompts.jsonl"))]
    assert streambp.train(grpo_config(tmp_path / "file", max_steps=2)) == 0
    assert streambp.train(grpo_config(tmp_path / "list", max_steps=2), data__train=prompts) == 0
    assert_same_weights(tmp_path / "file", tmp_path / "list")


SIGINT_SCRIPT = r"""
import os, signal, sys
import streambp
def stop_at_step_2(line):
    if line.get("step") == 2 and "loss" in line:
        os.kill(os.getpid(), signal.SIGINT)
try:
    streambp.train("examples/tiny-chat/sft.yaml", output_dir=sys.argv[1], max_steps=50,
                   eval_every=0, save_every=0, callbacks=[stop_at_step_2])
except KeyboardInterrupt as e:
    print("interrupted:", e)
    sys.exit(7)
"""


def test_sigint_saves_and_stops(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", SIGINT_SCRIPT, str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 7, r.stdout + r.stderr
    assert "interrupted:" in r.stdout
    ckpt = latest_checkpoint(out)
    assert os.path.basename(ckpt) == "checkpoint-2"
    state = json.loads(open(os.path.join(ckpt, "trainer_state.json")).read())
    assert state["step"] == 2


def test_a_python_reward_run_resumes_exactly(tmp_path):
    # 3 steps at once, against 2 steps, a stop, and a resume with the checkpoint's own config
    # (which names the Python reward; the function is given again).
    whole = grpo_config(tmp_path / "whole", rewards=[])
    assert streambp.train(whole, reward_funcs=[(digits_to_e, 0.5)]) == 0
    part = grpo_config(tmp_path / "part", rewards=[], stop_after_steps=2)
    assert streambp.train(part, reward_funcs=[(digits_to_e, 0.5)]) == 0
    assert os.path.basename(latest_checkpoint(tmp_path / "part")) == "checkpoint-2"
    with pytest.raises(streambp.Error, match="python reward is a function"):
        streambp.train(None, resume=str(tmp_path / "part"))
    assert streambp.train(None, resume=str(tmp_path / "part"),
                          reward_funcs=[(digits_to_e, 0.5)]) == 0
    assert_same_weights(tmp_path / "whole", tmp_path / "part")

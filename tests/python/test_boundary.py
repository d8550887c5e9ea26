"""The package's boundary (python/streambp/_check.py, docs/PYTHON.md "What the functions
accept"): each bad argument is a streambp.Error naming the function, the argument and the row
or record, raised before anything runs; one test per function, each over a table of cases
(the call, the message it must match). Issue 54 item 2."""
import json
import math

import numpy as np
import pytest

import streambp
from conftest import grpo_config, run_cli

M = "tiny-qwen3"  # a preset: nothing is read before the arguments are checked


def _expect(cases):
    for call, message in cases:
        with pytest.raises(streambp.Error, match=message) as e:
            call()
        assert "\n" not in str(e.value), str(e.value)


def test_score_ids_masks_and_flags():
    seqs = [[1, 2, 3]]
    _expect([
        # ids pass no int(): 1.5 is not 1, "123" is not [1, 2, 3], True is not 1
        (lambda: streambp.score(M, [[1, 1.5]]),
         r"^score: sequences\[0\]\[1\]: a float \(1\.5\), not an integer$"),
        (lambda: streambp.score(M, [[4, 5], "123"]),
         r"^score: sequences\[1\]: a str \('123'\), not a row \(a list\): pass a list"),
        (lambda: streambp.score(M, "123"), r"^score: sequences: a str \('123'\), not a list"),
        (lambda: streambp.score(M, {"a": [1]}), r"^score: sequences: a dict .*, not a list"),
        (lambda: streambp.score(M, [[1, True]]), r"^score: sequences\[0\]\[1\]: a bool \(True\)"),
        (lambda: streambp.score(M, [np.array([1.0, 2.0])]),
         r"^score: sequences\[0\]\[0\]: a float64 \(.*1\.0\)+, not an integer"),
        (lambda: streambp.score(M, [[1, None]]), r"^score: sequences\[0\]\[1\]: a NoneType"),
        # masks: 0/1 or bools, not 0.5 -> 0 or "1"
        (lambda: streambp.score(M, seqs, loss_mask=[[1, 0.5, 1]]),
         r"^score: loss_mask\[0\]\[1\]: a float \(0\.5\), not an integer$"),
        (lambda: streambp.score(M, seqs, loss_mask=[["1", 0, 1]]),
         r"^score: loss_mask\[0\]\[0\]: a str"),
        (lambda: streambp.score(M, seqs, loss_mask="111"), r"^score: loss_mask: a str"),
        (lambda: streambp.score(M, seqs, grads="yes"),
         r"^score: grads: a str \('yes'\), not True or False$"),
        (lambda: streambp.score(5, seqs), r"^score: model: a int \(5\), not a path"),
        (lambda: streambp.score(M, seqs, adapter=b"dir"), r"^score: adapter: a bytes"),
        (lambda: streambp.score("a\0b", seqs), r"^score: model: character 1 is NUL"),
        # keywords: unknown, done by the function itself, or of the wrong kind
        (lambda: streambp.score(M, seqs, json="s.json"),
         r"^score: json: not an argument of streambp\.score: the results are returned"),
        (lambda: streambp.score(M, seqs, input="t.json"),
         r"^score: input: not an argument of streambp\.score: the sequences are its argument"),
        (lambda: streambp.score(M, seqs, no_such=1),
         r"^score: no_such: unknown keyword argument \(streambp score has no --no-such\)$"),
        (lambda: streambp.score(M, seqs, **{"layer-chunk": 16}),
         r"^score: layer-chunk: unknown keyword argument"),
        (lambda: streambp.score(M, seqs, layer_chunk=True),
         r"^score: layer_chunk: a bool \(True\) for a flag that takes a value$"),
        (lambda: streambp.score(M, seqs, layer_chunk=object()),
         r"^score: layer_chunk: a object .*, not a str, int, float or path$"),
        (lambda: streambp.score(M, seqs, precision="bf\udc8016"),
         r"^score: precision: character 2 is a lone surrogate"),
        # a value the command parses is its to judge: it reaches it unchanged (no int())
        (lambda: streambp.score(M, seqs, threads=1.5),
         r"^--threads: must be an integer from 0 to 4096, got '1\.5'"),
        (lambda: streambp.score(M, seqs, seed=[1, 2]), r"^--seed: At Most 1"),
    ])


def test_values_reach_the_command_as_the_command_line_gives_them(tmp_path):
    # seed=-1 is --seed=-1, whatever the command makes of it: the same error or the same loss.
    (tmp_path / "t.json").write_text(json.dumps({"sequences": [[1, 2, 3]]}))
    r = run_cli("score", "--model", M, "--input", tmp_path / "t.json", "--seed=-1", "--json",
                tmp_path / "s.json", check=False)
    try:
        got = streambp.score(M, [[1, 2, 3]], seed=-1)
    except streambp.Error as e:
        # The program adds " (see streambp --help)" to a flag's error; the module has no --help.
        assert r.returncode == 1 and r.stderr.strip().startswith("streambp: error: " + str(e))
        assert "must be an integer from 0" in str(e)  # -1 is refused, not wrapped
    else:
        assert r.returncode == 0, r.stderr
        assert got["loss"] == json.loads((tmp_path / "s.json").read_text())["loss"]
        assert got["loss"] != streambp.score(M, [[1, 2, 3]], seed=0)["loss"]


def test_score_accepts_numpy_and_tuples(tiny_model):
    seqs = [[5, 6, 7, 8], [9, 10, 11]]
    want = streambp.score(tiny_model, seqs, loss_mask=[[1, 1, 0, 1], [0, 1, 1]], threads=1)
    got = streambp.score(tiny_model, (np.array(seqs[0], dtype=np.int32), tuple(seqs[1])),
                         loss_mask=[np.array([True, True, False, True]), [False, True, True]],
                         threads=np.int64(1), layer_chunk=None)
    assert got["loss"] == want["loss"]


def test_generate_prompts_and_flags(tiny_model):
    tok = dict(tokenizer="examples/tiny-chat", max_new_tokens=2, threads=1)
    _expect([
        # a str is not a list of prompts (it was one prompt per character)
        (lambda: streambp.generate(M, "a prompt"),
         r"^generate: prompts: a str \('a prompt'\), not a list of prompts: pass a list, "
         r"\[str, \.\.\.\]$"),
        (lambda: streambp.generate(M, b"a prompt"), r"^generate: prompts: a bytes"),
        (lambda: streambp.generate(M, {"prompt": "x"}), r"^generate: prompts: a dict"),
        (lambda: streambp.generate(M, (p for p in ["x"])), r"^generate: prompts: a generator"),
        (lambda: streambp.generate(M, []), r"^generate: no prompts given$"),
        (lambda: streambp.generate(M, ["ok", 7]),
         r"^generate: prompts\[1\]: a int \(7\), not a text, a conversation, a list of token ids "
         r"or a record$"),
        (lambda: streambp.generate(M, ["ok", [1, 2.5]]),
         r"^generate: prompts\[1\]\[1\]: a float \(2\.5\), not an integer$"),
        (lambda: streambp.generate(M, ["ok", "bad\udc80"]),
         r"^generate: prompts\[1\]: cannot be written as JSON: prompt: character 3 is a lone "
         r"surrogate"),
        (lambda: streambp.generate(M, [[{"role": "user", "content": "\ud800"}]]),
         r"^generate: prompts\[0\]: cannot be written as JSON: prompt\[0\]\.content: "
         r"character 0 is a lone surrogate"),
        (lambda: streambp.generate(M, [{"prompt": "x", "w": math.nan}]),
         r"^generate: prompts\[0\]: cannot be written as JSON: w: nan is not a finite number"),
        (lambda: streambp.generate(M, [{"prompt": "x", 3: 1}]),
         r"^generate: prompts\[0\]: cannot be written as JSON: the key 3 is a int"),
        # keywords: --output was ignored; a switch takes a bool; a list one item per flag
        (lambda: streambp.generate(M, ["x"], output="o.jsonl"),
         r"^generate: output: not an argument of streambp\.generate: the results are returned"),
        (lambda: streambp.generate(M, ["x"], input="p.jsonl"), r"^generate: input: not an "),
        (lambda: streambp.generate(M, ["x"], outputs="o.jsonl"),
         r"^generate: outputs: unknown keyword argument \(streambp generate has no --outputs\)"),
        (lambda: streambp.generate(M, ["x"], greedy=1),
         r"^generate: greedy: a int \(1\), not True or False$"),
        (lambda: streambp.generate(M, ["x"], greedy="False"), r"^generate: greedy: a str"),
        (lambda: streambp.generate(M, ["x"], stop=["ok", object()]), r"^generate: stop\[1\]: "),
        (lambda: streambp.generate(M, ["x"], stop=["a\0b"]),
         r"^generate: stop\[0\]: character 1 is NUL"),
        (lambda: streambp.generate(tiny_model, ["x"], tokenizer="examples/tiny-chat\udcff"),
         r"^generate: tokenizer: character 18 is a lone surrogate"),
    ])
    # A value starting with '-' stays a value (--stop=-1, not a flag -1); None leaves a flag out.
    out = streambp.generate(tiny_model, ["x", [3, np.int64(4)]], stop=["-1"], seed=None, **tok)
    assert len(out) == 2 and all(len(o["ids"]) <= 2 for o in out)


def test_plan_and_main(tmp_path):
    _expect([
        (lambda: streambp.plan(model=["tiny-qwen3"]), r"^plan: model: a list"),
        (lambda: streambp.plan(M, json="p.json"),
         r"^plan: json: not an argument of streambp\.plan: the results are returned"),
        (lambda: streambp.plan(M, seq_lenn=64), r"^plan: seq_lenn: unknown keyword argument"),
        (lambda: streambp.plan(M, help=True), r"^plan: help: unknown keyword argument"),
        (lambda: streambp.plan(M, seq_len=False), r"^plan: seq_len: a bool \(False\) for a flag"),
        (lambda: streambp.plan(M, seq_len=b"64"), r"^plan: seq_len: a bytes"),
        (lambda: streambp.main("plan"),
         r"^main: argv: a str \('plan'\), not a list of arguments: pass a list"),
        (lambda: streambp.main(["plan", 3]), r"^main: argv\[1\]: a int \(3\), not a str$"),
    ])
    # An int, a float, a str: the flag's text as the command line would have it.
    run_cli("plan", "--model", M, "--seq-len", 64, "--budget", "8GiB", "--reserve", 0.5,
            "--json", tmp_path / "p.json")
    want = json.loads((tmp_path / "p.json").read_text())
    assert streambp.plan(M, seq_len=np.int32(64), budget="8GiB", reserve=0.5) == want


def test_train_arguments(tmp_path):
    def fn(prompts, completions, **kw):
        return [0.0] * len(completions)

    def train(config="examples/tiny-chat/sft.yaml", **kw):
        return lambda: streambp.train(config, output_dir=str(tmp_path / "run"), max_steps=1,
                                      **kw)

    grpo = grpo_config(tmp_path / "run", rewards=[])
    _expect([
        (train(5), r"^train: config: a int \(5\), not a path"),
        (train({1: 2}), r"^train: config: the key 1 is a int, not a str$"),
        (train({"optim": {"l r": 1}}), r"^train: config: optim: 'l r' is not a config key"),
        (train(**{"a=b": 1}), r"^train: a=b: 'a=b' is not a config key"),
        (train(resume=7), r"^train: resume: a int \(7\), not a path"),
        (train(optim__lr=object()),
         r"^train: optim\.lr: cannot be written as a config value: a object"),
        (train(optim__lr=math.inf),
         r"^train: optim\.lr: cannot be written as a config value: inf is not a finite number"),
        (train(tokenizer="a\0b"), r"^train: tokenizer: character 1 is NUL"),
        (train(tokenizer="a\udc80"), r"^train: tokenizer: .*character 1 is a lone surrogate"),
        # records: the row, and the field inside it
        (train(data__train=[{"text": "ok"}, 5]),
         r"^train: data\.train: row 1: a int \(5\), not a dict$"),
        (train(data__train=[{"text": "ok"}, {"text": "bad\udc80"}]),
         r"^train: data\.train: row 1 cannot be written as JSON: text: character 3 is a lone"),
        (train(data__train=[{"messages": [{"role": "user", "content": "\udc80"}]}]),
         r"^train: data\.train: row 0 cannot be written as JSON: messages\[0\]\.content: "),
        (train(data__eval=[{"text": "ok", 1: "x"}]),
         r"^train: data\.eval: row 0 cannot be written as JSON: the key 1 is a int"),
        (train(data__train=[]), r"^train: data\.train: the records given as data are empty$"),
        # reward functions, weights and callbacks: lists, callables, real numbers
        (train(grpo, reward_funcs=fn), r"^train: reward_funcs: a function .*, not a list"),
        (train(grpo, reward_funcs=["fn"]), r"^train: reward_funcs\[0\]: a str .* is not callable"),
        (train(grpo, reward_funcs=[fn], reward_weights=["0.5"]),
         r"^train: reward_weights\[0\]: a str \('0\.5'\), not a real number$"),
        (train(grpo, reward_funcs=[fn], reward_weights=[True]),
         r"^train: reward_weights\[0\]: a bool"),
        (train(grpo, reward_funcs=[fn], reward_weights=0.5), r"^train: reward_weights: a float"),
        (train(grpo, reward_funcs=[fn], reward_weights=[0.5, 1.0]),
         r"^train: reward_weights: 2 weights for 1 reward_funcs$"),
        (train(grpo, reward_funcs=[(fn, 0.5, 1)]), r"^train: reward_funcs\[0\]: a tuple of 3"),
        (train(grpo, reward_funcs=[(fn, "1")]), r"^train: reward_funcs\[0\]\[1\]: a str"),
        (train(grpo, reward_funcs=[(fn, 0.5)], reward_weights=[1.0]),
         r"^train: reward_funcs\[0\]: a weight in the pair and in reward_weights"),
        (train(callbacks=print), r"^train: callbacks: a builtin_function_or_method"),
        (train(callbacks=[print, 1]), r"^train: callbacks\[1\]: a int \(1\) is not callable$"),
    ])
    assert not (tmp_path / "run").exists()  # refused before the trainer started


def as_dict(prompts, completions, **kw):
    return {c: 1.0 for c in completions}


def as_text(prompts, completions, **kw):
    return "1" * len(completions)


def with_a_str(prompts, completions, **kw):
    return [0.5] + ["1"] + [0.5] * (len(completions) - 2)


def as_bools(prompts, completions, **kw):
    return [True] * len(completions)


def as_matrix(prompts, completions, **kw):
    return np.zeros((len(completions), 1))


def with_nan(prompts, completions, **kw):
    return [0.0, 0.0, math.nan] + [0.0] * (len(completions) - 3)


def test_reward_values(tmp_path):
    # What a reward function returns: a list of real numbers (a 1-D array will do), one per
    # completion; the first bad one is named by its completion's index in the batch.
    _expect([
        (lambda f=f: streambp.train(grpo_config(tmp_path / f.__name__, rewards=[]),
                                    reward_funcs=[f]), message)
        for f, message in [
            (as_dict, r"reward 'as_dict': returned a dict .*, not a list of numbers \(one per "
                      r"completion\);"),
            (as_text, r"reward 'as_text': returned a str \('11111111'\), not a list of numbers"),
            (with_a_str, r"reward 'with_a_str': completion 1: a str \('1'\), not a real number;"),
            (as_bools, r"reward 'as_bools': completion 0: a bool \(True\), not a real number;"),
            (as_matrix, r"reward 'as_matrix': returned a ndarray"),
            # NaN is the trainer's to refuse, as for every reward type
            (with_nan, r"reward 'with_nan' is not finite for completion 2;"),
        ]
    ])
    # numpy values are numbers: a float32 array trains.
    def as_array(prompts, completions, **kw):
        return np.array([float(len(c) % 2) for c in completions], dtype=np.float32)

    assert streambp.train(grpo_config(tmp_path / "array", rewards=[], max_steps=1),
                          reward_funcs=[as_array]) == 0

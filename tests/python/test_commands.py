"""plan, score, generate and the console entry point against the `streambp` program."""
import json
import re

import numpy as np
import pytest

import streambp
from conftest import grpo_config, read_safetensors, run_cli


def test_plan_is_what_plan_json_writes(tmp_path):
    flags = dict(seq_len=512, budget="8GiB", modes="checkpoint,stream", dtype="bf16")
    got = streambp.plan(model="tiny-qwen3", **flags)
    run_cli("plan", "--model", "tiny-qwen3", "--seq-len", 512, "--budget", "8GiB",
            "--modes", "checkpoint,stream", "--dtype", "bf16", "--json", tmp_path / "p.json")
    want = json.loads((tmp_path / "p.json").read_text())
    assert got == want
    assert got["modes"]["stream"]["peak_bytes"] < got["modes"]["checkpoint"]["peak_bytes"]


def _sequences(vocab, seed=0):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, vocab, size=n).tolist() for n in (23, 9, 40)]
    mask = [[int(rng.random() < 0.7) for _ in s] for s in seqs]
    return seqs, mask


def test_score_equals_cli_bit_for_bit(tiny_model, tmp_path):
    seqs, mask = _sequences(512)
    (tmp_path / "t.json").write_text(json.dumps({"sequences": seqs, "loss_mask": mask}))
    run_cli("score", "--model", tiny_model, "--input", tmp_path / "t.json", "--threads", 1,
            "--layer-chunk", 16, "--json", tmp_path / "s.json", "--grads", tmp_path / "g.safetensors")
    want = json.loads((tmp_path / "s.json").read_text())
    want_grads = read_safetensors(tmp_path / "g.safetensors")

    got = streambp.score(tiny_model, seqs, loss_mask=mask, grads=True, threads=1, layer_chunk=16)
    assert got["loss"] == want["loss"]
    assert got["num_loss_tokens"] == want["num_loss_tokens"] > 0
    assert len(got["logprobs"]) == len(seqs)
    for g, w, s in zip(got["logprobs"], want["logprobs"], seqs):
        assert g.dtype == np.float32 and g.shape == (len(s) - 1,)
        assert np.array_equal(g, np.asarray(w, dtype=np.float32))  # JSON doubles hold floats exactly
    assert got["grads"].keys() == want_grads.keys()
    for name, w in want_grads.items():
        assert got["grads"][name].shape == w.shape, name
        assert np.array_equal(got["grads"][name], w), name
    assert any(np.abs(w).max() > 0 for w in want_grads.values())

    # Without gradients: a forward alone (NumPy arrays in), as the program's forward alone.
    run_cli("score", "--model", tiny_model, "--input", tmp_path / "t.json", "--threads", 1,
            "--layer-chunk", 16, "--json", tmp_path / "f.json")
    want = json.loads((tmp_path / "f.json").read_text())
    fwd = streambp.score(tiny_model, [np.asarray(s) for s in seqs], loss_mask=mask,
                         threads=1, layer_chunk=16)
    assert "grads" not in fwd and fwd["loss"] == want["loss"]
    for g, w in zip(fwd["logprobs"], want["logprobs"]):
        assert np.array_equal(g, np.asarray(w, dtype=np.float32))


def test_generate_equals_cli(tiny_model, tmp_path):
    prompts = [[{"role": "user", "content": "What is 2 plus 3?"}], "What is 4 plus 1?"]
    flags = dict(tokenizer="examples/tiny-chat", max_new_tokens=6, num_return_sequences=2,
                 seed=3, threads=1)
    got = streambp.generate(tiny_model, prompts, **flags)
    (tmp_path / "p.jsonl").write_text(
        json.dumps({"prompt": prompts[0]}) + "\n" + json.dumps({"prompt": prompts[1]}) + "\n")
    run_cli("generate", "--model", tiny_model, "--input", tmp_path / "p.jsonl", "--output",
            tmp_path / "o.jsonl", "--tokenizer", "examples/tiny-chat", "--max-new-tokens", 6,
            "--num-return-sequences", 2, "--seed", 3, "--threads", 1)
    want = [json.loads(l) for l in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert g["ids"] == w["ids"] and g["completion"] == w["completion"]
        assert np.array_equal(g["logprobs"], np.asarray(w["logprobs"], dtype=np.float32))
        assert (g["index"], g["sample"]) == (w["index"], w["sample"])
    # The prompts go over in memory, as a file's lines: a bad one is named by its line.
    with pytest.raises(streambp.Error, match=r"^prompts \(in memory\):2: prompt_ids\[0\] = "
                                             r"1000000 is not a token id"):
        streambp.generate(tiny_model, ["fine", [1000000]], **flags)


def test_errors_are_streambp_error_with_the_cli_message(tmp_path):
    with pytest.raises(streambp.Error) as e:
        streambp.plan(model="no-such-model-dir", seq_len=64)
    r = run_cli("plan", "--model", "no-such-model-dir", "--seq-len", 64, check=False)
    assert r.returncode == 1
    assert r.stderr.strip() == "streambp: error: " + str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(streambp.Error, match="--no-such-flag"):
        streambp.plan(model="tiny-qwen3", no_such_flag=3)
    with pytest.raises(streambp.Error, match=r"sequences\[0\]\[1\]"):
        streambp.score("tiny-qwen3", [[1, 100000]])
    with pytest.raises(streambp.Error, match="unknown key 'optim.lrr'"):
        streambp.train("examples/tiny-chat/sft.yaml", optim__lrr=1.0,
                       output_dir=str(tmp_path / "x"))
    with pytest.raises(streambp.Error, match="python reward is a function"):
        streambp.train(grpo_config(tmp_path / "y", rewards=[{"type": "python"}]))


def test_console_entry_point(capfd):
    assert streambp.main(["plan", "--model", "tiny-qwen3", "--seq-len", "128"]) == 0
    out = capfd.readouterr().out
    assert re.search(r"\| stream \|", out)
    assert streambp.main(["train", "no-such.yaml"]) == 1
    assert "streambp: error:" in capfd.readouterr().err

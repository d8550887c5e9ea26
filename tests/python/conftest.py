"""The Python package's tests (docs/PYTHON.md): run by scripts/test.sh as
    PYTHONPATH=build/python .venv-python/bin/python -m pytest tests/python
against the release tree's extension, from the repository root. Each result is compared with
the `streambp` program's own (STREAMBP_CLI, default build/streambp) on tiny models."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli_path():
    return os.environ.get("STREAMBP_CLI", os.path.join(ROOT, "build", "streambp"))


def run_cli(*args, check=True):
    """The program itself, from the repository root (the example configs' paths are relative).

    The tests compare its output with the module's bit for bit, which holds when both run the
    same OpenBLAS kernels: the program re-executes itself with OPENBLAS_CORETYPE set when OpenBLAS
    chose a generic core for the CPU (src/backend/blas_core_check.h), which a Python process
    cannot do for itself, so here the program keeps the kernels OpenBLAS chose, as the module
    does (STREAMBP_BLAS_CORE_CHOSEN marks the choice as made)."""
    env = dict(os.environ, STREAMBP_BLAS_CORE_CHOSEN="1")
    r = subprocess.run([cli_path(), *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                       env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"streambp {' '.join(map(str, args))}: exit {r.returncode}\n"
                             f"{r.stdout}\n{r.stderr}")
    return r


def read_safetensors(path):
    """{name: float32 array} of an F32 safetensors file: read here, independently of the
    library (8-byte header length, JSON header, raw little-endian data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", name
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + a:8 + n + b], dtype="<f4").reshape(e["shape"])
    return out


def latest_checkpoint(output_dir):
    ckpts = [d for d in os.listdir(output_dir) if d.startswith("checkpoint-")]
    assert ckpts, f"no checkpoint in {output_dir}"
    return os.path.join(output_dir, max(ckpts, key=lambda d: int(d.split("-")[1])))


def assert_same_weights(dir_a, dir_b):
    a = read_safetensors(os.path.join(latest_checkpoint(dir_a), "model.safetensors"))
    b = read_safetensors(os.path.join(latest_checkpoint(dir_b), "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def grpo_config(output_dir, **changes):
    """Online GRPO of the tiny chat model (random weights) on the arithmetic prompts, a few
    short steps, scored by a built-in format reward with weight 0.5."""
    c = {
        "model": "examples/tiny-chat/config.json",
        "tokenizer": "examples/tiny-chat",
        "output_dir": str(output_dir),
        "data": {"train": "examples/tiny-chat/arith_prompts.jsonl"},
        "objective": "grpo",
        "grpo": {"num_generations": 4, "prompts_per_step": 2, "max_completion_length": 8},
        "rewards": [{"type": "format", "pattern": "[0-9a-e]", "weight": 0.5}],
        "mode": "stream",
        "layer_chunk": 32,
        "head_chunk": 32,
        "max_tokens": 256,
        "max_steps": 3,
        "optim": {"lr": 1.0e-2},
        "schedule": {"type": "constant"},
        "seed": 0,
        "threads": 1,
    }
    c.update(changes)
    return c


@pytest.fixture(autouse=True)
def _run_from_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # example configs name their files relative to the root
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A Hugging Face directory of the tiny chat model (random weights, seed 0)."""
    out = tmp_path_factory.mktemp("model") / "tiny"
    run_cli("init", "--config", "examples/tiny-chat/config.json", "--out", out, "--seed", "0")
    return str(out)

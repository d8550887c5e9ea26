"""What a Python reward function costs next to the built-in reward (docs/PYTHON.md "Overhead").

The tiny GRPO example's shape (examples/tiny-chat/arith-grpo.yaml: 8 prompts x 8 completions of
up to 24 tokens per step, one thread) from the tiny chat model's random weights, scored by the
built-in format reward or by the same function in Python, in-process; runs interleaved
(built-in, Python, built-in, ...) so that drift of the machine hits both alike. Prints the median
step time of each and the difference. Both runs train the same weights (the rewards are equal).

    PYTHONPATH=build/python .venv-python/bin/python tools/python_reward_overhead.py [--rounds 5]
"""
import argparse
import os
import re
import statistics
import tempfile

import time

import streambp
import streambp._train as _train

# The whole Python side of one reward call (keyword arguments built, the function, the result
# checked), timed by wrapping the adapter the extension calls.
_reward_call = _train._reward_call
CALLS = []


def _timed_reward_call(*args):
    t0 = time.perf_counter()
    try:
        return _reward_call(*args)
    finally:
        CALLS.append(time.perf_counter() - t0)


_train._reward_call = _timed_reward_call


def digits(prompts, completions, **kwargs):
    return [1.0 if re.search(r"[0-9]", c) else 0.0 for c in completions]


def config(out, steps):
    return {
        "model": "examples/tiny-chat/config.json",
        "tokenizer": "examples/tiny-chat",
        "output_dir": out,
        "data": {"train": "examples/tiny-chat/arith_prompts.jsonl"},
        "objective": "grpo",
        "grpo": {"num_generations": 8, "prompts_per_step": 8, "max_completion_length": 24,
                 "beta": 0.04},
        "rewards": [{"type": "format", "pattern": "[0-9]"}],
        "mode": "stream", "layer_chunk": 256, "head_chunk": 128, "max_tokens": 1024,
        "max_steps": steps, "optim": {"lr": 3.0e-4}, "schedule": {"type": "constant"},
        "seed": 0, "threads": 1,
    }


def run(python_reward, steps, tmp, i):
    times = []
    cfg = config(os.path.join(tmp, f"{'py' if python_reward else 'builtin'}-{i}"), steps)
    record = lambda line: "step_time_s" in line and times.append(line["step_time_s"])
    if python_reward:
        cfg["rewards"] = []
        streambp.train(cfg, reward_funcs=[digits], callbacks=[record])
    else:
        streambp.train(cfg, callbacks=[record])
    return times[1:]  # the first step warms up


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    builtin, python = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            builtin += run(False, a.steps, tmp, i)
            python += run(True, a.steps, tmp, i)
    b, p = statistics.median(builtin), statistics.median(python)
    print(f"built-in reward: median step {b * 1e3:.2f} ms ({len(builtin)} steps)")
    print(f"Python reward:   median step {p * 1e3:.2f} ms ({len(python)} steps)")
    print(f"Python reward overhead: {100 * (p - b) / b:+.2f}%")
    c = statistics.median(CALLS)
    print(f"one Python reward call (64 completions): median {c * 1e3:.3f} ms = "
          f"{100 * c / b:.2f}% of a step")


if __name__ == "__main__":
    main()

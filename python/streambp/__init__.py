"""streambp: exact, memory-efficient long-sequence fine-tuning (StreamBP), from Python.

The same C++ library as the `streambp` program (docs/PYTHON.md):

    import streambp
    streambp.plan(model="qwen3-8b", dtype="bf16", budget="80GiB")     # what `plan --json` writes
    streambp.score("my-model", [[1, 2, 3]], grads=True)               # NumPy log-probs, gradients
    streambp.generate("my-model", ["What is 2 plus 3?"], max_new_tokens=16)
    streambp.train("examples/tiny-chat/sft.yaml", epochs=1)
    streambp.train(cfg, reward_funcs=[my_reward])                     # TRL's reward signature

Every error is a streambp.Error with the command line's one-line message.
"""
from ._core import Error

Error.__module__ = "streambp"  # streambp.Error, as it is imported
from ._commands import generate, plan, score
from ._train import train


def main(argv=None):
    """The `streambp` command line (the wheel's console script): returns its exit code."""
    import sys

    from . import _core

    args = list(sys.argv[1:] if argv is None else argv)
    return _core.main(["streambp"] + args)


__all__ = ["Error", "plan", "score", "generate", "train", "main"]


def _console_main():
    import sys

    sys.exit(main())

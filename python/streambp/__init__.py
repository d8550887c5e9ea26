"""streambp: exact, memory-efficient long-sequence fine-tuning (StreamBP), from Python.

The same C++ library as the `streambp` program (docs/PYTHON.md):

    import streambp
    streambp.plan(model="qwen3-8b", dtype="bf16", budget="80GiB")     # what `plan --json` writes
    streambp.score("my-model", [[1, 2, 3]], grads=True)               # NumPy log-probs, gradients
    streambp.generate("my-model", ["What is 2 plus 3?"], max_new_tokens=16)
    streambp.train("examples/tiny-chat/sft.yaml", epochs=1)
    streambp.train(cfg, reward_funcs=[my_reward])                     # TRL's reward signature
    from streambp.trl import SFTConfig, SFTTrainer                    # TRL's trainers, by name

Every error is a streambp.Error with the command line's one-line message; an argument of the
wrong type (a float for a token id, a str for a list of prompts, an unknown keyword) is one too,
naming the argument and the row (docs/PYTHON.md "What the functions accept").
"""

def _check_cpu():
    """Refuse, with a sentence, a CPU without the instructions the extension was compiled for
    (a wheel is built for x86-64-v3: scripts/build-wheel.sh); loading it would die of SIGILL."""
    try:
        from ._arch import ARCH
    except ImportError:  # a tree without the file: built here, for this machine
        return
    levels = {
        "x86-64-v2": ["cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"],
    }
    levels["x86-64-v3"] = levels["x86-64-v2"] + [
        "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"]
    need = levels.get(ARCH)
    if not need:
        return
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), None)
    except OSError:
        return
    if flags is None:
        return
    missing = [x for x in need if x not in flags]
    if missing:
        raise ImportError(
            "streambp: this build needs an %s CPU (AVX2 and FMA: Intel Haswell or AMD Zen and "
            "later); this CPU lacks %s. Build it from source instead (`pip install .` in a checkout "
            "compiles for this machine)" % (ARCH, " ".join(missing)))


_check_cpu()

from ._core import Error  # noqa: E402

Error.__module__ = "streambp"  # streambp.Error, as it is imported
from ._commands import generate, plan, score
from ._train import train


def main(argv=None):
    """The `streambp` command line (the wheel's console script): returns its exit code."""
    import sys

    from . import _check, _core

    if argv is None:
        argv = sys.argv[1:]
    args = [_check.argument(a, f"main: argv[{i}]")
            for i, a in enumerate(_check.sequence(argv, "main: argv", "a list of arguments"))]
    return _core.main(["streambp"] + args)


__all__ = ["Error", "plan", "score", "generate", "train", "main"]


def _console_main():
    import sys

    sys.exit(main())

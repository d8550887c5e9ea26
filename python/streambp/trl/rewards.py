"""Reward functions by the names of TRL's `trl.rewards`, for GRPOTrainer(reward_funcs=...): TRL's
quick start imports `from trl.rewards import accuracy_reward`, which becomes
`from streambp.trl.rewards import accuracy_reward`. Our own code, not TRL's: TRL judges with
math_verify (symbolic equivalence); this judge compares answers as text or numbers."""
import re

_BOXED = re.compile(r"\\boxed\{")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?|[-+]?\.\d+")


def _last_boxed(text):
    """The content of the last \\boxed{...}, braces balanced; None without one."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    i, depth = starts[-1], 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def _normal(answer):
    a = answer.strip().strip("$").strip().rstrip(".").replace(" ", "")
    a = a[1:] if a.startswith("+") else a
    try:
        return float(a.replace(",", ""))  # 1,000 and 1000.0 are 1000
    except ValueError:
        return a


def _answer(text):
    boxed = _last_boxed(text)
    if boxed is not None:
        return _normal(boxed)
    numbers = _NUMBER.findall(text)
    return _normal(numbers[-1]) if numbers else None


def _text(completion):
    # TRL's completions are [{"role": "assistant", "content": ...}] for conversational data.
    if isinstance(completion, list):
        return "".join(m.get("content") or "" for m in completion if isinstance(m, dict))
    return completion


def accuracy_reward(completions, solution, **kwargs):
    """1.0 where the completion's answer equals the solution, else 0.0 (TRL's signature).

    The completion's answer is its last \\boxed{...}, else its last number; the solution's is
    its last \\boxed{...}, else its whole text. Both are compared after dropping spaces, `$`, a
    leading `+` and a final `.`, as numbers when both are numbers (so 1,000 equals 1000.0).
    Unlike TRL, an unparsable solution scores 0.0, not None: streambp refuses a missing reward.
    No symbolic equivalence: 1/2 and 0.5 differ here."""
    out = []
    for c, s in zip(completions, solution):
        gold = _last_boxed(s)
        gold = _normal(gold if gold is not None else s)
        got = _answer(_text(c))
        out.append(1.0 if got is not None and got == gold else 0.0)
    return out

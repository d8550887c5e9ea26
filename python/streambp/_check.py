"""The package's boundary (docs/PYTHON.md "What the functions accept"): every argument of plan,
score, generate and train, and every value a Python reward function returns, goes through these
checks once, before anything reaches the C++ library. They check types, nothing else: an integer
is an int, a list is a list, a text is UTF-8. Values (a token id inside the vocabulary, a seed
that is not negative, a budget that is not 0) are the library's to judge, with the command
line's messages, so nothing here converts or drops a value the library would refuse (seed=-1
stays -1, "" stays ""). A refusal is a streambp.Error naming the function, the argument and
the index of the row or record: "score: sequences[2][5]: a float (1.5), not an integer".

numpy: its integer and floating scalars count as ints and floats, a 1-D array as a list;
numpy.bool_ as bool. bool is not an integer or a number here (True is no token id, no reward),
except in a loss mask and in JSON records and config values, where it is a bool."""
import math
import os
import re

import numpy as np

from . import _core


def fail(where, problem):
    raise _core.Error(f"{where}: {problem}")


def kind(v):
    """'a float (1.5)': the type and a short repr of a refused value."""
    r = repr(v)
    if len(r) > 40:
        r = r[:37] + "..."
    return f"a {type(v).__name__} ({r})"


def is_bool(v):
    return isinstance(v, (bool, np.bool_))


def integer(v, where):
    """An int or numpy integer, not a bool, float or string: returned as int."""
    if is_bool(v) or not isinstance(v, (int, np.integer)):
        fail(where, f"{kind(v)}, not an integer")
    return int(v)


def real(v, where):
    """An int or float (or numpy's), not a bool or string: returned as float. Finiteness is the
    library's to judge."""
    if is_bool(v) or not isinstance(v, (int, float, np.integer, np.floating)):
        fail(where, f"{kind(v)}, not a real number")
    return float(v)


def boolean(v, where):
    if not is_bool(v):
        fail(where, f"{kind(v)}, not True or False")
    return bool(v)


def sequence(v, where, hint="a list"):
    """A list, tuple or numpy array (of one dimension or more: its rows), returned as a list.
    A str, bytes or dict is refused: iterating them would give characters or keys."""
    if isinstance(v, np.ndarray):
        if v.ndim == 0:
            fail(where, f"a 0-D array, not {hint}")
        return list(v)
    if isinstance(v, (str, bytes, bytearray)):
        fail(where, f"{kind(v)}, not {hint}: pass a list, [{type(v).__name__}, ...]")
    if not isinstance(v, (list, tuple)):
        fail(where, f"{kind(v)}, not {hint}")
    return list(v)


def text(v, where):
    """A str that is UTF-8 text: a lone surrogate (from a surrogateescape decoding) has no UTF-8
    form and would not reach the library as text."""
    if not isinstance(v, str):
        fail(where, f"{kind(v)}, not a str")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        fail(where, f"character {e.start} is a lone surrogate ({v[e.start]!r}), not UTF-8 text")
    return v


def argument(v, where):
    """A text that becomes one word of the command line: no NUL (a C string would end there)."""
    text(v, where)
    if "\0" in v:
        fail(where, f"character {v.index(chr(0))} is NUL, which no path or flag holds")
    return v


def path(v, where):
    """A str or os.PathLike (a str path): returned as str."""
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if not isinstance(v, str):
        fail(where, f"{kind(v)}, not a path (a str or os.PathLike)")
    return argument(v, where)


def function(v, where):
    if not callable(v):
        fail(where, f"{kind(v)} is not callable")
    return v


class NotJson(Exception):
    """A value without a JSON form: `at` is its place inside the value ("" for the value
    itself, "messages[0].content"), `problem` what is wrong."""

    def __init__(self, at, problem):
        super().__init__(f"{at}: {problem}" if at else problem)


def _at(base, key):
    return f"{base}.{key}" if base else str(key)


def json_value(v, at=""):
    """v as plain JSON values (numpy scalars and arrays become Python's); NotJson names the
    first place without a JSON form: a key that is not a str, a float that is not finite (JSON
    has none), bytes, text that is not UTF-8, any other object."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            raise NotJson(at, f"{float(v)} is not a finite number (JSON has none)")
        return float(v)
    if isinstance(v, str):
        try:
            return text(v, at or "text")
        except _core.Error as e:
            raise NotJson(at, str(e).split(": ", 1)[1]) from None
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise NotJson(at, f"the key {k!r} is a {type(k).__name__}, not a str")
            out[json_value(k, _at(at, "<key>"))] = json_value(x, _at(at, k))
        return out
    if isinstance(v, (list, tuple, np.ndarray)):
        if isinstance(v, np.ndarray) and v.ndim == 0:
            return json_value(v.item(), at)
        return [json_value(x, f"{at}[{i}]") for i, x in enumerate(v)]
    raise NotJson(at, f"{kind(v)} has no JSON form")


# A keyword argument's name as a flag's: lower case, digits and underscores (for dashes).
_KEYWORD = re.compile(r"[a-z][a-z0-9_]*\Z")


def _flag_value(v, where):
    """One value of a flag as its text, exactly (seed=-1 is "-1", "" is ""): the command checks it."""
    if is_bool(v):
        fail(where, f"{kind(v)} for a flag that takes a value")
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, (str, os.PathLike)):
        return path(v, where)
    fail(where, f"{kind(v)}, not a str, int, float or path")


def flags(command, kwargs, not_here):
    """Keyword arguments of plan / score / generate as `command`'s flags, by the command's own
    table (_core.command_flags): name=value is --name=value (one word, so that a value starting
    with '-' stays a value), a list or tuple one --name=item per item; a switch takes True (the
    bare flag) or False (left out); None leaves any flag out (its default). An unknown keyword
    and one of `not_here` ({keyword: why}: flags whose work the function does itself, as
    --output) are refused by name."""
    table = dict(_core.command_flags(command))
    argv = []
    for key, value in kwargs.items():
        where = f"{command}: {key}"
        if key in not_here:
            fail(where, f"not an argument of streambp.{command}: {not_here[key]}")
        name = key.replace("_", "-")
        if not _KEYWORD.match(key) or name not in table:
            fail(where, f"unknown keyword argument (streambp {command} has no --{name})")
        if value is None:
            continue
        if not table[name]:
            if boolean(value, where):
                argv.append(f"--{name}")
            continue
        if isinstance(value, (list, tuple)):
            argv += [f"--{name}={_flag_value(v, f'{where}[{i}]')}" for i, v in enumerate(value)]
        else:
            argv.append(f"--{name}={_flag_value(value, where)}")
    return argv


def rewards(got):
    """What a reward function returned (python/streambp/_train.py _reward_call): a list, tuple
    or 1-D array of real numbers, None for TRL's "no reward" (NaN, which the trainer refuses as
    every non-finite reward, naming the completion). The count is the trainer's to check."""
    if not isinstance(got, (list, tuple, np.ndarray)) or getattr(got, "ndim", 1) != 1:
        raise _core.Error(f"returned {kind(got)}, not a list of numbers (one per completion)")
    return [math.nan if x is None else real(x, f"completion {i}") for i, x in enumerate(got)]

"""The config classes of streambp.trl: TRL's field names and defaults (_trl_defaults.py, read
from TRL itself) plus streambp's own settings, checked when the object is made, as TRL's
__post_init__ checks them."""
import copy

from . import _core
from ._trl_defaults import DEFAULTS, TRL_VERSION
from ._trl_fields import ACCEPTED, EXTRA, streambp_keys


class TRLConfig:
    """Base of SFTConfig, DPOConfig, ...: `kind` names the TRL class whose fields it has."""

    kind = None

    def __init__(self, output_dir=None, **fields):
        table = DEFAULTS[self.kind]
        for name, default in table.items():
            setattr(self, name, copy.deepcopy(default))
        for name, (default, _) in EXTRA.items():
            setattr(self, name, default)
        if output_dir is not None:
            fields["output_dir"] = output_dir
        for name, value in fields.items():
            if name in EXTRA or name in ACCEPTED[self.kind]:
                setattr(self, name, value)
            elif name in table:
                if not _same(value, table[name]):
                    raise _core.Error(
                        f"{self.kind}: {name}: a TRL field streambp does not support (given "
                        f"{value!r}; only TRL's default {table[name]!r} is accepted)")
                setattr(self, name, value)
            else:
                raise _core.Error(
                    f"{self.kind}: {name}: not a field of TRL {TRL_VERSION}'s {self.kind} nor "
                    f"one of streambp's ({', '.join(EXTRA)})")
        try:
            self.streambp_config()  # every accepted field checked now, not at train()
        except _core.Error as e:
            raise _core.Error(f"{self.kind}: {e}") from None

    def streambp_config(self):
        """The streambp train config keys (dotted) these fields give (docs/TRAINING.md)."""
        return streambp_keys(self.kind, self)

    def to_dict(self):
        names = list(DEFAULTS[self.kind]) + list(EXTRA)
        return {n: getattr(self, n) for n in names}

    def __repr__(self):
        changed = {n: v for n, v in self.to_dict().items()
                   if not _same(v, DEFAULTS[self.kind].get(n, EXTRA.get(n, (None,))[0]))}
        return f"{self.kind}({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


def _same(a, b):
    # An enum given for a string field (transformers' IntervalStrategy) is its value.
    a = getattr(a, "value", a)
    try:
        return bool(a == b) and type(a) is not bool or a is b
    except Exception:  # an object without a truthful ==
        return False


def make(kind):
    return type(kind, (TRLConfig,), {"kind": kind, "__module__": "streambp.trl",
                                     "__doc__": f"TRL {TRL_VERSION}'s {kind}: its field names "
                                                f"and defaults, and streambp's own "
                                                f"({', '.join(EXTRA)})."})

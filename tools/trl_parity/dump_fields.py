"""Writes python/streambp/_trl_defaults.py: every field of TRL's configs (SFTConfig, DPOConfig,
GRPOConfig, KTOConfig, ORPOConfig) with TRL's default, read from the installed TRL
(tools/trl_parity/requirements.txt). streambp.trl takes its field names and defaults from that
table, so it needs neither TRL nor torch; a field the table has and streambp does not map is
refused by name (python/streambp/_trl_fields.py).

    /path/to/venv-with-trl/bin/python tools/trl_parity/dump_fields.py
"""
import dataclasses
import os
import pprint

import transformers
import trl
from trl import DPOConfig, GRPOConfig, KTOConfig, SFTConfig
from trl.experimental.orpo import ORPOConfig

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "python", "streambp", "_trl_defaults.py")


def defaults(cls):
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            d = f.default
        elif f.default_factory is not dataclasses.MISSING:
            d = f.default_factory()
        else:
            d = None
        if hasattr(d, "value"):  # an enum (transformers' OptimizerNames, ...): its string
            d = d.value
        out[f.name] = d
    return out


tables = {c.__name__: defaults(c)
          for c in (SFTConfig, DPOConfig, GRPOConfig, KTOConfig, ORPOConfig)}
with open(OUT, "w") as f:
    f.write(f'"""Written by tools/trl_parity/dump_fields.py from TRL {trl.__version__} '
            f'(transformers {transformers.__version__}): every field of each TRL config with its '
            'default, in TRL\'s order. Data, not code: regenerate it, do not edit it."""\n\n')
    f.write(f"TRL_VERSION = {trl.__version__!r}\n\n")
    f.write("DEFAULTS = " + pprint.pformat(tables, sort_dicts=False, width=100) + "\n")
print("wrote", os.path.normpath(OUT))

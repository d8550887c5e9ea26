"""streambp.train(): the trainer of `streambp train`, with reward functions and callbacks in
this Python process (python/src/streambp_module.cpp)."""
import json
import os

from . import _core


def _flatten(prefix, value, out):
    # {"optim": {"lr": 1e-3}} -> optim.lr; lists (rewards, optim.betas) stay values.
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def _is_records(value):
    """A list of dicts or a datasets.Dataset (anything with to_list and column_names)."""
    if hasattr(value, "to_list") and hasattr(value, "column_names"):
        return True
    return isinstance(value, (list, tuple)) and all(isinstance(r, dict) for r in value)


def _records_text(records, key):
    """The records as the JSONL lines a file of them would hold, one row per line, in memory:
    the trainer reads them with the file's parser (row i is line i + 1 of "<key> (in memory)").
    A datasets.Dataset is read row by row (no copy of the whole table as Python dicts)."""
    lines = []
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise _core.Error(f"{key}: row {i} is a {type(r).__name__}, not a dict")
        try:
            lines.append(json.dumps(r, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError) as e:
            raise _core.Error(f"{key}: row {i} cannot be written as JSON: {e}") from None
    if not lines:
        raise _core.Error(f"{key}: the records given as data are empty")
    return "\n".join(lines) + "\n"


def _value(v):
    # key=value overrides are YAML; JSON is YAML (a string stays a string whatever it holds).
    return json.dumps(v) if not isinstance(v, os.PathLike) else json.dumps(os.fspath(v))


def _reward_call(fn, prompts, completions, fields, completion_tokens, truncated):
    """One batch of completions to a TRL-style reward function:
    fn(prompts=[...], completions=[...], **columns) -> one number per completion, where the
    columns are the prompt records' other fields (answer, ...), one list each, plus
    completion_tokens and truncated (these win over record fields of the same name)."""
    records = [json.loads(f) for f in fields]
    columns = {}
    for r in records:
        for k in r:
            if k not in columns and k not in ("prompts", "completions"):
                columns[k] = [x.get(k) for x in records]
    columns["completion_tokens"] = list(completion_tokens)
    columns["truncated"] = list(truncated)
    got = fn(prompts=list(prompts), completions=list(completions), **columns)
    return [float("nan") if x is None else float(x) for x in got]


def train(config, reward_funcs=None, callbacks=None, resume=None, reward_weights=None,
          **overrides):
    """Trains as `streambp train CONFIG.yaml key=value ... [--resume DIR]` does.

    config          a YAML path, or a dict with the trainer's keys (nested sections or dotted
                    keys, as docs/TRAINING.md lists them); None with `resume`: the
                    checkpoint's own config
    **overrides     key=value overrides; `__` stands for a dot: optim__lr=1e-4 is optim.lr
    reward_funcs    online GRPO/PPO: Python reward functions with TRL's signature
                    fn(prompts, completions, **kwargs) -> list[float], called in this process
                    on each batch of completions (after the config's own `rewards`); each may
                    be a (fn, weight) pair, or give the weights in reward_weights
    callbacks       callables, each called with every metrics.jsonl line (a dict)
    resume          a checkpoint or output directory, as --resume; the Python rewards of the
                    run are given again (reward_funcs, the same names)

    Data (data.train, data.eval) may be a JSONL path, a list of dicts or a datasets.Dataset;
    records are handed to the trainer in memory (no file is written) and read by the JSONL
    parser, so an error names "data.train (in memory):N", row N-1. Resuming such a run, give
    the records again (data__train=...): the checkpoint holds their fingerprint, not them.
    Returns the trainer's exit code, 0; after Ctrl-C (SIGINT) or SIGTERM the
    run saves its checkpoint and KeyboardInterrupt is raised. Errors raise streambp.Error."""
    flat = {}
    if isinstance(config, dict):
        _flatten("", config, flat)
    for k, v in overrides.items():
        flat[k.replace("__", ".")] = v
    in_memory = []
    for key in ("data.train", "data.eval"):
        if key in flat and _is_records(flat[key]):
            in_memory.append((key, _records_text(flat[key], key)))
            flat[key] = f"{key} (in memory)"  # data/data_source.h in_memory_label
    pairs = [f"{k}={_value(v)}" for k, v in flat.items()]
    if isinstance(config, dict):
        positional, overrides_only = pairs, True
    elif config is None:  # resume with the checkpoint's own config
        positional, overrides_only = pairs, False
    else:
        positional, overrides_only = [os.fspath(config)] + pairs, False

    funcs = list(reward_funcs or [])
    weights = list(reward_weights) if reward_weights is not None else [None] * len(funcs)
    if len(weights) != len(funcs):
        raise _core.Error(f"reward_weights: {len(weights)} weights for {len(funcs)} reward_funcs")
    rewards = []
    for f, w in zip(funcs, weights):
        if isinstance(f, tuple):
            f, w = f
        if not callable(f):
            raise _core.Error(f"reward_funcs: {f!r} is not callable")
        name = getattr(f, "__name__", type(f).__name__)
        rewards.append((name, 1.0 if w is None else float(w), f))

    listeners = list(callbacks or [])

    def on_metrics(line):
        record = json.loads(line)
        for cb in listeners:
            cb(record)

    code = _core.train(positional, overrides_only, "" if resume is None else os.fspath(resume),
                       in_memory, rewards, _reward_call, on_metrics if listeners else None)
    if code == 130:
        raise KeyboardInterrupt("streambp.train: stopped by a signal; the checkpoint is saved")
    return code

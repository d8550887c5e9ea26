"""streambp.train(): the trainer of `streambp train`, with reward functions and callbacks in
this Python process (python/src/streambp_module.cpp)."""
import json
import os
import re

from . import _check, _core

# A config key as `streambp train` reads one: names joined by dots. Anything else (a space, an
# '=', which would split key=value elsewhere) is refused rather than passed on.
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def _key(key, where):
    if not isinstance(key, str):
        _check.fail(where, f"the key {key!r} is a {type(key).__name__}, not a str")
    if not _KEY.match(key):
        _check.fail(where, f"{key!r} is not a config key (names joined by dots)")
    return key


def _flatten(prefix, value, out):
    # {"optim": {"lr": 1e-3}} -> optim.lr; lists (rewards, optim.betas) stay values.
    if isinstance(value, dict):
        for k, v in value.items():
            _key(k, "train: config" + (f": {prefix}" if prefix else ""))
            _flatten(f"{prefix}.{k}" if prefix else k, v, out)
    else:
        out[prefix] = value


def _is_records(value):
    """A datasets.Dataset (anything with to_list and column_names), or a list holding a dict (a
    row that is not one is then named); an empty list is records too, refused as empty."""
    if hasattr(value, "to_list") and hasattr(value, "column_names"):
        return True
    return isinstance(value, (list, tuple)) and (not value or
                                                 any(isinstance(r, dict) for r in value))


def _records_text(records, key):
    """The records as the JSONL lines a file of them would hold, one row per line, in memory:
    the trainer reads them with the file's parser (row i is line i + 1 of "<key> (in memory)").
    A datasets.Dataset is read row by row (no copy of the whole table as Python dicts)."""
    lines = []
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            _check.fail(f"train: {key}: row {i}", f"{_check.kind(r)}, not a dict")
        try:
            lines.append(json.dumps(_check.json_value(r), ensure_ascii=False))
        except _check.NotJson as e:
            raise _core.Error(f"train: {key}: row {i} cannot be written as JSON: {e}") from None
    if not lines:
        raise _core.Error(f"train: {key}: the records given as data are empty")
    return "\n".join(lines) + "\n"


def _value(key, v):
    # key=value overrides are YAML; JSON is YAML (a string stays a string whatever it holds).
    if isinstance(v, os.PathLike):
        v = _check.path(v, f"train: {key}")
    try:
        v = _check.json_value(v)
    except _check.NotJson as e:
        raise _core.Error(f"train: {key}: cannot be written as a config value: {e}") from None
    _no_nul(v, f"train: {key}")
    return json.dumps(v, ensure_ascii=False)


def _no_nul(v, where):
    # Config strings are paths, names and patterns: a NUL would end them as C strings.
    if isinstance(v, str):
        _check.argument(v, where)
    elif isinstance(v, dict):
        for k, x in v.items():
            _no_nul(x, f"{where}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _no_nul(x, f"{where}[{i}]")


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
    return _check.rewards(got)


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
    if config is not None and not isinstance(config, dict):
        config = _check.path(config, "train: config")
    flat = {}
    if isinstance(config, dict):
        _flatten("", config, flat)
    for k, v in overrides.items():
        flat[_key(k.replace("__", "."), f"train: {k}")] = v
    in_memory = []
    for key in ("data.train", "data.eval"):
        if key in flat and _is_records(flat[key]):
            in_memory.append((key, _records_text(flat[key], key)))
            flat[key] = f"{key} (in memory)"  # data/data_source.h in_memory_label
    pairs = [f"{k}={_value(k, v)}" for k, v in flat.items()]
    if isinstance(config, dict):
        positional, overrides_only = pairs, True
    elif config is None:  # resume with the checkpoint's own config
        positional, overrides_only = pairs, False
    else:
        positional, overrides_only = [config] + pairs, False
    resume = "" if resume is None else _check.path(resume, "train: resume")

    rewards = _reward_specs(reward_funcs, reward_weights)
    listeners = [] if callbacks is None else _check.sequence(callbacks, "train: callbacks")
    for i, cb in enumerate(listeners):
        _check.function(cb, f"train: callbacks[{i}]")

    # report_to (the config's key, resolved by the trainer): the dashboards are opened once the
    # config is known and closed when the run ends, however it ends (_report.py).
    reporting = {"to": None, "tokens": 0}

    def on_config(text):
        cfg = json.loads(text)
        if cfg.get("report_to"):
            from . import _report
            reporting["to"] = _report.Reporters(cfg["report_to"], cfg["output_dir"], config=cfg)

    def on_metrics(line):
        record = json.loads(line)
        if reporting["to"] is not None:
            from . import _report
            logs, reporting["tokens"] = _report.trl_logs(record, reporting["tokens"])
            reporting["to"].log(logs, record["step"])
        for cb in listeners:
            cb(record)

    try:
        code = _core.train(positional, overrides_only, resume, in_memory, rewards, _reward_call,
                           on_metrics, on_config)
    finally:
        if reporting["to"] is not None:
            reporting["to"].close()
    if code == 130:
        raise KeyboardInterrupt("streambp.train: stopped by a signal; the checkpoint is saved")
    return code


def _reward_specs(reward_funcs, reward_weights):
    """(name, weight, function) of each Python reward: reward_funcs a list of functions or
    (function, weight) pairs, reward_weights None or one weight (or None) per function. A weight
    given twice (in the pair and in reward_weights) is refused; finiteness is the trainer's."""
    funcs = [] if reward_funcs is None else _check.sequence(reward_funcs, "train: reward_funcs")
    if reward_weights is None:
        weights = [None] * len(funcs)
    else:
        weights = _check.sequence(reward_weights, "train: reward_weights")
        if len(weights) != len(funcs):
            raise _core.Error(f"train: reward_weights: {len(weights)} weights for {len(funcs)} "
                              "reward_funcs")
    rewards = []
    for i, (f, w) in enumerate(zip(funcs, weights)):
        where = f"train: reward_funcs[{i}]"
        if w is not None:
            w = _check.real(w, f"train: reward_weights[{i}]")
        if isinstance(f, tuple):
            if len(f) != 2:
                _check.fail(where, f"a tuple of {len(f)}, not (function, weight)")
            if w is not None:
                _check.fail(where, "a weight in the pair and in reward_weights: give one")
            f, w = f[0], _check.real(f[1], f"{where}[1]")
        _check.function(f, where)
        name = getattr(f, "__name__", None)
        if not isinstance(name, str):
            name = type(f).__name__
        rewards.append((_check.text(name, f"{where}.__name__"), 1.0 if w is None else w, f))
    return rewards

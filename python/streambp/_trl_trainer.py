"""The trainers of streambp.trl: TRL's constructor arguments turned into one streambp.train run
(the config's keys from _trl_fields.py, the model and tokenizer directories, the datasets as
records in memory, PEFT's LoraConfig as lora.* keys), with TRL's state, log history, callbacks
and report_to around it."""
import functools
import json
import os
import shutil
import tempfile
import time

from . import _core, _report
from ._train import train as _train
from ._trl_defaults import DEFAULTS, TRL_VERSION
from ._trl_peft import lora_keys

# Checkpoint files that are the model (save_model copies these, not the optimizer's).
_MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json",
                "generation_config.json", "adapter_config.json", "adapter_model.safetensors",
                "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja")


class TrainerState:
    """transformers' TrainerState, the parts a streambp run has."""

    def __init__(self):
        self.global_step = 0
        self.max_steps = 0
        self.epoch = 0.0
        self.log_history = []
        self.num_input_tokens_seen = 0
        self.is_world_process_zero = True
        self.is_local_process_zero = True
        self.best_metric = None
        self.best_model_checkpoint = None
        self.logging_steps = None
        self.eval_steps = None
        self.save_steps = None


class TrainerControl:
    """transformers' TrainerControl: callbacks may set its flags; streambp reads none of them
    (a run cannot yet be stopped or redirected from a callback; docs/PYTHON.md)."""

    def __init__(self):
        self.should_training_stop = False
        self.should_epoch_stop = False
        self.should_save = False
        self.should_evaluate = False
        self.should_log = False


def resolve_model(model, where="model"):
    """A model directory, or a Hugging Face id whose snapshot is in the local cache (no
    download: `huggingface-cli download <id>` first). Objects (a loaded torch model) are
    refused: streambp reads the weights from their files."""
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str):
        raise _core.Error(f"{where}: a {type(model).__name__}: streambp reads a model from its "
                          "directory; give the directory (model.save_pretrained(dir)) or a "
                          "Hugging Face id in the local cache")
    if os.path.isdir(model) or os.path.isfile(model):
        return model
    if model.count("/") == 1:
        hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
            os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                      "huggingface"), "hub")
        repo = os.path.join(hub, "models--" + model.replace("/", "--"))
        try:
            with open(os.path.join(repo, "refs", "main")) as f:
                snap = os.path.join(repo, "snapshots", f.read().strip())
            if os.path.isfile(os.path.join(snap, "config.json")):
                return snap
        except OSError:
            pass
        raise _core.Error(f"{where}: {model!r} is not a directory, and no snapshot of it is in "
                          f"the Hugging Face cache ({hub}); streambp downloads nothing: "
                          f"huggingface-cli download {model}")
    return model  # a preset name (tiny-qwen3, ...): the trainer says if it is not one


def _tokenizer_dir(processing_class):
    if processing_class is None:
        return None
    if isinstance(processing_class, (str, os.PathLike)):
        return os.fspath(processing_class)
    path = getattr(processing_class, "name_or_path", None)
    if isinstance(path, str):
        try:
            return resolve_model(path, "processing_class")
        except _core.Error:
            pass
    raise _core.Error("processing_class: streambp reads the tokenizer from its directory "
                      "(tokenizer.json); this one has none it can find (name_or_path "
                      f"{path!r}): give the directory")


def _records(dataset, where):
    """A datasets.Dataset or a list of dicts, as streambp.train takes them; a DatasetDict or
    a dict of eval sets is refused with the way to give one split."""
    if dataset is None:
        return None
    if isinstance(dataset, dict) or type(dataset).__name__ in ("DatasetDict",
                                                               "IterableDatasetDict"):
        raise _core.Error(f"{where}: a dict of datasets: give one split (dataset['train'])")
    if type(dataset).__name__ == "IterableDataset":
        raise _core.Error(f"{where}: an IterableDataset: streambp reads a datasets.Dataset or a "
                          "list of dicts")
    return dataset


def _without_nulls(rows):
    """A datasets.Dataset has one set of columns for all its rows: a column a row lacks is None
    there (a preference row with an implicit prompt has prompt None). The row as TRL reads it
    is without that column."""
    return [{k: v for k, v in r.items() if v is not None} for r in rows]


class TRLTrainer:
    """Base of SFTTrainer, DPOTrainer, ...: `config_class` is the matching config class."""

    config_class = None
    # The constructor arguments streambp takes; every other one of TRL's must be None.
    _TAKEN = ("model", "args", "train_dataset", "eval_dataset", "processing_class", "callbacks",
              "peft_config")

    def __init__(self, model, args=None, train_dataset=None, eval_dataset=None,
                 processing_class=None, callbacks=None, peft_config=None, **others):
        name = type(self).__name__
        for k, v in others.items():
            if v is not None and not (k == "optimizers" and tuple(v) == (None, None)):
                raise _core.Error(f"{name}: {k}: not supported by streambp (it must be None)")
        if args is None:
            args = self.config_class(output_dir="trainer_output")
        if not isinstance(args, self.config_class):
            raise _core.Error(f"{name}: args: a {type(args).__name__}, not a streambp.trl."
                              f"{self.config_class.kind}")
        self.args = args
        self.model = resolve_model(model)
        self.processing_class = processing_class
        self._tokenizer = _tokenizer_dir(processing_class)
        if train_dataset is None:
            raise _core.Error(f"{name}: train_dataset: required")
        self.train_dataset = _records(train_dataset, "train_dataset")
        self.eval_dataset = _records(eval_dataset, "eval_dataset")
        self._lora = lora_keys(peft_config) if peft_config is not None else {}
        self.callback_handler = _Callbacks(callbacks or [])
        self.state = TrainerState()
        self.control = TrainerControl()
        self._last_eval = None
        self.callback_handler.call("on_init_end", self.args, self.state, self.control)

    # What a subclass adds: more config keys, records transformed, reward functions.
    def _extra_keys(self):
        return {}

    def _train_records(self):
        return self.train_dataset

    def _reward_funcs(self):
        return None

    def _config(self, resume):
        keys = dict(self.args.streambp_config())
        keys.pop("report_to", None)  # the trainer writes the dashboards itself (windowed logs)
        keys["model"] = self.model
        if self._tokenizer:
            keys["tokenizer"] = self._tokenizer
        keys.update(self._lora)
        keys.update(self._extra_keys())
        keys["data.train"] = _without_nulls(self._train_records())
        if self.eval_dataset is not None:
            keys["data.eval"] = _without_nulls(self.eval_dataset)
        return keys

    def train(self, resume_from_checkpoint=None, **kwargs):
        """Trains; resume_from_checkpoint: True (the newest checkpoint of output_dir) or a
        checkpoint directory, continued exactly (docs/TRAINING.md "Checkpoints")."""
        if kwargs:
            raise _core.Error(f"train: {', '.join(kwargs)}: not supported by streambp")
        if resume_from_checkpoint is None:
            resume_from_checkpoint = self.args.resume_from_checkpoint
        resume = None
        if resume_from_checkpoint is True:
            resume = self.args.streambp_config()["output_dir"]
        elif resume_from_checkpoint not in (None, False):
            resume = os.fspath(resume_from_checkpoint)
        keys = self._config(resume)
        run = _Run(self, keys)
        t0 = time.time()
        try:
            _train(keys, reward_funcs=self._reward_funcs(), callbacks=[run.on_line],
                   resume=resume)
        finally:
            run.close()
        return run.finish(time.time() - t0)

    def evaluate(self, eval_dataset=None, metric_key_prefix="eval", **kwargs):
        """The eval loss over eval_dataset (default: the trainer's), of the current weights:
        after train(), those the run ended with; before, the starting model's."""
        if kwargs:
            raise _core.Error(f"evaluate: {', '.join(kwargs)}: not supported by streambp")
        if metric_key_prefix != "eval":
            raise _core.Error("evaluate: metric_key_prefix: only 'eval'")
        data = _records(eval_dataset, "eval_dataset") or self.eval_dataset
        if data is None:
            raise _core.Error("evaluate: no eval_dataset (give one here or to the trainer)")
        if eval_dataset is None and self._last_eval is not None:
            metrics = dict(self._last_eval)  # scored by the run after its last step
        else:
            metrics = self._score(data)
        metrics["epoch"] = self.state.epoch
        self.state.log_history.append({**metrics, "step": self.state.global_step})
        self.callback_handler.call("on_evaluate", self.args, self.state, self.control,
                                   metrics=metrics)
        return metrics

    def _score(self, data):
        # The trainer scores the eval set before its first step: a run of the current weights
        # stopped by the callback right after that line, in a directory of its own.
        model = self.model
        if self.state.global_step > 0:
            model = self._newest_checkpoint()
        keys = self._config(None)
        keys.update(model=model, **{"data.eval": data})
        keys.pop("lora.adapter", None)
        if self.state.global_step > 0 and self._lora:
            keys = {k: v for k, v in keys.items() if not k.startswith("lora.")}
            keys["model"], keys["lora.adapter"] = self.model, model
        got = {}

        class _Done(Exception):
            pass

        def first_eval(line):
            if "eval_loss" in line:
                got.update({k: v for k, v in line.items() if k.startswith("eval_")})
                raise _Done()

        with tempfile.TemporaryDirectory() as tmp:
            keys.update(output_dir=tmp, max_steps=1, save_every=0)
            keys.pop("epochs", None)
            try:
                _train(keys, reward_funcs=self._reward_funcs(), callbacks=[first_eval])
            except _core.Error:
                if not got:
                    raise
        if not got:
            raise _core.Error(f"evaluate: {self.args.kind} has no eval loss in streambp")
        return got

    def _newest_checkpoint(self):
        out = self.args.streambp_config()["output_dir"]
        ckpts = [d for d in os.listdir(out) if d.startswith("checkpoint-")] if \
            os.path.isdir(out) else []
        if not ckpts:
            raise _core.Error(f"no checkpoint in {out}: train() first")
        return os.path.join(out, max(ckpts, key=lambda d: int(d.split("-")[1])))

    def save_model(self, output_dir=None, _internal_call=False):
        """The trained model (or LoRA adapter) and tokenizer files of the run's last checkpoint,
        copied to output_dir (default: args.output_dir)."""
        src = self._newest_checkpoint()
        dst = os.fspath(output_dir) if output_dir is not None else \
            self.args.streambp_config()["output_dir"]
        os.makedirs(dst, exist_ok=True)
        for f in _MODEL_FILES:
            if os.path.isfile(os.path.join(src, f)):
                shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
        self.callback_handler.call("on_save", self.args, self.state, self.control)

    def add_callback(self, callback):
        self.callback_handler.add(callback)

    def log(self, logs, start_time=None):
        self.state.log_history.append({**logs, "step": self.state.global_step})


class _Callbacks:
    """TrainerCallback-shaped objects (or their classes), each event called as transformers
    calls it: cb.on_<event>(args, state, control, **kwargs). A callback without the method is
    skipped, as TrainerCallback's own methods do nothing."""

    def __init__(self, callbacks):
        if callable(callbacks) and not isinstance(callbacks, (list, tuple)):
            callbacks = [callbacks]
        self.callbacks = []
        for cb in callbacks:
            self.add(cb)

    def add(self, cb):
        self.callbacks.append(cb() if isinstance(cb, type) else cb)

    def call(self, event, args, state, control, **kwargs):
        for cb in self.callbacks:
            fn = getattr(cb, event, None)
            if fn is not None:
                fn(args, state, control, **kwargs)


class _Run:
    """One train() call: the metrics lines -> state, log_history (TRL's names, every
    logging_steps steps with the loss averaged over them, as the HF Trainer logs), callbacks
    and the dashboards."""

    def __init__(self, trainer, keys):
        self.t, self.args = trainer, trainer.args
        self.window = []
        self.tokens = trainer.state.num_input_tokens_seen
        self.losses = []
        self.save_every = keys.get("save_every", 0)
        to = _report_to(self.args)
        self.report = _report.Reporters(
            to, keys["output_dir"], run_name=self.args.run_name, project=self.args.project,
            config={k: v for k, v in self.args.to_dict().items()
                    if isinstance(v, (int, float, str, bool, type(None)))}) if to else None
        self.started = False

    def _begin(self, line):
        st = self.t.state
        st.logging_steps, st.eval_steps = self.args.logging_steps, self.args.eval_steps
        st.save_steps = self.args.save_steps
        self.t.callback_handler.call("on_train_begin", self.args, st, self.t.control)
        self.started = True

    def on_line(self, line):
        if not self.started:
            self._begin(line)
        t, st, a = self.t, self.t.state, self.args
        step = line["step"]
        logs, self.tokens = _report.trl_logs(line, self.tokens)
        if "eval_loss" in line and "loss" not in line:  # an evaluation line (step 0 or last)
            ev = {k: v for k, v in logs.items() if k.startswith("eval_")}
            t._last_eval = ev
            if step > 0 or a.eval_on_start:
                self._log(ev, step)
                t.callback_handler.call("on_evaluate", a, st, t.control, metrics=ev)
            return
        st.global_step = step
        st.epoch = line.get("epoch", st.epoch)
        st.num_input_tokens_seen = self.tokens
        self.window.append(logs)
        self.losses.append(logs.get("loss", 0.0))
        t.callback_handler.call("on_step_end", a, st, t.control)
        ls = a.logging_steps
        if a.logging_strategy != "no" and (step % ls == 0 or (step == 1 and
                                                               a.logging_first_step)):
            out = dict(self.window[-1])
            out["loss"] = sum(w.get("loss", 0.0) for w in self.window) / len(self.window)
            self.window = []
            eval_part = {k: v for k, v in out.items() if k.startswith("eval_")}
            train_part = {k: v for k, v in out.items() if not k.startswith("eval_")}
            self._log(train_part, step)
            if eval_part:
                self._log(eval_part, step)
        elif "eval_loss" in logs:
            self._log({k: v for k, v in logs.items() if k.startswith("eval_")}, step)
        if "eval_loss" in logs:
            ev = {k: v for k, v in logs.items() if k.startswith("eval_")}
            t._last_eval = ev
            t.callback_handler.call("on_evaluate", a, st, t.control, metrics=ev)
        if self.save_every and step % self.save_every == 0:
            t.callback_handler.call("on_save", a, st, t.control)

    def _log(self, logs, step):
        st = self.t.state
        entry = {**logs, "epoch": st.epoch}
        st.log_history.append({**entry, "step": step})
        if self.report is not None:
            self.report.log(logs, step)
        self.t.callback_handler.call("on_log", self.args, st, self.t.control, logs=entry)

    def close(self):
        if self.report is not None:
            self.report.close()

    def finish(self, runtime):
        st = self.t.state
        st.max_steps = st.global_step
        train_loss = sum(self.losses) / len(self.losses) if self.losses else 0.0
        summary = {"train_runtime": runtime,
                   "train_steps_per_second": len(self.losses) / runtime if runtime else 0.0,
                   "train_loss": train_loss, "epoch": st.epoch}
        st.log_history.append({**summary, "step": st.global_step})
        self.t.callback_handler.call("on_train_end", self.args, st, self.t.control)
        return TrainOutput(st.global_step, train_loss, summary)


class TrainOutput(tuple):
    """transformers' TrainOutput(global_step, training_loss, metrics)."""

    def __new__(cls, global_step, training_loss, metrics):
        return super().__new__(cls, (global_step, training_loss, metrics))

    global_step = property(lambda s: s[0])
    training_loss = property(lambda s: s[1])
    metrics = property(lambda s: s[2])


def _report_to(args):
    from ._trl_fields import report_to_list
    return report_to_list(args.report_to)


PROMPT_COLUMN = "_streambp_trl_prompt"


def conversational(value):
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value)


def trl_reward(fn):
    """A reward function called as TRL calls it: prompts as the dataset gave them (messages
    for a conversational dataset), completions as [{"role": "assistant", "content": text}]
    lists when the prompt is a conversation, and the dataset's other columns."""

    @functools.wraps(fn)
    def call(prompts, completions, **kw):
        # The trainer reads the prompt out of each record; GRPOTrainer keeps a copy under this
        # column (_train_records) so that the function gets it as the dataset gave it.
        original = kw.pop(PROMPT_COLUMN, None)
        if original is not None and len(original) == len(completions):
            prompts = original
            if any(conversational(p) for p in original):
                completions = [[{"role": "assistant", "content": c}] for c in completions]
        return fn(prompts=prompts, completions=completions, **kw)

    return call


__all__ = ["TRLTrainer", "TrainerState", "TrainerControl", "TrainOutput", "trl_reward",
           "resolve_model", "DEFAULTS", "TRL_VERSION", "json"]

"""TRL config fields -> streambp's train config keys (streambp.trl; docs/PYTHON.md "TRL's names").

Every field of TRL's configs is in _trl_defaults.DEFAULTS with TRL's default. A field this file
maps (ACCEPTED) becomes streambp keys in `streambp_keys`; every other one is refused when it is
given a value other than TRL's default (at its default it asks for nothing streambp does
differently), with an error naming it. None is dropped in silence."""
import math

from . import _core
from ._trl_defaults import DEFAULTS

# The HF Trainer's settings (TrainingArguments) that every config maps.
_COMMON = {
    "output_dir", "num_train_epochs", "max_steps", "per_device_train_batch_size",
    "per_device_eval_batch_size", "gradient_accumulation_steps", "learning_rate",
    "lr_scheduler_type", "warmup_steps", "optim", "weight_decay", "adam_beta1", "adam_beta2",
    "adam_epsilon", "max_grad_norm", "bf16", "gradient_checkpointing",
    "gradient_checkpointing_kwargs", "logging_strategy", "logging_steps", "logging_first_step",
    "report_to", "run_name", "project", "eval_strategy", "eval_steps", "eval_on_start",
    "save_strategy", "save_steps", "save_total_limit", "seed", "use_cpu",
    "remove_unused_columns", "train_sampling_strategy", "resume_from_checkpoint", "disable_tqdm",
    "do_train", "do_eval", "disable_dropout", "model_init_kwargs",
}
ACCEPTED = {
    "SFTConfig": _COMMON | {"max_length", "truncation_mode", "packing", "padding_free",
                            "completion_only_loss", "assistant_only_loss", "dataset_text_field",
                            "activation_offloading", "pad_token", "eval_packing"},
    "DPOConfig": _COMMON | {"max_length", "truncation_mode", "padding_free", "beta",
                            "loss_type", "label_smoothing", "activation_offloading", "pad_token",
                            "precompute_ref_log_probs"},
    "GRPOConfig": _COMMON | {"num_generations", "max_completion_length", "shuffle_dataset",
                             "temperature", "top_p", "top_k", "min_p", "beta", "num_iterations",
                             "epsilon", "epsilon_high", "reward_weights", "scale_rewards",
                             "loss_type", "mask_truncated_completions", "log_completions"},
    "KTOConfig": _COMMON | {"max_length", "beta", "desirable_weight", "undesirable_weight",
                            "loss_type", "activation_offloading", "precompute_ref_log_probs"},
    "ORPOConfig": _COMMON | {"max_length", "beta", "max_completion_length"},
}

# A name of _COMMON that a config lacks (SFTConfig has no disable_dropout) is not its field.
ACCEPTED = {kind: names & set(DEFAULTS[kind]) for kind, names in ACCEPTED.items()}

# streambp's own settings, extra fields of every config: name -> (default, config key).
EXTRA = {
    "mode": (None, "mode"),                    # base | checkpoint | stream | ... (DESIGN §3)
    "layer_chunk": (None, "layer_chunk"),      # tokens, or "auto"
    "head_chunk": (None, "head_chunk"),
    "offload": (None, "offload"),              # checkpoints | residual_grad | both joined by +
    "memory_budget": (None, "memory_budget"),  # what auto chunks may plan with ("16GiB")
    "host_memory_budget": (None, "host_memory_budget"),
    "max_tokens": (None, "max_tokens"),        # tokens per packed micro-batch
    "threads": (None, "threads"),
    "backend": (None, "backend"),              # cpu | cuda | cuda:N
    "grad_dtype": (None, "grad_dtype"),
    "overwrite_output_dir": (None, "overwrite_output_dir"),
    "chat_template": (None, "data.chat_template"),
}

OBJECTIVE = {"SFTConfig": "sft", "DPOConfig": "dpo", "GRPOConfig": "grpo", "KTOConfig": "kto",
             "ORPOConfig": "orpo"}


def refused(kind):
    """TRL's fields of `kind` that streambp does not take (in TRL's order)."""
    return [f for f in DEFAULTS[kind] if f not in ACCEPTED[kind]]


def fail(field, why):
    raise _core.Error(f"{field}: {why}")


def _integer(field, v, lo):
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        fail(field, f"{v!r} is not an integer >= {lo}")
    return v


def _number(field, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        fail(field, f"{v!r} is not a finite number")
    return float(v)


def _choice(field, v, allowed):
    if v not in allowed:
        fail(field, f"{v!r} is not supported by streambp (supported: "
                    f"{', '.join(map(repr, allowed))})")
    return v


def _strategy(field, v, allowed):
    # IntervalStrategy / SaveStrategy values, given as a string or the enum (its .value).
    return _choice(field, getattr(v, "value", v), allowed)


def report_to_list(v):
    """TrainingArguments.report_to: "none", "all", a name or a list -> streambp's names."""
    names = [v] if isinstance(v, str) or v is None else list(v)
    out = []
    for n in names:
        if n in (None, "none"):
            continue
        if n == "all":  # transformers: every installed integration; streambp writes these two
            out += [x for x in ("tensorboard", "wandb") if x not in out]
            continue
        _choice("report_to", n, ("tensorboard", "wandb", "none", "all"))
        if n not in out:
            out.append(n)
    return out


def streambp_keys(kind, c):
    """The streambp train config keys of config object `c` of TRL class `kind`. Checks every
    accepted field; a value streambp cannot honour is an error naming the field."""
    k = {"objective": OBJECTIVE[kind], "output_dir": c.output_dir or "trainer_output"}
    B = _integer("per_device_train_batch_size", c.per_device_train_batch_size, 1)
    GA = _integer("gradient_accumulation_steps", c.gradient_accumulation_steps, 1)
    _integer("per_device_eval_batch_size", c.per_device_eval_batch_size, 1)  # eval: whole set

    # Length of the run: max_steps wins (> 0), else whole epochs.
    if isinstance(c.max_steps, bool) or not isinstance(c.max_steps, int):
        fail("max_steps", f"{c.max_steps!r} is not an integer")
    if c.max_steps > 0:
        k["max_steps"] = c.max_steps
    else:
        e = _number("num_train_epochs", c.num_train_epochs)
        if e < 1 or e != int(e):
            fail("num_train_epochs", f"{c.num_train_epochs!r}: streambp trains whole epochs "
                                     "(an integer >= 1), or give max_steps")
        k["epochs"] = int(e)

    # Optimizer and schedule (AdamW, transformers' get_*_schedule_with_warmup).
    _choice("optim", c.optim, ("adamw_torch", "adamw_torch_fused"))
    k["optim.lr"] = _number("learning_rate", c.learning_rate)
    k["optim.betas"] = [_number("adam_beta1", c.adam_beta1), _number("adam_beta2", c.adam_beta2)]
    k["optim.eps"] = _number("adam_epsilon", c.adam_epsilon)
    k["optim.weight_decay"] = _number("weight_decay", c.weight_decay)
    k["optim.max_grad_norm"] = _number("max_grad_norm", c.max_grad_norm)
    sched = getattr(c.lr_scheduler_type, "value", c.lr_scheduler_type)
    _choice("lr_scheduler_type", sched, ("linear", "cosine", "constant", "constant_with_warmup"))
    w = _number("warmup_steps", c.warmup_steps)
    if w < 0:
        fail("warmup_steps", f"{c.warmup_steps!r} is negative")
    if sched == "constant" and w > 0:  # transformers' constant schedule has no warm-up
        fail("warmup_steps", "lr_scheduler_type 'constant' has no warm-up in transformers; "
                             "use 'constant_with_warmup'")
    k["schedule.type"] = "constant" if sched == "constant_with_warmup" else sched
    if 0 < w < 1:  # transformers 5: a warm-up below 1 is a fraction of the run
        k["schedule.warmup_ratio"] = w
    else:
        if w != int(w):
            fail("warmup_steps", f"{c.warmup_steps!r}: steps (an integer) or a fraction below 1")
        k["schedule.warmup_steps"] = int(w)

    # Precision and the memory mode: gradient checkpointing's flags name streambp's modes.
    # TRL's bf16=None means bf16 (its __post_init__: `not fp16`), on the CPU as well.
    if c.bf16 or c.bf16 is None:
        k["precision"] = "bf16"
    gck = c.gradient_checkpointing_kwargs or {}
    if not isinstance(gck, dict) or set(gck) - {"use_reentrant"}:
        fail("gradient_checkpointing_kwargs", f"{gck!r}: only use_reentrant is taken (it does "
                                              "not change streambp's recomputation)")
    if c.mode is None:
        # True: StreamBP (checkpointing that also streams each layer's backward in chunks);
        # False: every activation kept, as training without checkpointing does.
        k["mode"] = "stream" if c.gradient_checkpointing in (True, None) else "base"
    if getattr(c, "activation_offloading", False):
        if c.offload is not None:
            fail("activation_offloading", "given with streambp's offload: give one")
        k["offload"] = "checkpoints"

    # Logging, evaluation, saving.
    _strategy("logging_strategy", c.logging_strategy, ("steps", "no"))
    steps = _integer("logging_steps", c.logging_steps, 1)  # a fraction of the run: not yet
    k["report_to"] = report_to_list(c.report_to)
    ev = _strategy("eval_strategy", c.eval_strategy, ("no", "steps"))
    if ev == "steps":
        es = c.eval_steps if c.eval_steps is not None else c.logging_steps
        if not isinstance(es, int) or isinstance(es, bool) or es < 1:
            fail("eval_steps", f"{es!r}: streambp evaluates every N steps (an integer >= 1)")
        k["eval_every"] = es
    sv = _strategy("save_strategy", c.save_strategy, ("steps", "no"))
    if sv == "steps":
        k["save_every"] = _integer("save_steps", c.save_steps, 1)
    if c.save_total_limit is not None:
        k["keep_last"] = _integer("save_total_limit", c.save_total_limit, 1)
    else:
        k["keep_last"] = 0  # transformers keeps every checkpoint
    k["seed"] = _integer("seed", c.seed, 0)
    order = _choice("train_sampling_strategy", c.train_sampling_strategy,
                    ("random", "sequential"))
    k["data.shuffle"] = order == "random"
    if c.model_init_kwargs not in (None, {}):
        mik = c.model_init_kwargs
        if not isinstance(mik, dict) or set(mik) - {"dtype", "torch_dtype"}:
            fail("model_init_kwargs", f"{mik!r}: only dtype is taken (the weights are loaded "
                                      "by streambp; bf16=True trains in bf16)")

    # The objective's own fields.
    if kind in ("SFTConfig", "DPOConfig", "KTOConfig", "ORPOConfig"):
        L = c.max_length
        if L is None:
            if c.max_tokens is None:
                fail("max_length", "None (no truncation) needs streambp's max_tokens, the "
                                   "tokens of a packed micro-batch")
            k["data.max_seq_len"] = c.max_tokens
            k["max_tokens"] = c.max_tokens
        else:
            L = _integer("max_length", L, 1)
            k["data.max_seq_len"] = L
            k["data.truncation"] = "truncate"  # TRL keeps the first max_length tokens
            # A micro-batch holds what a padded batch of B sequences would (two per pair for
            # the preference objectives), packed without padding.
            k["max_tokens"] = B * L * (2 if kind in ("DPOConfig", "ORPOConfig") else 1)
        if getattr(c, "truncation_mode", "keep_start") != "keep_start":
            _choice("truncation_mode", c.truncation_mode, ("keep_start",))
        k["grad_accum"] = GA
    if kind == "SFTConfig":
        _choice("loss_type", c.loss_type, ("nll",))
        if c.completion_only_loss is False:
            fail("completion_only_loss", "False: streambp trains the completion of "
                                         "prompt-completion records only")
    if kind == "DPOConfig":
        lt = c.loss_type if isinstance(c.loss_type, str) else list(c.loss_type)
        if isinstance(lt, list):
            if len(lt) != 1:
                fail("loss_type", f"{lt!r}: streambp trains one loss type")
            lt = lt[0]
        k["dpo.loss_type"] = _choice("loss_type", lt, ("sigmoid", "ipo", "hinge"))
        k["dpo.beta"] = _number("beta", c.beta)
        k["dpo.label_smoothing"] = _number("label_smoothing", c.label_smoothing)
    if kind == "KTOConfig":
        _choice("loss_type", c.loss_type, ("kto",))
        k["kto.beta"] = _number("beta", c.beta)
        k["kto.desirable_weight"] = _number("desirable_weight", c.desirable_weight)
        k["kto.undesirable_weight"] = _number("undesirable_weight", c.undesirable_weight)
    if kind == "ORPOConfig":
        k["orpo.beta"] = _number("beta", c.beta)
        if c.max_completion_length is not None:
            fail("max_completion_length", "ORPO's completions are truncated with the sequence "
                                          "(max_length) in streambp")
    if kind == "GRPOConfig":
        G = _integer("num_generations", c.num_generations, 2)
        if (B * GA) % G:
            fail("num_generations", f"{G} does not divide per_device_train_batch_size x "
                                    f"gradient_accumulation_steps = {B * GA} (completions per "
                                    "step)")
        # TRL's batch counts completions: B x GA of them per step, G per prompt.
        k["grpo.prompts_per_step"] = B * GA // G
        k["grpo.num_generations"] = G
        C = _integer("max_completion_length", c.max_completion_length, 1)
        k["grpo.max_completion_length"] = C
        k["grpo.num_iterations"] = _integer("num_iterations", c.num_iterations, 1)
        k["grpo.temperature"] = _number("temperature", c.temperature)
        k["grpo.top_p"] = _number("top_p", c.top_p)
        k["grpo.top_k"] = _integer("top_k", 0 if c.top_k is None else c.top_k, 0)
        k["grpo.min_p"] = 0.0 if c.min_p is None else _number("min_p", c.min_p)
        k["grpo.beta"] = _number("beta", c.beta)
        k["grpo.epsilon"] = _number("epsilon", c.epsilon)
        k["grpo.epsilon_high"] = 0.0 if c.epsilon_high is None else _number("epsilon_high",
                                                                            c.epsilon_high)
        k["grpo.loss_type"] = _choice("loss_type", c.loss_type,
                                      ("grpo", "bnpo", "dr_grpo", "dapo"))
        sr = c.scale_rewards
        sr = {True: "group", False: "none"}.get(sr, sr) if isinstance(sr, bool) else sr
        k["grpo.scale_rewards"] = _choice("scale_rewards", sr, ("group", "batch", "none"))
        k["grpo.mask_truncated_completions"] = bool(c.mask_truncated_completions)
        k["data.shuffle"] = bool(c.shuffle_dataset) and order == "random"
        if c.log_completions:
            k["log_completions_every"] = steps
        # One step samples and trains all its groups (streambp packs them into micro-batches
        # of max_tokens, each holding at least one whole group).
        k["max_tokens"] = c.max_tokens or G * (C + 512)
    for name, (_, key) in EXTRA.items():
        v = getattr(c, name)
        if v is not None:
            k[key] = v
    return k

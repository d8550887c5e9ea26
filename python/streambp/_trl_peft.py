"""PEFT's LoraConfig (the object, read by its attributes: no peft import) -> streambp's lora.*
keys. A setting streambp's LoRA does not have, set away from PEFT's default, is an error naming
it (docs/TRAINING.md "LoRA")."""
from . import _core

# PEFT's defaults of the settings streambp cannot honour otherwise.
_MUST_BE = {"lora_dropout": (0, 0.0), "bias": ("none",), "modules_to_save": (None, []),
            "use_dora": (False,), "layers_to_transform": (None,), "layers_pattern": (None,),
            "rank_pattern": ({}, None), "alpha_pattern": ({}, None), "fan_in_fan_out": (False,),
            "init_lora_weights": (True,), "exclude_modules": (None,), "trainable_token_indices":
            (None,), "target_parameters": (None, []), "use_qalora": (False,),
            "layer_replication": (None,), "lora_bias": (False,), "loftq_config": ({}, None),
            "eva_config": (None,), "corda_config": (None,), "astra_config": (None,),
            "lora_ga_config": (None,), "velora_config": (None,), "monteclora_config": (None,),
            "alora_invocation_tokens": (None,), "megatron_config": (None,),
            "use_bdlora": (None, False), "arrow_config": (None,), "kasa_config": (None,),
            "ensure_weight_tying": (False,)}
# (The settings of PEFT 0.22's LoraConfig that change the adapters; the rest name the base model,
# PEFT's version or its run-time placement.)


def lora_keys(cfg):
    if not hasattr(cfg, "r") or not hasattr(cfg, "lora_alpha"):
        raise _core.Error(f"peft_config: a {type(cfg).__name__}: streambp takes PEFT's "
                          "LoraConfig (r, lora_alpha, target_modules)")
    for name, allowed in _MUST_BE.items():
        v = getattr(cfg, name, allowed[0])
        if not any(v == a and type(v) is type(a) or v is a for a in allowed) and \
                not (name == "lora_dropout" and v == 0):
            raise _core.Error(f"peft_config: {name}={v!r}: not supported by streambp's LoRA "
                              f"(only {allowed[0]!r})")
    task = getattr(cfg, "task_type", None)
    task = getattr(task, "value", task)
    if task not in (None, "CAUSAL_LM"):
        raise _core.Error(f"peft_config: task_type={task!r}: streambp trains causal LMs")
    keys = {"lora.r": int(cfg.r), "lora.alpha": cfg.lora_alpha,
            "lora.use_rslora": bool(getattr(cfg, "use_rslora", False))}
    t = getattr(cfg, "target_modules", None)
    if t is not None:  # None: PEFT's default for Llama/Qwen, q_proj and v_proj (streambp's too)
        keys["lora.target_modules"] = t if isinstance(t, str) else sorted(t)
    return keys

"""TRL's trainers on streambp: change `from trl import ...` to `from streambp.trl import ...`.

    from streambp.trl import SFTConfig, SFTTrainer
    trainer = SFTTrainer(model="path/to/model", train_dataset=dataset,
                         args=SFTConfig(output_dir="out", max_steps=100, report_to="tensorboard"))
    trainer.train()

The configs have the field names and defaults of the TRL release in _trl_defaults.py (TRL_VERSION)
and streambp's own settings (mode, layer_chunk, head_chunk, offload, memory_budget, max_tokens,
...); a TRL field streambp does not support is an error naming it (docs/PYTHON.md "TRL's
names"). Neither TRL nor torch is imported. PPO is not here: TRL 1.x has no PPOTrainer."""
from .. import _core
from .._trl_config import make as _make
from .._trl_defaults import TRL_VERSION
from .._trl_fields import ACCEPTED, EXTRA, refused
from .._trl_trainer import (PROMPT_COLUMN, TRLTrainer, TrainerControl, TrainerState, TrainOutput,
                           conversational, trl_reward)

SFTConfig = _make("SFTConfig")
DPOConfig = _make("DPOConfig")
GRPOConfig = _make("GRPOConfig")
KTOConfig = _make("KTOConfig")
ORPOConfig = _make("ORPOConfig")


class SFTTrainer(TRLTrainer):
    """TRL's SFTTrainer: text, messages and prompt-completion datasets."""
    config_class = SFTConfig

    def __init__(self, model, args=None, data_collator=None, train_dataset=None,
                 eval_dataset=None, processing_class=None, compute_loss_func=None,
                 compute_metrics=None, callbacks=None, optimizers=(None, None),
                 optimizer_cls_and_kwargs=None, preprocess_logits_for_metrics=None,
                 quantization_config=None, peft_config=None, formatting_func=None):
        self.formatting_func = formatting_func
        super().__init__(model, args, train_dataset, eval_dataset, processing_class, callbacks,
                         peft_config, data_collator=data_collator,
                         compute_loss_func=compute_loss_func, compute_metrics=compute_metrics,
                         optimizers=optimizers, optimizer_cls_and_kwargs=optimizer_cls_and_kwargs,
                         preprocess_logits_for_metrics=preprocess_logits_for_metrics,
                         quantization_config=quantization_config)
        self._warn_assistant_only()

    def _warn_assistant_only(self):
        rows = self.train_dataset
        first = rows[0] if len(rows) else {}
        if not self.args.assistant_only_loss and ("messages" in first or
                                                  conversational(first.get("prompt"))):
            import warnings
            warnings.warn("SFTConfig.assistant_only_loss=False: streambp trains the assistant "
                          "turns of conversational data only (as assistant_only_loss=True); "
                          "set it True to say so", stacklevel=3)

    def _train_records(self):
        field, fn = self.args.dataset_text_field, self.formatting_func
        if fn is None and field == "text":
            return self.train_dataset
        out = []
        for i, r in enumerate(self.train_dataset):
            if fn is not None:
                out.append({"text": fn(r)})
            elif field not in r:
                raise _core.Error(f"train_dataset: row {i}: no column {field!r} "
                                  "(dataset_text_field)")
            else:
                out.append({"text": r[field]})
        return out


class _WithReference(TRLTrainer):
    """DPO and KTO: TRL's signature (positional order included) with a reference model."""
    _ref_key = None

    def __init__(self, model, ref_model=None, args=None, data_collator=None, train_dataset=None,
                 eval_dataset=None, processing_class=None, compute_metrics=None, callbacks=None,
                 optimizers=(None, None), quantization_config=None, peft_config=None):
        from .._trl_trainer import resolve_model
        self.ref_model = None if ref_model is None else resolve_model(ref_model, "ref_model")
        super().__init__(model, args, train_dataset, eval_dataset, processing_class, callbacks,
                         peft_config, data_collator=data_collator,
                         compute_metrics=compute_metrics, optimizers=optimizers,
                         quantization_config=quantization_config)

    def _extra_keys(self):
        return {self._ref_key: self.ref_model} if self.ref_model else {}


class DPOTrainer(_WithReference):
    """TRL's DPOTrainer: preference data ({prompt, chosen, rejected}, or implicit prompt)."""
    config_class = DPOConfig
    _ref_key = "dpo.reference"


class KTOTrainer(_WithReference):
    """TRL's KTOTrainer: unpaired preference data ({prompt, completion, label})."""
    config_class = KTOConfig
    _ref_key = "kto.reference"


class ORPOTrainer(TRLTrainer):
    """TRL's ORPOTrainer (trl.experimental.orpo): preference data, no reference model."""
    config_class = ORPOConfig

    def __init__(self, model, args=None, data_collator=None, train_dataset=None,
                 eval_dataset=None, processing_class=None, model_init=None, callbacks=None,
                 optimizers=(None, None), preprocess_logits_for_metrics=None, peft_config=None,
                 compute_metrics=None):
        super().__init__(model, args, train_dataset, eval_dataset, processing_class, callbacks,
                         peft_config, data_collator=data_collator, model_init=model_init,
                         optimizers=optimizers,
                         preprocess_logits_for_metrics=preprocess_logits_for_metrics,
                         compute_metrics=compute_metrics)


class GRPOTrainer(TRLTrainer):
    """TRL's GRPOTrainer: prompt-only data, completions sampled by streambp, scored by
    reward_funcs (one function or a list) called as TRL calls them, weighted by
    args.reward_weights."""
    config_class = GRPOConfig

    def __init__(self, model, reward_funcs=None, args=None, train_dataset=None,
                 eval_dataset=None, processing_class=None, reward_processing_classes=None,
                 callbacks=None, optimizers=(None, None), quantization_config=None,
                 peft_config=None, tools=None, rollout_func=None, environment_factory=None):
        if reward_funcs is None:
            raise _core.Error("GRPOTrainer: reward_funcs: required")
        funcs = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        for i, f in enumerate(funcs):
            if not callable(f):
                raise _core.Error(f"GRPOTrainer: reward_funcs[{i}]: {f!r}: streambp calls "
                                  "Python functions (a reward model is not supported)")
        self.reward_funcs = list(funcs)
        super().__init__(model, args, train_dataset, eval_dataset, processing_class, callbacks,
                         peft_config, reward_processing_classes=reward_processing_classes,
                         optimizers=optimizers, quantization_config=quantization_config,
                         tools=tools, rollout_func=rollout_func,
                         environment_factory=environment_factory)
        w = self.args.reward_weights
        if w is not None and len(w) != len(self.reward_funcs):
            raise _core.Error(f"GRPOConfig: reward_weights: {len(w)} weights for "
                              f"{len(self.reward_funcs)} reward_funcs")

    def _extra_keys(self):
        return {"rewards": []}  # only the Python functions score

    def _train_records(self):
        # Each record keeps its prompt as a column too: the trainer passes a record's columns
        # but the prompt to the rewards, and TRL's reward functions get the prompt as given.
        out = []
        for r in self.train_dataset:
            r = dict(r)
            if "prompt" in r:
                r[PROMPT_COLUMN] = r["prompt"]
            out.append(r)
        return out

    def _reward_funcs(self):
        w = self.args.reward_weights or [1.0] * len(self.reward_funcs)
        return [(trl_reward(f), float(x)) for f, x in zip(self.reward_funcs, w)]


__all__ = ["SFTConfig", "SFTTrainer", "DPOConfig", "DPOTrainer", "GRPOConfig", "GRPOTrainer",
           "KTOConfig", "KTOTrainer", "ORPOConfig", "ORPOTrainer", "TrainerState",
           "TrainerControl", "TrainOutput", "TRL_VERSION", "ACCEPTED", "EXTRA", "refused"]

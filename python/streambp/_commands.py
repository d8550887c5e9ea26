"""plan, score and generate: the commands themselves (src/cli/cmd_*.cpp), results in memory."""
import json

import numpy as np

from . import _core
from ._flags import to_flags


def plan(model, **flags):
    """Peak memory of a training step, or the longest sequence that fits `budget`: the dict
    `streambp plan --json` writes. Keywords are plan's flags (dtype="bf16", budget="80GiB",
    objective="dpo", lora_r=16, ranks=8, zero=2, seq_len=4096, ...)."""
    text, _ = _core.command(["plan", "--model", str(model)] + to_flags(flags))
    return json.loads(text)


def score(model, sequences, loss_mask=None, adapter=None, grads=False, **flags):
    """The SFT loss, per-token log-probabilities and optionally every parameter's gradient of
    `model` on token sequences, as `streambp score` computes them (the same bits).

    sequences: token ids, a list of lists (or 1-D arrays); loss_mask: the same shape of 0/1
    (Hugging Face `labels != -100`), default every predicted token. Returns a dict:
      loss             mean NLL over the loss tokens (None when there are none)
      num_loss_tokens, num_tokens, mode
      logprobs         a float32 array per sequence: log p(token t+1 | tokens <= t), len - 1 each
      grads            with grads=True: {Hugging Face name: float32 array} (with `adapter`: the
                       LoRA adapters' gradients, PEFT names)
    Other keywords are score's flags (mode="stream", layer_chunk=256, precision="bf16", ...)."""
    seqs = [[int(t) for t in s] for s in sequences]
    data = {"sequences": seqs}
    if loss_mask is not None:
        data["loss_mask"] = [[int(m) for m in row] for row in loss_mask]
    args = ["score", "--model", str(model)]
    if adapter is not None:
        args += ["--adapter", str(adapter)]
    text, arrays = _core.command(args + to_flags(flags), json.dumps(data), bool(grads))
    out = json.loads(text)
    out["logprobs"] = [a for name, a in arrays if name.startswith("logprobs/")]
    if grads:
        out["grads"] = {name: a for name, a in arrays if not name.startswith("logprobs/")}
    return out


def _prompt_record(p):
    if isinstance(p, dict):
        return p
    if isinstance(p, str):
        return {"prompt": p}
    p = list(p)
    if p and isinstance(p[0], dict):
        return {"prompt": p}  # a conversation: [{"role": ..., "content": ...}, ...]
    return {"prompt_ids": [int(t) for t in p]}


def generate(model, prompts, **sampling):
    """Completions of `prompts` (texts, conversations, lists of token ids, or records as
    `streambp generate --input` reads them), as that command samples them. Keywords are its
    flags: max_new_tokens, num_return_sequences, temperature, top_p, top_k, min_p, greedy,
    stop, seed, tokenizer, adapter, ... Returns one dict per prompt and sample, in order:
    {"index", "sample", "prompt_tokens", "ids", "logprobs" (float32 array), "finish_reason",
    "completion" (with a tokenizer)}."""
    # In memory, as the lines of a --input file (an error names "prompts (in memory):N").
    lines = "".join(json.dumps(_prompt_record(p)) + "\n" for p in prompts)
    if not lines:
        raise _core.Error("generate: no prompts given")
    text, _ = _core.command(["generate", "--model", str(model)] + to_flags(sampling),
                            input_lines=lines)
    out = json.loads(text)
    for line in out:
        line["logprobs"] = np.asarray(line["logprobs"], dtype=np.float32)
    return out

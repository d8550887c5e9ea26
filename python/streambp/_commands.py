"""plan, score and generate: the commands themselves (src/cli/cmd_*.cpp), results in memory."""
import json

import numpy as np

from . import _core
from . import _check


# Flags whose work the functions do themselves: refused as keywords, not ignored.
_RETURNED = "the results are returned, nothing is written"
_NOT_HERE = {
    "plan": {"json": _RETURNED},
    "score": {"json": _RETURNED, "input": "the sequences are its argument `sequences`"},
    "generate": {"output": _RETURNED, "input": "the prompts are its argument `prompts`"},
}


def plan(model, **flags):
    """Peak memory of a training step, or the longest sequence that fits `budget`: the dict
    `streambp plan --json` writes. Keywords are plan's flags (dtype="bf16", budget="80GiB",
    objective="dpo", lora_r=16, ranks=8, zero=2, seq_len=4096, ...)."""
    args = ["plan", "--model=" + _check.path(model, "plan: model")]
    text, _ = _core.command(args + _check.flags("plan", flags, _NOT_HERE["plan"]))
    return json.loads(text)


def _token_rows(rows, where, value):
    """A list of rows (lists, tuples or 1-D arrays) of `value(x, where)`: plain lists for JSON."""
    out = []
    for i, row in enumerate(_check.sequence(rows, where, "a list of rows")):
        items = _check.sequence(row, f"{where}[{i}]", "a row (a list)")
        out.append([value(x, f"{where}[{i}][{t}]") for t, x in enumerate(items)])
    return out


def _mask_value(v, where):
    # 0/1 or a bool (Hugging Face's labels != -100); which integers are allowed is the command's.
    return bool(v) if _check.is_bool(v) else _check.integer(v, where)


def score(model, sequences, loss_mask=None, adapter=None, grads=False, **flags):
    """The SFT loss, per-token log-probabilities and optionally every parameter's gradient of
    `model` on token sequences, as `streambp score` computes them (the same bits).

    sequences: token ids, a list of lists (or 1-D arrays) of ints; loss_mask: the same shape of
    0/1 or bools (Hugging Face `labels != -100`), default every predicted token. Returns a dict:
      loss             mean NLL over the loss tokens (None when there are none)
      num_loss_tokens, num_tokens, mode
      logprobs         a float32 array per sequence: log p(token t+1 | tokens <= t), len - 1 each
      grads            with grads=True: {Hugging Face name: float32 array} (with `adapter`: the
                       LoRA adapters' gradients, PEFT names)
    Other keywords are score's flags (mode="stream", layer_chunk=256, precision="bf16", ...)."""
    args = ["score", "--model=" + _check.path(model, "score: model")]
    data = {"sequences": _token_rows(sequences, "score: sequences", _check.integer)}
    if loss_mask is not None:
        data["loss_mask"] = _token_rows(loss_mask, "score: loss_mask", _mask_value)
    if adapter is not None:
        args.append("--adapter=" + _check.path(adapter, "score: adapter"))
    grads = _check.boolean(grads, "score: grads")
    args += _check.flags("score", flags, _NOT_HERE["score"])
    text, arrays = _core.command(args, json.dumps(data), grads)
    out = json.loads(text)
    out["logprobs"] = [a for name, a in arrays if name.startswith("logprobs/")]
    if grads:
        out["grads"] = {name: a for name, a in arrays if not name.startswith("logprobs/")}
    return out


def _prompt_record(p, where):
    """One prompt as the record a --input line holds: a text, a conversation (a list of message
    dicts), token ids (a list of ints) or a whole record (a dict)."""
    if isinstance(p, dict):
        return p
    if isinstance(p, str):
        return {"prompt": p}
    if not isinstance(p, (list, tuple, np.ndarray)):
        _check.fail(where, f"{_check.kind(p)}, not a text, a conversation, a list of token ids "
                           "or a record")
    p = list(p)
    if p and isinstance(p[0], dict):
        return {"prompt": p}  # a conversation: [{"role": ..., "content": ...}, ...]
    return {"prompt_ids": [_check.integer(t, f"{where}[{i}]") for i, t in enumerate(p)]}


def generate(model, prompts, **sampling):
    """Completions of `prompts` (a list of texts, conversations, lists of token ids, or records as
    `streambp generate --input` reads them), as that command samples them. Keywords are its
    flags: max_new_tokens, num_return_sequences, temperature, top_p, top_k, min_p, greedy,
    stop, seed, tokenizer, adapter, ... Returns one dict per prompt and sample, in order:
    {"index", "sample", "prompt_tokens", "ids", "logprobs" (float32 array), "finish_reason",
    "completion" (with a tokenizer)}."""
    args = ["generate", "--model=" + _check.path(model, "generate: model")]
    # In memory, as the lines of a --input file (an error names "prompts (in memory):N").
    lines = []
    for i, p in enumerate(_check.sequence(prompts, "generate: prompts", "a list of prompts")):
        where = f"generate: prompts[{i}]"
        try:
            record = _check.json_value(_prompt_record(p, where))
        except _check.NotJson as e:
            _check.fail(where, f"cannot be written as JSON: {e}")
        lines.append(json.dumps(record, ensure_ascii=False) + "\n")
    if not lines:
        raise _core.Error("generate: no prompts given")
    args += _check.flags("generate", sampling, _NOT_HERE["generate"])
    text, _ = _core.command(args, input_lines="".join(lines))
    out = json.loads(text)
    for line in out:
        line["logprobs"] = np.asarray(line["logprobs"], dtype=np.float32)
    return out

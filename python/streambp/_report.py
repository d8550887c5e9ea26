"""report_to: the metrics lines also written to TensorBoard (event files through tensorboardX)
and Weights & Biases (wandb; WANDB_MODE=offline writes the run folder with no network), with
the names TRL's trainers log (docs/PYTHON.md "report_to"). Used by streambp.train (the config's
`report_to` key) and by the streambp.trl trainers. Each library is imported only when named."""
import datetime
import os
import socket

from . import _core

# streambp's metrics.jsonl names -> the names TRL (the HF Trainer) logs.
_RENAME = {"lr": "learning_rate", "tokens_per_s": "tokens_per_second"}
# Not metrics: counters of the line itself, or nested values flattened below.
_SKIP = {"step", "peak_memory_bytes", "peak_rss_bytes", "tokens"}


def trl_logs(line, tokens_so_far=0):
    """One metrics.jsonl line as TRL names its values: loss, learning_rate, grad_norm, epoch,
    rewards/<func>/mean, kl, entropy, ... as they are; num_tokens the tokens seen so far (TRL's
    count), tokens_per_second, memory/<category> (the step's peak by ledger category, bytes),
    memory/host_<category> (the host space's, with offload) and memory/rss (the process's peak). Returns (logs, tokens seen after this line)."""
    logs = {}
    for k, v in line.items():
        if k in _SKIP or not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        logs[_RENAME.get(k, k)] = v
    if "tokens" in line:
        tokens_so_far += line["tokens"]
        logs["num_tokens"] = tokens_so_far
    for cat, b in (line.get("peak_memory_bytes") or {}).items():
        logs[f"memory/{cat}"] = b
    # With offload: the host space's peak by category (the optimizer's state, checkpoints).
    for cat, b in (line.get("peak_host_memory_bytes") or {}).items():
        logs[f"memory/host_{cat}"] = b
    if "peak_rss_bytes" in line:
        logs["memory/rss"] = line["peak_rss_bytes"]
    return logs, tokens_so_far


def dashboard_names(logs):
    """transformers' rewrite_logs: eval_x -> eval/x, everything else train/x (what TensorBoard
    and W&B show for a TRL run)."""
    out = {}
    for k, v in logs.items():
        out[("eval/" + k[5:]) if k.startswith("eval_") else ("train/" + k)] = v
    return out


class Reporters:
    """The dashboards of `report_to` for one run: log(logs, step) to each, close() at the end."""

    def __init__(self, report_to, output_dir, run_name=None, project=None, config=None):
        self._tb = self._wandb = None
        if "tensorboard" in report_to:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                raise _core.Error("report_to: tensorboard needs the tensorboardX package "
                                  "(pip install tensorboardX)") from None
            # transformers' default: <output_dir>/runs/<date>_<host>, or $TENSORBOARD_LOGGING_DIR
            logdir = os.environ.get("TENSORBOARD_LOGGING_DIR") or os.path.join(
                output_dir, "runs",
                datetime.datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname())
            self.tensorboard_dir = logdir
            self._tb = SummaryWriter(logdir=logdir)
        if "wandb" in report_to:
            try:
                import wandb
            except ImportError:
                raise _core.Error("report_to: wandb needs the wandb package "
                                  "(pip install wandb)") from None
            self._wandb = wandb.init(project=os.environ.get("WANDB_PROJECT") or project or
                                     "huggingface", name=run_name, dir=output_dir,
                                     config=config or {}, reinit="finish_previous")
            self.wandb_dir = self._wandb.dir

    def log(self, logs, step):
        named = dashboard_names(logs)
        if self._tb is not None:
            for k, v in named.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log({**named, "train/global_step": step}, step=step)

    def close(self):
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None

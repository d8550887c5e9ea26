# TRL's GRPO quick start (TRL docs: a reward that prefers completions of 20 characters) with the
# import changed, a local tiny model and prompts in place of Qwen/Qwen2-0.5B-Instruct and
# trl-lib/tldr, and a shorter completion length so that it ends in seconds on a CPU.
#   from trl import GRPOConfig, GRPOTrainer  ->  from streambp.trl import GRPOConfig, GRPOTrainer
from datasets import load_dataset
from streambp.trl import GRPOConfig, GRPOTrainer

dataset = load_dataset("json", data_files="examples/data/grpo_prompts.jsonl", split="train")


# Reward completions close to 20 characters
def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]


training_args = GRPOConfig(output_dir="trainer_output/grpo", max_completion_length=16)
trainer = GRPOTrainer(
    model="tests/fixtures/trl/tiny",
    reward_funcs=reward_len,
    args=training_args,
    train_dataset=dataset,
)
trainer.train()

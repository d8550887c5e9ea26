# TRL's GRPO quick start (TRL 1.16, GRPOTrainer's docstring and docs) with the imports changed
# and a local tiny model and prompts (examples/data/grpo_math.jsonl: conversational prompts with
# a `solution` column, as trl-lib/DeepMath-103K has) in place of Qwen/Qwen2.5-0.5B-Instruct and
# DeepMath-103K. TRL's defaults otherwise: 8 completions of up to 512 tokens per prompt.
#   from trl import GRPOTrainer               ->  from streambp.trl import GRPOTrainer
#   from trl.rewards import accuracy_reward   ->  from streambp.trl.rewards import accuracy_reward
from datasets import load_dataset
from streambp.trl import GRPOTrainer
from streambp.trl.rewards import accuracy_reward

dataset = load_dataset("json", data_files="examples/data/grpo_math.jsonl", split="train")

trainer = GRPOTrainer(
    model="tests/fixtures/trl/tiny",
    reward_funcs=accuracy_reward,
    train_dataset=dataset,
)
trainer.train()

# TRL's SFT quick start (TRL 1.16 docs, "Quickstart") with the import changed and a local tiny
# model and dataset in place of Qwen/Qwen2.5-0.5B and trl-lib/Capybara.
#   from trl import SFTTrainer  ->  from streambp.trl import SFTTrainer
from datasets import load_dataset
from streambp.trl import SFTTrainer

dataset = load_dataset("json", data_files="examples/data/sft_messages.jsonl", split="train")

trainer = SFTTrainer(
    model="tests/fixtures/trl/tiny",
    train_dataset=dataset,
)
trainer.train()

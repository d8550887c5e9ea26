# TRL's DPO quick start (TRL 1.16 docs) with the import changed and a local tiny model and
# dataset in place of Qwen/Qwen2.5-0.5B-Instruct and trl-lib/ultrafeedback_binarized.
#   from trl import DPOTrainer  ->  from streambp.trl import DPOTrainer
from datasets import load_dataset
from streambp.trl import DPOTrainer

dataset = load_dataset("json", data_files="examples/data/arith_preference.jsonl", split="train")

trainer = DPOTrainer(
    model="tests/fixtures/trl/tiny",
    train_dataset=dataset,
)
trainer.train()

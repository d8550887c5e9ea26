#!/usr/bin/env python3
"""The other direction of the Hugging Face parity check: checkpoints that streambp writes after
a few AdamW steps load in transformers (from_pretrained, no missing or unexpected tensors) and
give the logits streambp computes.

    cmake --build build --target hf_parity_test
    python tools/hf_parity/check_roundtrip.py [--test-binary build/tests/hf_parity_test]

1. Runs the C++ test HfRoundtrip.RecipeRecreatesTheCommittedCheckpoint with
   STREAMBP_HF_ROUNDTRIP_OUT set: it trains (fixture weights, 3 AdamW steps on the fixture's
   tokens.json, stream mode) and saves each checkpoint with save_model_dir — BF16 sharded,
   BF16, and F32 with tied embeddings.
2. Loads each with AutoModelForCausalLM.from_pretrained (float32, eager attention) and records
   its logits at the first, middle and last position of every sequence (all vocabulary
   entries).
3. Commits both: tests/fixtures/hf/roundtrip/<fixture>/model/ (the checkpoint streambp wrote,
   exactly the files transformers read) and .../transformers_logits.json. The C++ test
   (HfRoundtrip.CommittedCheckpointGivesTransformersLogits) loads those files and compares its
   logits; RecipeRecreatesTheCommittedCheckpoint checks that the recipe still writes them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import FIXTURES, REPO, versions, write_json  # noqa: E402

# Must match kRoundtrips / kSteps in tests/parity/hf_parity_test.cpp.
ROUNDTRIPS = {"qwen3_gqa_qknorm": "BF16, sharded (max_shard_bytes 30000)",
              "llama_rope_llama3": "BF16",
              "qwen2_bias_tied": "F32, tied embeddings",
              "gemma3_sliding_softcap": "BF16, gemma3_text (tied, soft-capped, sliding layers)",
              "qwen2_sliding_window": "F32, qwen2 use_sliding_window (layer_types written)",
              "mistral_sliding_window": "BF16, mistral (sliding_window on every layer)"}
STEPS = 3
RECIPE = ("fixture weights; 3 AdamW steps (lr 1e-2, betas 0.9/0.999, eps 1e-8, weight decay "
          "0.01 on matrices) of the SFT loss on the fixture's tokens.json, mode stream "
          "(layer chunk 16, head chunk 32); saved with save_model_dir")


def rows_of(lengths: list[int]) -> list[tuple[int, int]]:
    """First, middle and last position of every sequence."""
    out = []
    for i, n in enumerate(lengths):
        for t in sorted({0, n // 2, n - 1}):
            out.append((i, t))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test-binary", type=Path, default=REPO / "build" / "tests" / "hf_parity_test")
    ap.add_argument("--out", type=Path, default=FIXTURES / "roundtrip")
    ap.add_argument("--only", action="append",
                    help="record only this fixture (repeatable); the others are left as they are")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not args.test_binary.exists():
        print(f"{args.test_binary}: not built (cmake --build build --target hf_parity_test)")
        return 2

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, STREAMBP_HF_ROUNDTRIP_OUT=tmp)
        subprocess.run([str(args.test_binary),
                        "--gtest_filter=*HfRoundtrip.RecipeRecreatesTheCommittedCheckpoint/*"],
                       env=env, check=True)
        for name, how in ROUNDTRIPS.items():
            if args.only and name not in args.only:
                continue
            ckpt = Path(tmp) / name
            model, info = AutoModelForCausalLM.from_pretrained(
                ckpt, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
            bad = {k: v for k, v in info.items() if v}  # missing/unexpected/mismatched keys
            if bad:
                print(f"{name}: transformers reports loading problems: {bad}")
                return 1
            model.eval()
            seqs = json.loads((FIXTURES / name / "tokens.json").read_text())["sequences"]
            with torch.no_grad():
                logits = [model(input_ids=torch.tensor([s])).logits[0] for s in seqs]
            rows = [{"sequence": i, "position": t, "values": [float(x) for x in logits[i][t]]}
                    for i, t in rows_of([len(s) for s in seqs])]
            dest = args.out / name
            if dest.exists():
                shutil.rmtree(dest)
            dest.mkdir(parents=True)
            shutil.copytree(ckpt, dest / "model")
            record = {"fixture": name, "saved_as": how, "steps": STEPS, "recipe": RECIPE,
                      "versions": versions(), "rows": rows}
            write_json(dest / "transformers_logits.json", record)
            print(f"{name}: {how}: loaded by transformers, {len(rows)} logit rows recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())

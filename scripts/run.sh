#!/usr/bin/env bash
# Fresh machine -> the main job: installs packages, builds, runs the built-in demo
# (`streambp train` with no arguments). Extra arguments go to `streambp train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
exec ./build/streambp train "$@"

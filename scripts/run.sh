#!/usr/bin/env bash
# Fresh machine -> the main job: installs packages, builds, runs the built-in demo
# (`streambp train` with no arguments). Extra arguments go to `streambp train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
# Passive OpenMP waiting: on a shared machine, spinning threads waste the cores they wait for.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
exec ./build/streambp train "$@"

#!/usr/bin/env bash
# Fresh machine -> the main job: installs the program's packages, builds the `streambp` program
# alone (scripts/test.sh builds the tests, tools and other trees), runs the built-in demo
# (`streambp train` with no arguments). Extra arguments go to `streambp train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh program
bash scripts/build.sh program
# Passive OpenMP waiting: on a shared machine, spinning threads waste the cores they wait for.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
exec ./build/streambp train "$@"

#!/usr/bin/env bash
# The placement benchmark at the sizes docs/benchmarks.md reports: one JSON line per run.
# Usage: bash scripts/bench-placement.sh [REPEAT]   (needs .venv: run scripts/demo.sh or test.sh once)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPEAT="${1:-3}"
for machines in 100 1000 4000 12500; do
  pending=$(( machines * 4 / 5 ))
  for policy in drmaestro drmaestro-na firmament; do
    .venv/bin/disagg bench placement --machines "$machines" --gpus-per-machine 4 --pending "$pending" \
      --policy "$policy" --seed 1 --repeat "$REPEAT" --json
  done
done
.venv/bin/disagg bench placement --machines 12500 --gpus-per-machine 4 --pending 10000 --policy drmaestro \
  --seed 1 --repeat "$REPEAT" --json

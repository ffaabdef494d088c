#!/usr/bin/env bash
# The main job, on the embedded default: places the example jobs on the example clusters with each policy.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
for policy in drmaestro drmaestro-na firmament; do
  .venv/bin/disagg place --cluster examples/drmaestro-testbed.yaml --jobs examples/drmaestro-jobs.yaml --policy "$policy"
done
.venv/bin/disagg place --cluster examples/flowos-testbed.yaml --jobs examples/flowos-jobs.yaml --policy fifo

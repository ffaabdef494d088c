#!/usr/bin/env bash
# The main job on the embedded default: one placement round on the shipped testbeds, then the
# controller (`disagg serve`: SQLite in ./disagg.db, the FlowOS-RM testbed as an emulated cluster,
# local processes) in the foreground, on 127.0.0.1:8080 unless told (its banner names the real URL).
# Ctrl-C stops it; extra arguments go to serve.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# As root, each job runs in its own namespaces with Debian's bubblewrap (docs/security.md); a demo keeps
# the store and the jobs' directories on one disk, which a root controller refuses unless told it may.
export DISAGG_APT_PACKAGES="${DISAGG_APT_PACKAGES:-} bubblewrap"
export DISAGG_ALLOW_JOBS_ON_STORE_DISK="${DISAGG_ALLOW_JOBS_ON_STORE_DISK:-true}"
bash "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
echo "== one scheduling round: the DRMaestro testbed (warm cluster), DRMaestro with the network-aware policy"
.venv/bin/disagg place --cluster examples/drmaestro-testbed.yaml --jobs examples/drmaestro-jobs.yaml --policy drmaestro-na
echo "== the same jobs, server-centric (Firmament): GPUs on CPU-starved machines stay idle"
.venv/bin/disagg place --cluster examples/drmaestro-testbed.yaml --jobs examples/drmaestro-jobs.yaml --policy firmament
cat <<'MSG'
== the controller: disagg serve (dashboard at /, API docs at /docs); its banner below names the URL it
   really listens on (--port, --host, a config file or DISAGG_PORT may change it) and the line to paste:
     clients: export DISAGG_URL=http://... DISAGG_TOKEN=$(cat disagg.db.d/admin-token)
   Its first start writes that admin token to disagg.db.d/admin-token (0600). In another shell, after the export:
     .venv/bin/disagg submit hello --image rodinia/nw --gpus 1 -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
     .venv/bin/disagg jobs; .venv/bin/disagg slices; .venv/bin/disagg devices
   At the seed's latencies a slice takes about 40 s to compose (attach 4 s, launch-machine 30 s, ...);
   `bash scripts/demo.sh --latency-scale 0.05` runs the emulated fabric 20x faster. As root, jobs run
   as their tenant's user (disagg-<tenant>); not as root, add --allow-same-user (docs/security.md).
MSG
exec .venv/bin/disagg serve "$@"

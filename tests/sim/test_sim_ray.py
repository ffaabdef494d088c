"""`disagg simulate --sweep --ray ADDRESS` on a Ray head this test starts in its own network namespace.

Ray will not bind to loopback on a machine with other interfaces (shared/notes/ray.md), so the head and
the driver run inside `unshare -n` with only `lo`; every port they open is on 127.0.0.1 of that
namespace. Ray's daemons outlive the shell, so the test ends exactly the processes whose command line
names its own temp dir, by pid, and nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0 or not (VENV_BIN / "ray").exists(),
    reason="needs root for `unshare -n` and ray in the venv",
)

SCRIPT = """
set -e
ip link set lo up
"$BIN/ray" start --head --port=6399 --num-cpus=2 --include-dashboard=false --disable-usage-stats \
    --temp-dir="$RAYTMP" >"$LOG" 2>&1
"$BIN/disagg" simulate --scenario paper-4m-128j --policies fifo,drmaestro --seeds 1,2 --sweep \
    --ray 127.0.0.1:6399 --json "$OUT"
"""


def own_processes(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def stop_own(marker: str) -> None:
    for proc in own_processes(marker):
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            continue
    deadline = time.monotonic() + 10
    while own_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = own_processes(marker)
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    # (A killed daemon is listed until the kernel has ended it: wait for that, or the check after reads
    # a process the kill already ended, as one run under load did with Ray's gcs_server.)
    psutil.wait_procs(left, timeout=10)


def test_sweep_runs_on_a_local_ray_cluster(tmp_path: Path) -> None:
    # Ray's unix sockets live under the temp dir and must stay short: use a short path of our own.
    raytmp = Path("/tmp") / f"dsr{os.getpid()}"
    out = tmp_path / "ray.json"
    env = {**os.environ, "BIN": str(VENV_BIN), "RAYTMP": str(raytmp), "OUT": str(out),
           "LOG": str(tmp_path / "ray-start.log"), "RAY_AUTH_MODE": "disabled", "RAY_DISABLE_USAGE_STATS": "1",
           "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
    try:
        done = subprocess.run(["unshare", "-n", "sh", "-c", SCRIPT], env=env, capture_output=True, text=True,
                              timeout=240)
    finally:
        stop_own(str(raytmp))
        shutil.rmtree(raytmp, ignore_errors=True)
    log = (tmp_path / "ray-start.log").read_text() if (tmp_path / "ray-start.log").exists() else ""
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:] + log[-2000:]
    rows = json.loads(out.read_text())["results"]
    assert sorted((r["policy"], r["seed"]) for r in rows) == [("drmaestro", 1), ("drmaestro", 2),
                                                              ("fifo", 1), ("fifo", 2)]
    assert all(r["completed"] == r["jobs"] == 128 for r in rows)
    assert own_processes(str(raytmp)) == []

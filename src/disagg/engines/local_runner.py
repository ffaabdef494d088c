"""The process that runs one prepared job for the local engine: `python -m disagg.engines.local_runner DIR`.

It runs in its own session, apart from the controller, so a controller killed with SIGKILL leaves
it running and a restarted controller finds it by the pid it wrote. It claims the job directory
with an exclusive create of `started`: a second runner for the same directory (a launch repeated
after a crash) or a cancel that came first makes it exit at once — a job never runs twice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil


def claim(path: Path, content: str) -> bool:
    """Create `path` with `content` only if it does not exist (atomic across processes)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    return True


def write_atomic(path: Path, content: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run(directory: Path) -> int:
    me = psutil.Process()
    if not claim(directory / "started", json.dumps({"pid": me.pid, "create_time": me.create_time()})):
        return 0
    spec = json.loads((directory / "spec.json").read_text())
    procs: list[subprocess.Popen[bytes]] = []
    codes: list[int] = []
    for i, task in enumerate(spec["tasks"]):
        env = dict(os.environ)
        env.update(task["env"])
        out = open(directory / f"task-{i}.stdout", "ab")  # noqa: SIM115 - closed after wait
        err = open(directory / f"task-{i}.stderr", "ab")  # noqa: SIM115
        try:
            procs.append(
                subprocess.Popen(
                    spec["command"], env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=directory
                )
            )
        except OSError as exc:
            err.write(f"disagg: cannot start {spec['command'][0]!r}: {exc.strerror}\n".encode())
            codes.append(127)
        out.close()
        err.close()
    codes += [p.wait() for p in procs]
    failed = [c for c in codes if c != 0]
    code = failed[0] if failed else 0
    write_atomic(directory / "exit", json.dumps({"code": code, "at": time.time()}))
    return 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))

"""What the isolation and preemption tests run as a tenant's job, shared by the local-engine and the Slurm
tests so that both engines are attacked by the same code."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Tries to open each `mode:path` (r read, w append/create, l list, x overwrite with an exit record) and
#: prints what happened to each, as JSON; `{slice}` is the job's own slice.
PROBE = """
import json, os, sys
out = {}
for spec in sys.argv[1:]:
    mode, path = spec.split(':', 1)
    path = path.format(slice=os.environ.get('DISAGG_SLICE', ''))
    try:
        if mode == 'r':
            open(path, 'rb').read(1)
        elif mode == 'w':
            open(path, 'ab').close()
        elif mode == 'l':
            os.listdir(path)
        else:
            open(path, 'w').write('{"code": 0}')
        out[spec] = 'ok'
    except OSError as exc:
        out[spec] = type(exc).__name__
print('PROBE ' + json.dumps(out), flush=True)
"""

#: Issue 15's cohort: alice may hold 2 + 3 borrowed GPUs of the 5 the controller composes from.
COHORT = [
    {"name": "alice", "weight": 1, "cohort": "lab", "quota": {"gpu": 2}, "borrow": {"gpu": 3}},
    {"name": "bob", "weight": 1, "cohort": "lab", "quota": {"gpu": 3}, "borrow": {"gpu": 2}},
]
GRACE_S = 1.5

#: A job that notes SIGTERM (and carries on, so that the kill at the end of the grace period is what
#: stops it), runs for its duration and then appends its attempt to done-<job>.
PATIENT = """
import os, signal, sys, time
d, duration = sys.argv[1], float(sys.argv[2])
job, attempt = os.environ["DISAGG_JOB"], os.environ.get("DISAGG_ATTEMPT", "?")
signal.signal(signal.SIGTERM, lambda *_: open(f"{d}/term-{job}-{attempt}", "w").write(repr(time.time())))
open(f"{d}/up-{job}-{attempt}", "w").close()
end = time.time() + duration
while time.time() < end:
    time.sleep(0.02)
open(f"{d}/done-{job}", "a").write(attempt + "\\n")
"""


def session_env(name: str, value: str) -> str:
    """This test session's value of an environment variable that the servers it starts read: one set from
    outside is kept, except in a pytest-xdist worker. A worker is a session of its own (it removes what it
    made when it ends, while the other worker runs on), but it inherits the environment of the process
    that started it, which set these for its own pid."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ[name] = value
        return value
    return os.environ.setdefault(name, value)


#: Where the tests' drop directories go: every controller the tests start binds it into its jobs' sandboxes
#: (`job_shared_dirs`, set for the session by tests/conftest.py; a job's /tmp is its own).
SHARED_ROOT = Path(session_env("DISAGG_TEST_SHARED", f"/var/tmp/disagg-test-shared-{os.getpid()}"))


@contextmanager
def drop_dir(prefix: str = "disagg-drop-") -> Iterator[Path]:
    """A directory every tenant's user may write to (1777, like /tmp): where test jobs leave marks that the
    test reads (jobs run as their tenant's user, who cannot write into pytest's 0700 tmp_path), under
    SHARED_ROOT, the one directory besides its own that a test job may write."""
    SHARED_ROOT.mkdir(mode=0o1777, exist_ok=True)
    SHARED_ROOT.chmod(0o1777)
    d = Path(tempfile.mkdtemp(prefix=prefix, dir=SHARED_ROOT))
    d.chmod(0o1777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)

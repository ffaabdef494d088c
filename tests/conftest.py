"""Shared fixtures for the top-level tests, and the session's clean-up of what running jobs as root makes.

As root, every controller the tests start runs its jobs as the tenants' Unix users (`disagg-<tenant>`,
made on first use) in task cgroups. The session puts the cgroups under a parent of its own
(`DISAGG_CGROUP_PARENT`, read by every `disagg serve` the tests start; `make_service` passes it) and,
at its end, kills what is left there, removes the groups, the jobs' working directories
(`/var/lib/disagg/jobs/<hash>`) and the users it made.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.attacks import SHARED_ROOT

ROOT = Path(__file__).resolve().parent.parent
#: This session's parent cgroup (under each hierarchy), apart from any real controller's `disagg`.
TEST_CGROUP = os.environ.setdefault("DISAGG_CGROUP_PARENT", f"disagg-test-{os.getpid()}")
#: The tenants' users of every controller the tests start: `disagg-<tenant>`, as the tests name them (the
#: default, one prefix per state directory, would make new users for every test's controller; the test of
#: that default sets it back).
os.environ.setdefault("DISAGG_UNIX_USER_PREFIX", "disagg-")
#: Every controller the tests start: the drop directories writable in its jobs' sandboxes, and the jobs'
#: working directories on the store's filesystem (this machine has one).
os.environ.setdefault("DISAGG_JOB_SHARED_DIRS", json.dumps([str(SHARED_ROOT)]))
os.environ.setdefault("DISAGG_ALLOW_JOBS_ON_STORE_DISK", "true")
SHARED_ROOT.mkdir(mode=0o1777, exist_ok=True)
SHARED_ROOT.chmod(0o1777)


@pytest.fixture
def examples() -> Path:
    return ROOT / "examples"


@pytest.fixture
def run_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark as a user runs it: without the allowance of jobs on the store's disk that this module
    gives every controller of the suite (it hid that benchmarks with throw-away stores in /tmp refused to
    start as root)."""
    monkeypatch.delenv("DISAGG_ALLOW_JOBS_ON_STORE_DISK", raising=False)


def _tenant_users() -> set[str]:
    return {p.pw_name for p in pwd.getpwall() if p.pw_name.startswith("disagg-")}


def _jobs_dirs() -> set[Path]:
    from disagg.engines.local import SYSTEM_JOBS_ROOT

    return set(SYSTEM_JOBS_ROOT.iterdir()) if SYSTEM_JOBS_ROOT.is_dir() else set()


#: Each running test session's mark (its pid): the tenants' users and the jobs' directories are shared
#: between sessions on one machine, so a session that ends while another runs leaves them to the last.
SESSIONS = Path("/var/tmp/disagg-test-sessions")


def _others_running() -> bool:
    """Whether another test session on this machine is still running (its mark names a live process)."""
    others = [p for p in SESSIONS.iterdir() if p.name.isdigit() and int(p.name) != os.getpid()]
    return any(Path(f"/proc/{p.name}").exists() for p in others)


@pytest.fixture(scope="session", autouse=True)
def _clean_up_users_and_cgroups() -> Iterator[None]:
    """Remove the task cgroups, the jobs' working directories and the tenants' users this session made
    (root only). While another session runs, its users and jobs' directories may be among those made
    since this one started (the users are shared by name): then only what belongs to a state directory
    that is gone is removed, and the users are left to the last session."""
    before = _tenant_users() if os.geteuid() == 0 else set()
    dirs = _jobs_dirs() if os.geteuid() == 0 else set()
    mark = SESSIONS / str(os.getpid())
    if os.geteuid() == 0:
        SESSIONS.mkdir(mode=0o700, exist_ok=True)
        mark.touch()
    yield
    shutil.rmtree(SHARED_ROOT, ignore_errors=True)
    if os.geteuid() != 0:
        return
    mark.unlink(missing_ok=True)
    alone = not _others_running()
    for made in sorted(_jobs_dirs()):  # this session's, and those of state directories that are gone
        state = made / "state-dir"
        gone = state.exists() and not Path(state.read_text().strip()).exists()
        if gone or (alone and made not in dirs):
            shutil.rmtree(made, ignore_errors=True)
    from disagg.engines.cgroups import detect

    confinement = detect(TEST_CGROUP)
    for parent in [confinement.v2, *confinement.v1.values()]:
        if parent is None:
            continue
        for child in Path(parent).iterdir():
            if child.is_dir():
                confinement.group(child.name).remove(timeout=5)
        Path(parent).rmdir()
    for user in sorted(_tenant_users() - before) if alone else []:
        subprocess.run(["userdel", user], capture_output=True, check=False)

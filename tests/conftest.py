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

from tests.attacks import SHARED_ROOT, session_env

ROOT = Path(__file__).resolve().parent.parent
#: This session's parent cgroup (under each hierarchy), apart from any real controller's `disagg`.
TEST_CGROUP = session_env("DISAGG_CGROUP_PARENT", f"disagg-test-{os.getpid()}")
#: The tenants' users of every controller the tests start: `disagg-<tenant>`, as the tests name them (the
#: default, one prefix per state directory, would make new users for every test's controller; the test of
#: that default sets it back).
os.environ.setdefault("DISAGG_UNIX_USER_PREFIX", "disagg-")
#: Every controller the tests start: the drop directories writable in its jobs' sandboxes, and the jobs'
#: working directories on the store's filesystem (this machine has one).
session_env("DISAGG_JOB_SHARED_DIRS", json.dumps([str(SHARED_ROOT)]))
os.environ.setdefault("DISAGG_ALLOW_JOBS_ON_STORE_DISK", "true")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each of Schemathesis's tests (one per API operation, `test_control_fuzz.py`) under its own id, as
    its name says (`test_api_answers_within_its_schema[GET /v1/jobs]`): with pytest 9.2 the 34 share the
    function's id, so pytest-xdist, which sends a worker tests by id, ran only the first of them."""
    for item in items:
        if item.parent is not None and item.nodeid.rsplit("::", 1)[-1] != item.name:
            item._id = item.parent.id.child(item.name)  # type: ignore[attr-defined]


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_ByFile(), "disagg-by-file")


def xdist_scope(nodeid: str) -> str:
    """Which tests pytest-xdist sends to one worker (scripts/test.sh runs two): a file's, so that a module's
    fixture (the chaos soak, a server a file's tests share) runs once and its tests run in their order; and
    every Slurm test, whose session's cluster (`tests/slurm/conftest.py`) is one munged, one slurmctld and
    four slurmds, not one per worker. (xdist's own `--dist loadgroup` would say this with marks, but with
    pytest 9.2 it no longer groups: pytest-xdist issue 1386.)"""
    path = nodeid.split("::", 1)[0]
    return "tests/slurm" if path.startswith("tests/slurm/") else path


class _ByFile:
    """The scheduler that sends tests to workers by `xdist_scope`; the biggest shares first (xdist's
    `--loadscope-reorder`, by count of tests)."""

    @staticmethod
    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
        from xdist.scheduler import LoadScopeScheduling

        class Scheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return xdist_scope(nodeid)

        return Scheduling(config, log)  # type: ignore[arg-type]


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


@pytest.fixture(autouse=True)
def _umask_as_it_was() -> Iterator[None]:
    """`disagg serve` run in this process (CliRunner) sets the umask to 077 for the process's life: every
    later test of the worker then made its files 0600 (a Slurm node record a test reads as 0644 among them)."""
    before = os.umask(0o022)
    os.umask(before)
    yield
    os.umask(before)


@pytest.fixture(scope="session", autouse=True)
def _clean_up_users_and_cgroups() -> Iterator[None]:
    """Remove the task cgroups, the jobs' working directories and the tenants' users this session made
    (root only). While another session runs, its users and jobs' directories may be among those made
    since this one started (the users are shared by name): then only what belongs to a state directory
    that is gone is removed, and the users are left to the last session."""
    before = _tenant_users() if os.geteuid() == 0 else set()
    dirs = _jobs_dirs() if os.geteuid() == 0 else set()
    mark = SESSIONS / str(os.getpid())
    SHARED_ROOT.mkdir(mode=0o1777, exist_ok=True)  # (here, not at import: pytest-xdist's own process runs no test)
    SHARED_ROOT.chmod(0o1777)
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

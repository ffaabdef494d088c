"""The parts of the local engine's isolation, one by one: which cgroups a host offers, a tenant's default
Unix user, the runner's capped and labelled log, a log page that never cuts a character, and the runner's
light start (what it imports, what it reads and writes)."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from disagg.engines.accounts import Accounts, default_unix_user
from disagg.engines.base import TaskRefused, page_of
from disagg.engines.cgroups import Confinement, Limits, cgroup_mounts, detect
from disagg.engines.local import _PACKAGE_ROOT
from disagg.engines.local_runner import BOOT, RUNNER_SPEC, JobLog, flat_json, read_spec
from disagg.model.tenants import parse_tenants

HYBRID = """cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
PURE_V2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"
PURE_V1 = ("cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n"
           "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n")


@pytest.mark.parametrize(("mounts", "v2", "v1"), [
    (HYBRID, "/sys/fs/cgroup/unified", {"cpu", "memory", "pids", "freezer"}),
    (PURE_V2, "/sys/fs/cgroup", set()),
    (PURE_V1, None, {"cpu", "memory"}),
    ("proc /proc proc rw 0 0\n", None, set()),
], ids=["hybrid", "pure-v2", "pure-v1", "none"])
def test_the_mounted_hierarchies_are_found(mounts: str, v2: str | None, v1: set[str]) -> None:
    found_v2, found_v1 = cgroup_mounts(mounts)
    assert (str(found_v2) if found_v2 else None) == v2 and set(found_v1) == v1


def test_without_cgroups_the_start_says_what_is_lost() -> None:
    c = detect("disagg-none", mounts="proc /proc proc rw 0 0\n")
    assert not c.usable and c.limits() == ()
    assert "process groups" in c.describe() and "setsid" in c.describe() and "no cgroup v2" in c.describe()
    assert Confinement.from_json(c.to_json()) == c
    with pytest.raises(ValueError, match="bad task group name"):
        c.group("../escape")


def test_a_tenants_default_user_is_a_valid_name_of_its_own() -> None:
    assert default_unix_user("alice") == "disagg-alice"
    odd = [default_unix_user(t) for t in ("Alice", "al.ice", "a" * 64, "A" * 64)]
    assert len(set(odd)) == 4 and "disagg-alice" not in odd  # "Alice" and "alice" never share a user
    assert all(len(u) <= 32 and u.startswith("disagg-") and u == u.lower() for u in odd)


def _not_root_accounts() -> None:
    """What a controller that is not root lets run (raises AssertionError otherwise)."""
    import pwd

    me = pwd.getpwuid(os.geteuid()).pw_name
    strict = Accounts(parse_tenants([{"name": "mine", "unix_user": me}]))
    assert strict.of("mine").uid == os.geteuid() and not strict.of("mine").drop
    try:
        strict.of("other")
        raise AssertionError("another tenant's job would run as this user")
    except TaskRefused as exc:
        assert "allow_same_user" in str(exc)
    assert Accounts(allow_same_user=True).of("other").uid == os.geteuid()
    assert "not root" in Accounts().notes()[0]


def test_not_root_a_job_runs_only_as_this_user_unless_allowed() -> None:
    if os.geteuid() != 0:
        _not_root_accounts()
        return
    pid = os.fork()  # as root: try it as `nobody` in a child
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            _not_root_accounts()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_log_keeps_to_its_cap_and_labels_the_tasks(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "output", tasks=2, cap=40)
    log.write(0, 1, b"hello\nwor")
    log.write(1, 2, b"oops\n")
    log.write(0, 1, b"ld\n" + b"x" * 40 + b"\n")
    log.write(0, 1, b"more\n")  # past the cap: dropped
    log.flush(1, 2)
    text = (tmp_path / "output").read_text()
    assert text.startswith("[task 0] hello\n[task 1] oops\n[task 0] world\n")
    assert text.count("task 0 wrote more than 40 bytes") == 1 and "more\n" not in text
    single = JobLog(tmp_path / "one", tasks=1, cap=5)
    single.write(0, 1, b"abc")
    single.write(0, 2, b"de")  # exactly the cap
    single.write(0, 1, b"f")
    assert (tmp_path / "one").read_bytes().startswith(b"abcde\n[disagg: task 0 wrote more than 5 bytes")


def test_a_log_page_ends_on_a_whole_character() -> None:
    data = "añb€c".encode()  # 1 + 2 + 1 + 3 + 1 bytes
    first = page_of(data, 0, 2)  # "ñ" would be cut: the page stops before it
    assert (first.text, first.next_offset, first.size) == ("a", 1, len(data))
    second = page_of(data, first.next_offset, 5)
    assert second.text == "ñb" and page_of(data, second.next_offset, 100).text == "€c"
    assert page_of(data, 2, 1).text == "\ufffd"  # a page that would be empty takes the byte as it is


def test_a_confinement_is_a_value_that_cannot_change() -> None:
    c = Confinement("/sys/fs/cgroup/unified/disagg", (), {"cpu": "/sys/fs/cgroup/cpu/disagg"}, ("no pids",))
    assert c == Confinement.from_json(c.to_json()) and c != Confinement(None, (), {"cpu": "/sys/fs/cgroup/cpu/disagg"})
    assert Confinement().v1 == {} and Confinement().v1 is not Confinement().v1
    assert repr(Limits(0.5, 2**30, 64)) == "Limits(cpus=0.5, memory_bytes=1073741824, pids=64)"
    with pytest.raises(AttributeError, match="cannot assign to field 'v2'"):
        c.v2 = None  # type: ignore[misc]


#: What the runner's start may not import: each costs it CPU at every job's start (json's re alone 6 ms).
HEAVY = {"json", "re", "dataclasses", "inspect", "pathlib", "typing", "selectors", "threading", "contextlib"}


def test_the_runner_starts_without_the_heavy_modules() -> None:
    boot = BOOT.replace("sys.exit(main(sys.argv[2:]))", "print(' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", boot, _PACKAGE_ROOT], capture_output=True, text=True,
                         check=True).stdout.split()
    assert "disagg.engines.local_runner" in out and "disagg.engines.cgroups" in out
    assert HEAVY.isdisjoint(out), sorted(HEAVY.intersection(out))


@pytest.mark.parametrize("fields", [
    {"pid": 4242, "start": "9876543"}, {"pid": 1, "start": None}, {"code": 0, "at": 1795539564.9383392},
    {"code": 137, "at": 1e-07}, {"code": -9, "at": 1795539565.0},
], ids=["claim", "claim-gone", "exit", "exit-tiny-time", "exit-negative"])
def test_the_runners_records_are_what_json_writes(fields: dict[str, int | float | str | None]) -> None:
    assert flat_json(fields) == json.dumps(fields)


def test_a_record_json_would_have_to_escape_is_refused() -> None:
    with pytest.raises(ValueError, match=r"start='1\"}': only strings of digits"):
        flat_json({"start": '1"}'})


def test_the_runner_reads_its_job_in_marshal_or_from_an_older_controllers_json(tmp_path: Path) -> None:
    job = {"handle": "s-1", "command": ["true"], "tasks": [{"env": {"PATH": "/bin"}, "cpus": 0.5}], "confinement": None}
    (tmp_path / "spec.json").write_text(json.dumps(job))
    assert read_spec(str(tmp_path)) == job  # prepared before spec.marshal existed
    (tmp_path / RUNNER_SPEC).write_bytes(marshal.dumps({**job, "handle": "s-2"}))
    assert read_spec(str(tmp_path)) == {**job, "handle": "s-2"}

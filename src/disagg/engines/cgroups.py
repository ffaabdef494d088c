"""Confining a task: one cgroup per task, with cpu, memory and pids limits, killed as a whole.

The local engine runs every task of a job in a control group of its own (Slurm's task/cgroup plugin
does the same), so that a task gets no more cpu and memory than it asked for, cannot fork without
bound, and everything it started dies with it: a cancel kills the group, and a process that left
its process group with `setsid` is still in the group.

Hosts mount cgroups differently, so `detect()` looks at what is mounted and uses what is there:
  - the v2 hierarchy (`cgroup2`, pure at /sys/fs/cgroup or beside v1 at /sys/fs/cgroup/unified):
    the whole group is killed with `cgroup.kill`; its `cpu`, `memory`, `pids` controllers are used
    when they can be enabled for disagg's groups;
  - v1 hierarchies (`cpu`, `memory`, `pids`, `freezer`): each controller the v2 one lacks; without
    v2, a group is killed by freezing it (`freezer`), killing each of its processes, and thawing.
What it could not use is said in `Confinement.notes` (the controller prints them at start); with
no usable hierarchy at all the engine falls back to process groups and says so.

Standard library only, and little of it: the runner (`local_runner`) imports this module at each
job's start, in an interpreter started without site packages. So what the runner uses (`Confinement`,
`TaskGroup`, `Limits`) works on path strings with `os` alone, its records are plain classes (no
`dataclasses`, which would import `inspect`), and what only the controller does at its start
(`detect`) imports `pathlib` when it runs.
"""

from __future__ import annotations

import os
import time

#: `typing.TYPE_CHECKING` without importing typing (mypy reads a constant of this name the same way).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path
    from typing import Any

#: The limits disagg sets, by controller.
LIMITED = ("cpu", "memory", "pids")
#: v1 controllers disagg uses (the freezer only to kill a group where v2 has no `cgroup.kill`).
V1_CONTROLLERS = (*LIMITED, "freezer")
#: The period of the cpu bandwidth limit, microseconds (the kernel's default).
CPU_PERIOD_US = 100_000


class CgroupError(OSError):
    """A group could not be made, limited or joined; says which file and why."""


def _write(path: str, value: str) -> None:
    try:
        _put(path, value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from None


def _put(path: str, value: str) -> None:
    """Write `value` to the (control) file `path`, as `Path.write_text` does."""
    with open(path, "w") as f:
        f.write(value)


def _read(path: str) -> str:
    """The text of the (control) file `path`, as `Path.read_text` reads it."""
    with open(path) as f:
        return f.read()


def cgroup_mounts(mounts: str | None = None) -> tuple[Path | None, dict[str, Path]]:
    """(the v2 hierarchy's mount point or None, {v1 controller: its hierarchy's mount point}) from /proc/self/mounts."""
    from pathlib import Path  # the controller's start only (see the module's docstring)

    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return None, {}
    v2: Path | None = None
    v1: dict[str, Path] = {}
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        where, fstype, options = Path(parts[1]), parts[2], parts[3].split(",")
        if fstype == "cgroup2" and v2 is None:
            v2 = where
        elif fstype == "cgroup":
            for c in V1_CONTROLLERS:
                if c in options and c not in v1:
                    v1[c] = where
    return v2, v1


class _Record:
    """A record of named fields that compares by value and cannot be changed: what
    `dataclass(frozen=True)` gives, written out so that the runner does not import `dataclasses`.
    A subclass names its fields in `__slots__`, in the order of its `__init__`'s arguments."""

    __slots__: tuple[str, ...] = ()

    def __init__(self, *values: object) -> None:
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _Record)
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # mutable fields (a dict), as the dataclass had

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self.__slots__, self._values(), strict=True))
        return f"{type(self).__name__}({fields})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of {type(self).__name__}")

    __delattr__ = __setattr__  # type: ignore[assignment]


class Confinement(_Record):
    """Where this host lets disagg make task groups: the parent group in each usable hierarchy.

    `v2`: the parent group in the v2 hierarchy (None: not usable); `v2_controllers`: the limits
    enabled there for the tasks' groups; `v1`: {controller: parent group} in v1 hierarchies.
    """

    __slots__ = ("v2", "v2_controllers", "v1", "notes")  # noqa: RUF023 - in the order of __init__
    v2: str | None
    v2_controllers: tuple[str, ...]
    v1: dict[str, str]
    notes: tuple[str, ...]

    def __init__(self, v2: str | None = None, v2_controllers: tuple[str, ...] = (),
                 v1: dict[str, str] | None = None, notes: tuple[str, ...] = ()) -> None:
        super().__init__(v2, v2_controllers, {} if v1 is None else v1, notes)

    @property
    def usable(self) -> bool:
        """Whether tasks can be put in groups at all (else: process groups)."""
        return self.v2 is not None or bool(self.v1)

    def limits(self) -> tuple[str, ...]:
        """The limits a task gets (of cpu, memory, pids)."""
        return tuple(c for c in LIMITED if c in self.v2_controllers or c in self.v1)

    def killer(self) -> str:
        """How a whole group is killed, in words."""
        if self.v2 is not None:
            return "cgroup v2 (cgroup.kill)"
        if "freezer" in self.v1:
            return "cgroup v1 (freeze, kill each process, thaw)"
        return "cgroup v1 (kill each process until none is left)"

    def describe(self) -> str:
        """One line for the controller's start: what confines a task, and what is missing."""
        if not self.usable:
            why = "; ".join(self.notes) or "no cgroup hierarchy is mounted"
            return (f"no cgroups ({why}): tasks run in process groups; their cpu and memory are not "
                    "limited, and a process that leaves its group (setsid) survives a cancel")
        limits = ", ".join(self.limits()) or "none"
        missing = f" ({'; '.join(self.notes)})" if self.notes else ""
        return f"tasks run in a cgroup each: killed by {self.killer()}; limits: {limits}{missing}"

    def group(self, name: str) -> TaskGroup:
        """The group of one task (`name`: unique on this host, e.g. `<slice>.<task>`)."""
        if "/" in name or name.startswith("."):
            raise ValueError(f"bad task group name {name!r}")
        return TaskGroup(self, name)

    def to_json(self) -> dict[str, Any]:
        return {"v2": self.v2, "v2_controllers": list(self.v2_controllers), "v1": dict(self.v1),
                "notes": list(self.notes)}

    @staticmethod
    def from_json(data: dict[str, Any] | None) -> Confinement:
        if not data:
            return Confinement(notes=("not set up",))
        return Confinement(data.get("v2"), tuple(data.get("v2_controllers", ())), dict(data.get("v1", {})),
                           tuple(data.get("notes", ())))


def detect(parent: str, mounts: str | None = None) -> Confinement:
    """Make disagg's parent group `parent` in each usable hierarchy and say what tasks can get.

    Idempotent (a parent that exists is used as it is). Needs the right to make groups (root).
    """
    v2_root, v1_roots = cgroup_mounts(mounts)
    notes: list[str] = []
    v2: str | None = None
    enabled: tuple[str, ...] = ()
    if v2_root is None:
        notes.append("no cgroup v2 hierarchy is mounted")
    else:
        try:
            path = _make_parent(v2_root, parent)
            enabled = _enable(v2_root, path)
            v2 = str(path)
        except OSError as exc:
            notes.append(f"cgroup v2 at {v2_root} is not usable: {exc}")
    v1: dict[str, str] = {}
    for c in V1_CONTROLLERS:
        if c in enabled or (c == "freezer" and v2 is not None):
            continue
        if c not in v1_roots:
            if c in LIMITED:
                notes.append(f"no {c} controller (no {c} limit)")
            continue
        try:
            v1[c] = str(_make_parent(v1_roots[c], parent))
        except OSError as exc:
            notes.append(f"the v1 {c} controller is not usable: {exc}")
    return Confinement(v2, enabled, v1, tuple(notes))


def _make_parent(root: Path, parent: str) -> Path:
    """The parent group under a hierarchy's root, made if missing; a probe child proves we may make groups."""
    path = root / parent
    path.mkdir(exist_ok=True)
    probe = path / f"probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    probe.rmdir()
    return path


def _enable(root: Path, parent: Path) -> tuple[str, ...]:
    """Enable each of cpu, memory, pids for the children of `parent` (v2); those that could be enabled."""
    try:
        available = (root / "cgroup.controllers").read_text().split()
    except OSError:
        return ()
    enabled = []
    for c in LIMITED:
        if c not in available:
            continue
        try:
            for where in (root, parent):
                if c not in (where / "cgroup.subtree_control").read_text().split():
                    (where / "cgroup.subtree_control").write_text(f"+{c}")
            enabled.append(c)
        except OSError:
            continue  # e.g. the root has processes of its own in a container: the limit is not to be had
    return tuple(enabled)


class HostLimits(_Record):
    """What all of disagg's tasks together may use (the parent groups' limits): memory in bytes and
    processes, the host's less a reserve for the controller (`host_limits`)."""

    __slots__ = ("memory_bytes", "pids")  # in the order of __init__
    memory_bytes: int
    pids: int

    def __init__(self, memory_bytes: int, pids: int) -> None:
        super().__init__(memory_bytes, pids)


def host_limits(memory_reserve: int, pids_reserve: int, meminfo: str | None = None,
                pid_max: str | None = None) -> HostLimits:
    """The host's memory (`MemTotal`) and process numbers (`kernel.pid_max`), each less its reserve for
    the controller and the system (at least a tenth of the host's is left to the tasks)."""
    if meminfo is None:
        meminfo = _read("/proc/meminfo")
    if pid_max is None:
        pid_max = _read("/proc/sys/kernel/pid_max")
    total = next(int(line.split()[1]) * 1024 for line in meminfo.splitlines() if line.startswith("MemTotal:"))
    pids = int(pid_max.strip())
    return HostLimits(max(total - memory_reserve, total // 10), max(pids - pids_reserve, pids // 10))


def limit_parent(confinement: Confinement, limits: HostLimits) -> list[str]:
    """Set the host-wide limits on disagg's parent groups (memory and pids, where there is a controller
    for them); what could not be set, in words (the controller prints it at start)."""
    notes = []
    writes: list[tuple[str, str]] = []
    if confinement.v2 is not None:
        if "memory" in confinement.v2_controllers:
            writes.append((f"{confinement.v2}/memory.max", str(limits.memory_bytes)))
        if "pids" in confinement.v2_controllers:
            writes.append((f"{confinement.v2}/pids.max", str(limits.pids)))
    if "memory" in confinement.v1:
        writes.append((f"{confinement.v1['memory']}/memory.limit_in_bytes", str(limits.memory_bytes)))
    if "pids" in confinement.v1:
        writes.append((f"{confinement.v1['pids']}/pids.max", str(limits.pids)))
    for path, value in writes:
        try:
            _write(path, value)
        except OSError as exc:
            notes.append(str(exc))
    return notes


class Limits(_Record):
    """What a task may use: cpus (bandwidth, may be fractional), memory in bytes, processes."""

    __slots__ = ("cpus", "memory_bytes", "pids")  # in the order of __init__
    cpus: float
    memory_bytes: int
    pids: int

    def __init__(self, cpus: float, memory_bytes: int, pids: int) -> None:
        super().__init__(cpus, memory_bytes, pids)


class TaskGroup:
    """One task's group, in every usable hierarchy (the same name in each)."""

    def __init__(self, confinement: Confinement, name: str) -> None:
        self.confinement = confinement
        self.name = name
        paths: dict[str, str] = {}
        if confinement.v2 is not None:
            paths["v2"] = os.path.join(confinement.v2, name)
        for c, parent in confinement.v1.items():
            paths[c] = os.path.join(parent, name)
        self.paths = paths

    def create(self, limits: Limits) -> None:
        """Make the group with its limits (CgroupError naming the file otherwise). Safe to repeat."""
        for path in self.paths.values():
            try:
                _make_dir(path)
            except OSError as exc:
                raise CgroupError(f"cannot make {path}: {exc.strerror or exc}") from None
        v2 = self.paths.get("v2")
        if v2 is not None:
            enabled = self.confinement.v2_controllers
            if "cpu" in enabled:
                _write(f"{v2}/cpu.max", f"{_quota(limits.cpus)} {CPU_PERIOD_US}")
            if "memory" in enabled:
                _write(f"{v2}/memory.max", str(limits.memory_bytes))
                if os.path.exists(f"{v2}/memory.swap.max"):
                    _write(f"{v2}/memory.swap.max", "0")
            if "pids" in enabled:
                _write(f"{v2}/pids.max", str(limits.pids))
        if "cpu" in self.paths and "cpu" in self.confinement.v1:
            _write(f"{self.paths['cpu']}/cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(f"{self.paths['cpu']}/cpu.cfs_quota_us", str(_quota(limits.cpus)))
        if "memory" in self.confinement.v1:
            mem = self.paths["memory"]
            _write(f"{mem}/memory.limit_in_bytes", str(limits.memory_bytes))
            if os.path.exists(f"{mem}/memory.memsw.limit_in_bytes"):  # no way around the limit through swap
                _write(f"{mem}/memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        if "pids" in self.confinement.v1:
            _write(f"{self.paths['pids']}/pids.max", str(limits.pids))

    def join(self, pid: int = 0) -> None:
        """Put process `pid` (0: the caller) into the group in every hierarchy."""
        for path in self.paths.values():
            _write(f"{path}/cgroup.procs", str(pid or os.getpid()))

    def pids(self) -> set[int]:
        """The processes in the group now (in any hierarchy)."""
        found: set[int] = set()
        for path in self.paths.values():
            try:
                found |= {int(p) for p in _read(f"{path}/cgroup.procs").split()}
            except OSError:
                continue
        return found

    def exists(self) -> bool:
        return any(os.path.exists(p) for p in self.paths.values())

    def kill(self, timeout: float = 10.0) -> bool:
        """SIGKILL every process in the group, including ones that left their process group. Safe to
        repeat and on a group that is gone; whether the group is empty at the end."""
        end = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                return True
            v2 = self.paths.get("v2")
            if v2 is not None and os.path.exists(f"{v2}/cgroup.kill"):
                try:  # noqa: SIM105 - contextlib is one import more at each runner's start
                    _put(f"{v2}/cgroup.kill", "1")
                except OSError:
                    pass
            else:
                self._freeze_and_kill(pids)
            if time.monotonic() > end:
                return not self.pids()
            time.sleep(0.005)

    def _freeze_and_kill(self, pids: Iterable[int]) -> None:
        """Without cgroup.kill: freeze the group (no process can fork meanwhile), kill each one, thaw."""
        import contextlib
        import signal

        freezer = self.paths.get("freezer")
        state = f"{freezer}/freezer.state" if freezer is not None else None
        v2_freeze = f"{self.paths['v2']}/cgroup.freeze" if "v2" in self.paths else None
        with contextlib.suppress(OSError):
            if state is not None:
                _put(state, "FROZEN")
            elif v2_freeze is not None:
                _put(v2_freeze, "1")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            if state is not None:
                _put(state, "THAWED")
            elif v2_freeze is not None:
                _put(v2_freeze, "0")

    def remove(self, timeout: float = 5.0) -> bool:
        """Remove the group once it is empty (killing what is left first); whether it is gone."""
        self.kill(timeout)
        end = time.monotonic() + timeout
        while True:
            left = []
            for path in self.paths.values():
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    continue
                except OSError:
                    left.append(path)
            if not left or time.monotonic() > end:
                return not left
            time.sleep(0.01)


def _make_dir(path: str) -> None:
    """`Path(path).mkdir(exist_ok=True)`: a directory that is there already is fine, a file is not."""
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise


def _quota(cpus: float) -> int:
    """The cpu bandwidth quota in microseconds per period (at least 1 ms: the kernel's least)."""
    return max(1000, round(cpus * CPU_PERIOD_US))


__all__ = ["CgroupError", "Confinement", "HostLimits", "Limits", "TaskGroup", "cgroup_mounts", "detect", "host_limits",
           "limit_parent"]

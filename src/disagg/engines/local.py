"""The local engine: a job's tasks run as processes on this host, as the tenant's user, confined.

Two directories per job attempt (slice), each of its own owner:
  - `<root>/<handle>/`, the controller's (0700, in its state directory): `spec.json` (what
    prepare-task staged: command, per-task environment and limits, the account; `spec.marshal`, the
    same for the runner, which starts quicker without json), `machines/<name>`
    (one marker per launched slice machine), `launched`, `started` (the runner's claim, or a cancel's),
    `exit` (the job's exit code), `output` (what the tasks wrote, capped), `runner.log`. No task can
    open any of them: the exit code a job reports is the runner's, never a file the job could write;
  - `<jobs_dir>/<handle>/`, the job's (0700, owned by the tenant's user): its working directory and
    HOME, with `hostfile` (one line per slice machine with its slots, OpenMPI style).

Every task gets only these variables (nothing of the controller's environment): `PATH`, `HOME`,
`USER`, `LANG`, `CUDA_VISIBLE_DEVICES` (indices of its GPUs on the composed node), and `DISAGG_JOB`,
`DISAGG_SLICE`, `DISAGG_ATTEMPT`, `DISAGG_TASK_INDEX`, `DISAGG_TASK_COUNT`, `DISAGG_MACHINE`,
`DISAGG_HOST`, `DISAGG_DEVICES` (its device ids), `DISAGG_HOSTFILE` and `DISAGG_WORKDIR` (absolute
paths, wherever the store and the state directory are).

The runner (`disagg.engines.local_runner`) supervises the tasks: it runs in its own session as the
controller's user, so jobs outlive a controller killed with SIGKILL and a restarted controller finds
them again from these files. Who a job runs as: `accounts`; how a task is confined: `cgroups` (its
limits, under a parent limited to the host less the controller's reserve) and, as root, `sandbox` (its
namespaces: bubblewrap); a root controller without bwrap refuses to start unless `allow_no_sandbox`, and
one whose jobs' directories share the store's filesystem unless `allow_jobs_on_store_disk`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import marshal
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import disagg
from disagg.engines.accounts import DEFAULT_PREFIX, Account, Accounts
from disagg.engines.base import Engine, LogPage, SliceMachine, SliceSpec, TaskRefused, TaskStatus, file_page
from disagg.engines.cgroups import Confinement, detect, host_limits, limit_parent
from disagg.engines.local_runner import (
    BOOT,
    CONTROLLER_OOM_SCORE_ADJ,
    RUNNER_SPEC,
    TASK_OOM_SCORE_ADJ,
    claim,
    oom_score_adj,
    start_ticks,
    write_atomic,
)
from disagg.engines.sandbox import NETWORK_HOST, NETWORK_LOOPBACK
from disagg.fabric.emulated import OperationLatencies
from disagg.model.states import RunState
from disagg.model.tenants import Tenants

#: A launched runner that has not claimed its job after this long is taken as lost.
START_GRACE_S = 30.0
#: The PATH every task gets.
TASK_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Where a root controller keeps the jobs' working directories by default (one directory per state dir).
SYSTEM_JOBS_ROOT = Path("/var/lib/disagg/jobs")
#: The directory that holds the `disagg` package: the runner puts only it on its path.
_PACKAGE_ROOT = str(Path(disagg.__file__).resolve().parent.parent)


@dataclass(frozen=True)
class Isolation:
    """How the local engine keeps jobs apart from the controller and from each other.

    `cgroup_parent`: the name of disagg's group in each cgroup hierarchy (None: no cgroups, process
    groups only). `jobs_dir`: where the working directories go (None: `default_jobs_dir`).
    """

    tenants: Tenants = field(default_factory=Tenants)
    allow_same_user: bool = False
    jobs_dir: Path | None = None
    log_cap: int = 64 * 2**20
    cgroup_parent: str | None = "disagg"
    pids_max: int = 4096
    unix_user_prefix: str = DEFAULT_PREFIX
    #: Namespaces (bubblewrap) for every job as root; `allow_no_sandbox`: start without them when bwrap is missing.
    sandbox: bool = True
    allow_no_sandbox: bool = False
    #: What every job's sandbox hides besides the state directory and the jobs' root: the store's files.
    hide_files: tuple[Path, ...] = ()
    hide_dirs: tuple[Path, ...] = ()
    #: Directories every job may write (bound read-write into each sandbox), e.g. a shared filesystem.
    shared_dirs: tuple[Path, ...] = ()
    #: Each task's private /tmp and /dev/shm (tmpfs, charged to its memory), bytes each.
    tmp_bytes: int = 1024 * 2**20
    #: A job's working directory (the runner kills the job past it; 0: no limit).
    disk_bytes: int = 10 * 2**30
    #: What all jobs' working directories of one tenant may hold together (0: no limit).
    tenant_disk_bytes: int = 0
    #: Whether the jobs' working directories may share the store's filesystem (else refused at start).
    allow_jobs_on_store_disk: bool = False
    #: The store's directory (SQLite) or the state directory: its filesystem must not be the jobs'.
    store_dir: Path | None = None
    #: Left to the controller and the system by the jobs' parent cgroup: memory in bytes, processes.
    reserve_memory: int = 2 * 2**30
    reserve_pids: int = 2048


def default_jobs_dir(state_root: Path) -> Path:
    """The jobs' working directories: beside the state directory for a controller that is not root
    (its jobs run as itself); for root, `/var/lib/disagg/jobs/<hash of the state directory>`, which
    every tenant's user can reach (a state directory may sit where others cannot pass, such as /root)."""
    if os.geteuid() != 0:
        return Path(f"{state_root}.jobs")
    return SYSTEM_JOBS_ROOT / hashlib.sha256(str(state_root).encode()).hexdigest()[:16]


class LocalEngine(Engine):
    """Runs jobs as local processes. `latencies` emulate the node operations (boot, hand-over)."""

    name = "local"
    records_in_state_dir = True

    def __init__(self, root: str | Path, latencies: OperationLatencies | None = None,
                 isolation: Isolation | None = None) -> None:
        self.root = Path(root).absolute()
        self.isolation = isolation or Isolation()
        _private_dir(self.root)
        self.latencies = latencies or OperationLatencies().scaled(0.0)
        self.accounts = Accounts(self.isolation.tenants, self.isolation.allow_same_user,
                                 self.isolation.unix_user_prefix)
        self.jobs_dir = (self.isolation.jobs_dir or default_jobs_dir(self.root.parent)).absolute()
        make_jobs_root(self.jobs_dir, self.root.parent)
        parent = self.isolation.cgroup_parent
        self.confinement = detect(parent) if parent and os.geteuid() == 0 else Confinement(
            notes=("not root: no cgroups can be made",) if parent else ("cgroups are off (cgroup_parent unset)",))
        self._oom = os.geteuid() == 0 and oom_score_adj(CONTROLLER_OOM_SCORE_ADJ)  # the loop and its runners
        self.host = host_limits(self.isolation.reserve_memory, self.isolation.reserve_pids)
        self._host_notes = limit_parent(self.confinement, self.host) if self.confinement.usable else []
        self.sandbox, self._sandbox_note = sandbox_tools(self.isolation)
        check_disks(self.isolation, self.jobs_dir, self.sandbox is not None)
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def notes(self) -> list[str]:
        host = (f"all jobs together: at most {self.host.memory_bytes / 2**30:.1f} GiB of memory and "
                f"{self.host.pids} processes (the host's less the controller's reserve)")
        if not self.confinement.usable or self._host_notes:
            host += f" — not enforced: {'; '.join(self._host_notes) or 'no cgroups'}"
        disk = (f"a job's working directory: at most {self.isolation.disk_bytes // 2**20} MiB"
                if self.isolation.disk_bytes else "a job's working directory: no disk limit")
        oom = (f"the OOM killer takes tasks (oom_score_adj {TASK_OOM_SCORE_ADJ}) before the controller "
               f"({CONTROLLER_OOM_SCORE_ADJ if self._oom else 'unchanged: no CAP_SYS_RESOURCE to lower it'})")
        return [*self.accounts.notes(), self.confinement.describe(), host, oom, self._sandbox_note,
                f"jobs' working directories under {self.jobs_dir}; {disk}"]

    def _sandbox_of(self, tenant: str) -> dict[str, Any] | None:
        """The sandbox a job of `tenant` gets (None: no namespaces: not root, or accepted without bwrap)."""
        if self.sandbox is None:
            return None
        network = self.isolation.tenants.get(tenant).network or NETWORK_LOOPBACK
        root = self.root.parent
        hide = [str(p) for p in (root, *self.isolation.hide_dirs)]
        return {**self.sandbox, "network": network, "hide": hide, "jobs_dir": str(self.jobs_dir),
                "hide_files": [str(p) for p in self.isolation.hide_files if p.exists()],
                "shared": [str(p) for p in self.isolation.shared_dirs], "tmp_bytes": self.isolation.tmp_bytes}

    def _dir(self, handle: str) -> Path:
        if not handle or "/" in handle or handle.startswith("."):
            raise ValueError(f"bad handle {handle!r}")
        return self.root / handle

    def workdir(self, handle: str) -> Path:
        """The job's working directory (its HOME), owned by its tenant's user."""
        return self.jobs_dir / self._dir(handle).name

    # --- slice machines --------------------------------------------------------------------
    def launch_machine(self, spec: SliceSpec, machine: SliceMachine) -> None:
        marker = self._dir(spec.slice_id) / "machines" / machine.name
        if marker.exists():
            return
        time.sleep(self.latencies.launch_machine)
        marker.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(marker, json.dumps({"host": machine.host, "devices": list(machine.devices)}))

    def destroy_machine(self, spec: SliceSpec, machine: SliceMachine) -> None:
        """The machine leaves; what runs of the slice's job goes with it."""
        marker = self._dir(spec.slice_id) / "machines" / machine.name
        self.cancel(spec.slice_id)
        if not marker.exists():
            return
        time.sleep(self.latencies.destroy_machine)
        marker.unlink(missing_ok=True)

    # --- tasks -----------------------------------------------------------------------------
    def prepare_task(self, spec: SliceSpec) -> str:
        """Stage the job: its working directory (made afresh, owned by its user) and its `spec.json`.
        TaskRefused when the job has no user it may run as."""
        d = self._dir(spec.slice_id)
        if (d / "spec.json").exists():
            return spec.slice_id
        if not spec.tenant:
            raise TaskRefused(f"job {spec.job_id}: no tenant, so no Unix user to run it as")
        account = self.accounts.of(spec.tenant)
        layout = _task_layout(spec)
        time.sleep(self.latencies.prepare_task)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        work = self.workdir(spec.slice_id)
        hostfile = work / "hostfile"
        make_workdir(work, account, {"hostfile": hostfile_text(spec)})
        base = job_environment(spec, account, work, hostfile)
        tasks: list[dict[str, Any]] = []
        for i, (machine, devices) in enumerate(layout):
            gpus = [str(k) for k, dev in enumerate(devices) if "/gpu" in dev]
            env = {**base, "CUDA_VISIBLE_DEVICES": ",".join(gpus), "DISAGG_DEVICES": ",".join(devices),
                   "DISAGG_TASK_INDEX": str(i), "DISAGG_MACHINE": machine.name, "DISAGG_HOST": machine.host}
            tasks.append({"machine": machine.name, "env": env, "cpus": machine.cpus,
                          "memory_bytes": min(int(machine.memory_gb * 2**30), self.host.memory_bytes)})
        job = {"handle": spec.slice_id, "command": list(spec.command), "tasks": tasks, "workdir": str(work),
               "account": {"user": account.user, "uid": account.uid, "gid": account.gid, "drop": account.drop},
               "confinement": self.confinement.to_json() if self.confinement.usable else None,
               "log_cap": self.isolation.log_cap, "pids_max": min(self.isolation.pids_max, self.host.pids),
               "sandbox": self._sandbox_of(spec.tenant), "disk_bytes": self._disk_limit(spec.tenant),
               "tenant": spec.tenant}
        write_atomic(d / RUNNER_SPEC, marshal.dumps(job))  # first: `spec.json` says the job is prepared
        write_atomic(d / "spec.json", json.dumps(job))
        return spec.slice_id

    def launch_task(self, handle: str) -> None:
        """Start the runner unless one already claimed the job (or a cancel did). Safe to repeat."""
        d = self._dir(handle)
        if not (d / "spec.json").exists():
            raise RuntimeError(f"job {handle} was never prepared")
        if (d / "started").exists():
            return
        time.sleep(self.latencies.launch_task)
        if (d / "started").exists():
            return
        write_atomic(d / "launched", json.dumps({"at": time.time()}))
        log = os.open(d / "runner.log", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        try:
            self._children[handle] = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", BOOT, _PACKAGE_ROOT, str(d)],
                start_new_session=True, cwd=d, env={"PATH": TASK_PATH, "LANG": "C.UTF-8"},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            )
        finally:
            os.close(log)

    def _reap(self, handle: str) -> None:
        child = self._children.get(handle)
        if child is not None and child.poll() is not None:
            del self._children[handle]

    def _runner(self, d: Path) -> int | None:
        """The pid of the live runner of a job directory, if any (pid reuse and zombies excluded)."""
        return _live_runner(_read_claim(d) or {})

    def status(self, handle: str) -> TaskStatus:
        d = self._dir(handle)
        self._reap(handle)
        if not (d / "spec.json").exists():
            return TaskStatus(RunState.LOST, detail="no such job on this engine")
        exit_status = _read_exit(d)
        if exit_status is not None:
            return exit_status
        # `started` is read once and judged as read: the runner creates it empty and writes its pid a
        # moment later, so a second read could show the pid that the first look did not check (a live
        # runner taken for a dead one, its slice torn down, its job killed and run again elsewhere)
        info = _read_claim(d)
        if info is not None:
            if "pid" in info:
                if _live_runner(info) is not None:
                    return TaskStatus(RunState.RUNNING)
                exit_status = _read_exit(d)  # it may have ended between the two looks
                if exit_status is not None:
                    return exit_status
                return TaskStatus(RunState.LOST, detail="the runner died without an exit status")
            if info.get(RunState.CANCELLED):
                return _read_exit(d) or TaskStatus(RunState.CANCELLED)
            return TaskStatus(RunState.RUNNING)  # the runner is writing its claim right now
        launched = d / "launched"
        if launched.exists() and time.time() - launched.stat().st_mtime > START_GRACE_S:
            return TaskStatus(RunState.LOST, detail="launched but never started")
        return TaskStatus(RunState.PENDING if launched.exists() else RunState.HELD)

    def cancel(self, handle: str) -> None:
        """Make sure no process of the job runs and none ever will start. Safe to repeat.

        SIGKILL to the runner's process group (the runner and its tasks at once, so the runner never
        records a code for a task it saw killed), then the tasks' cgroups (what left that group)."""
        d = self._dir(handle)
        if not d.exists():
            return
        if claim(d / "started", json.dumps({RunState.CANCELLED: True})):
            return  # no runner ever claimed it; none ever will
        pid = self._runner(d) or self._await_claim(d)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            child = self._children.pop(handle, None)
            if child is not None:
                child.wait(timeout=10)
            else:
                end = time.monotonic() + 10
                while self._runner(d) == pid and time.monotonic() < end:
                    time.sleep(0.01)
        self._kill_groups(d)
        if _read_exit(d) is None:
            write_atomic(d / "exit", json.dumps({"code": -9, RunState.CANCELLED: True, "at": time.time()}))

    def _disk_limit(self, tenant: str) -> int:
        """A new job's disk limit: `disk_bytes`, less what the tenant's other live jobs may already hold
        past its total (`tenant_disk_bytes`). TaskRefused when nothing is left of that total."""
        limit, total = self.isolation.disk_bytes, self.isolation.tenant_disk_bytes
        if not total:
            return limit
        held = 0
        for d in self.root.iterdir():
            if (d / "exit").exists():
                continue
            try:
                job = json.loads((d / "spec.json").read_text())
            except (OSError, ValueError):
                continue
            if job.get("tenant") == tenant:
                held += int(job.get("disk_bytes") or 0)
        left = total - held
        if left < 2**20:
            raise TaskRefused(f"tenant {tenant}'s running jobs hold its whole disk total "
                              f"({total // 2**20} MiB, tenant_disk_mb)")
        return min(limit, left) if limit else left

    def terminate(self, handle: str, sig: signal.Signals = signal.SIGTERM) -> bool:
        """SIGTERM (or `sig`) to the job's tasks (the runner's children; in a sandbox, the command under
        bwrap's two processes), not to the runner: it stays to record their exit code. False when no runner
        of the job lives."""
        pid = self._runner(self._dir(handle))
        if pid is None:
            return False
        for child in _commands(child_pids(pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, sig)
        return True

    def _kill_groups(self, d: Path) -> None:
        """Kill and remove the cgroup of every task of the job (the confinement its runner used)."""
        try:
            job = json.loads((d / "spec.json").read_text())
        except (OSError, ValueError):
            return
        confinement = Confinement.from_json(job.get("confinement"))
        if not confinement.usable:
            return
        for i in range(len(job.get("tasks", ()))):
            confinement.group(f"{job['handle']}.{i}").remove()
        confinement.group(f"{job['handle']}.runner").remove()  # the runner's (it has ended, or was killed)

    def _await_claim(self, d: Path, timeout: float = 5.0) -> int | None:
        """A runner creates `started` and then writes its pid into it: a cancel that lands between the
        two would find no pid and let the job run on. Wait for the pid (or for the runner's end)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            info = _read_claim(d) or {}
            if "pid" in info or info.get(RunState.CANCELLED) or _read_exit(d) is not None:
                return _live_runner(info)
            time.sleep(0.01)
        return self._runner(d)

    def logs(self, handle: str) -> str:
        """What the job's tasks wrote (at most the log cap per task)."""
        try:
            return (self._dir(handle) / "output").read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_page(self, handle: str, offset: int, limit: int) -> LogPage:
        """At most `limit` bytes of the output from byte `offset`, read from the file (not whole)."""
        path = self._dir(handle) / "output"
        try:
            with open(path, "rb") as f:
                return file_page(f, offset, limit)
        except FileNotFoundError:
            return LogPage("", 0, 0, 0)

    def handles(self) -> list[str]:
        """Every job directory the engine knows."""
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def recorded_handles(self) -> list[str]:
        return self.handles()

    def orphans(self, live: Collection[str]) -> list[str]:
        keep = set(live)
        return [h for h in self.handles() if h not in keep and not self.status(h).state.ended]

    def forget(self, handle: str) -> None:
        """Remove an ended job's directories (its files and its working directory). Safe to repeat."""
        d = self._dir(handle)
        if d.exists() and not self.status(handle).state.ended:
            self.cancel(handle)
        shutil.rmtree(self.workdir(handle), ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)

    def close(self) -> None:
        for handle in list(self._children):
            self._reap(handle)


def sandbox_tools(isolation: Isolation) -> tuple[dict[str, str] | None, str]:
    """The tools a job's sandbox needs (bwrap, setpriv, nsenter), and one line for the controller's start.

    Not root: no sandbox (jobs run as the controller's own user anyway). Root without bwrap: ValueError,
    unless `allow_no_sandbox` accepts jobs without namespaces (they then see each other's processes, share
    loopback, /tmp, /dev/shm and IPC, and reach the API on 127.0.0.1)."""
    if os.geteuid() != 0 or not isolation.sandbox:
        why = "not root" if os.geteuid() != 0 else "sandbox: false"
        return None, f"no namespaces for jobs ({why}): a job sees the host's processes, network, /tmp and IPC"
    tools = {name: shutil.which(name, path=TASK_PATH) for name in ("bwrap", "setpriv", "nsenter")}
    missing = sorted(name for name, path in tools.items() if path is None)
    if missing:
        lost = ("jobs would see every process's command line, share loopback (and reach the API on "
                "127.0.0.1), /tmp, /dev/shm and IPC")
        if not isolation.allow_no_sandbox:
            raise ValueError(f"sandbox: {', '.join(missing)} not found (install Debian's bubblewrap and "
                             f"util-linux): without namespaces {lost}; allow_no_sandbox: true starts anyway")
        return None, f"NO NAMESPACES for jobs ({', '.join(missing)} missing, allow_no_sandbox): {lost}"
    network = sorted(t.name for t in isolation.tenants.by_name.values() if t.network == NETWORK_HOST)
    host = f"; the host's network for {', '.join(network)}" if network else ""
    return ({k: str(v) for k, v in tools.items()},
            f"each job in its own namespaces (bubblewrap: pid, ipc, uts, mount, network with loopback only{host}); "
            f"private /tmp and /dev/shm of {isolation.tmp_bytes // 2**20} MiB each")


def check_disks(isolation: Isolation, jobs_dir: Path, sandboxed: bool) -> None:
    """Refuse (ValueError) jobs' working directories on the store's filesystem: a job filling its disk
    would stop the store (every write, even a cancel, failing) — unless `allow_jobs_on_store_disk`."""
    store = isolation.store_dir
    if os.geteuid() != 0 or store is None or isolation.allow_jobs_on_store_disk:
        return
    probe = store if store.exists() else store.parent
    if not probe.exists() or probe.stat().st_dev != jobs_dir.stat().st_dev:
        return
    raise ValueError(f"jobs_dir: {jobs_dir} is on the same filesystem as the store ({store}): jobs writing "
                     f"{'up to job_disk_mb each' if isolation.disk_bytes else 'without a disk limit'} could fill it "
                     "and stop the store (submissions and cancels failing); put jobs_dir on another filesystem, "
                     "or accept the risk with allow_jobs_on_store_disk: true")


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc: its `children` list, else every process's stat)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    out = []
    for proc in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = proc.read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(proc.parent.name))
    return out

def _commands(pids: list[int]) -> list[int]:
    """The tasks' own commands among the runner's children: below a sandbox's bwrap (its monitor, then
    the namespace's first process), the process bwrap started."""
    out = []
    for pid in pids:
        below = pid
        for _ in range(2):
            try:
                if Path(f"/proc/{below}/comm").read_text().strip() != "bwrap":
                    break
            except OSError:
                break
            kids = child_pids(below)
            if not kids:
                break
            below = kids[0]
        out.append(below)
    return out


def _private_dir(path: Path) -> None:
    """Make `path` (and its parents) and keep it the controller's alone (0700)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)


def make_jobs_root(path: Path, state_dir: Path) -> None:
    """Make the root of the jobs' working directories: the controller's, 0711 (every tenant's user can pass
    to its own directory, none can list the others); as root, every directory above it must let them pass.
    ValueError naming the directory otherwise."""
    try:
        _jobs_root(path, state_dir)
    except OSError as exc:  # a file where a directory should be, a read-only filesystem: a traceback before
        raise ValueError(f"jobs_dir: cannot make {path} the jobs' directory: {exc.strerror or exc}") from None


def _jobs_root(path: Path, state_dir: Path) -> None:
    if os.geteuid() != 0:
        _private_dir(path)
        return
    for parent in reversed(path.parents):
        if not parent.exists():
            parent.mkdir()
            parent.chmod(0o755)  # whatever the umask: every tenant's user passes it
        info = parent.lstat()
        if not stat.S_ISDIR(info.st_mode) or not info.st_mode & stat.S_IXOTH:
            raise ValueError(f"jobs_dir: {path}: the tenants' users cannot pass {parent} (mode "
                             f"{stat.filemode(info.st_mode)}); choose a jobs_dir they can reach, "
                             f"e.g. {SYSTEM_JOBS_ROOT}")
    path.mkdir(exist_ok=True, mode=0o711)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
        raise ValueError(f"jobs_dir: {path} is not a directory owned by root")
    path.chmod(0o711)
    mark = path / "state-dir"
    if not mark.exists():
        write_atomic(mark, f"{state_dir}\n", mode=0o644)


def job_environment(spec: SliceSpec, account: Account, work: Path, hostfile: Path) -> dict[str, str]:
    """The variables every task of a job gets, whatever the engine (module docstring; docs/security.md):
    nothing of the controller's environment. Each engine adds the per-task ones: `CUDA_VISIBLE_DEVICES`,
    `DISAGG_DEVICES`, `DISAGG_TASK_INDEX`, `DISAGG_MACHINE` (the slice machine), `DISAGG_HOST` (its machine)."""
    return {"PATH": TASK_PATH, "HOME": str(work), "USER": account.user, "LANG": "C.UTF-8",
            "DISAGG_JOB": spec.job_id, "DISAGG_SLICE": spec.slice_id, "DISAGG_TASK_COUNT": str(spec.tasks),
            "DISAGG_HOSTFILE": str(hostfile), "DISAGG_WORKDIR": str(work),
            **{k: v for k, v in spec.env.items() if k.startswith("DISAGG_")}}


def hostfile_text(spec: SliceSpec) -> str:
    """The job's hostfile: one line per slice machine with its slots (OpenMPI style)."""
    return "".join(f"{m.name} slots=1\n" for m in spec.machines)


def write_readonly(path: Path, text: str) -> None:
    """A new file (never through a link, never over one) that anyone may read and no one write: what a
    job's user reads of what the controller wrote, whatever the controller's umask (077)."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o444)
    os.fchmod(fd, 0o444)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def make_workdir(work: Path, account: Account, files: dict[str, str]) -> None:
    """The job's working directory, made afresh (nothing a task of an earlier try left in it is kept),
    with `files` in it, written before it is handed to the job's user."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o700)
    for name, text in files.items():
        write_readonly(work / name, text)
    if account.drop:
        os.chown(work, account.uid, account.gid)


def _read_claim(d: Path) -> dict[str, object] | None:
    """What `started` says: None when there is no such file, {} while its writer has not written it whole."""
    try:
        text = (d / "started").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        info = json.loads(text)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def _live_runner(info: dict[str, object]) -> int | None:
    """The runner's pid from its claim, if that process still lives (pid reuse and zombies excluded)."""
    pid = info.get("pid")
    if not isinstance(pid, int):
        return None
    alive = start_ticks(pid)
    return pid if alive is not None and alive == info.get("start") else None


def _read_exit(d: Path) -> TaskStatus | None:
    try:
        info = json.loads((d / "exit").read_text())
    except (OSError, ValueError):
        return None
    if info.get(RunState.CANCELLED):
        return TaskStatus(RunState.CANCELLED, exit_code=info.get("code"))
    code = int(info["code"])
    detail = "killed: its working directory passed its disk limit (job_disk_mb)" if info.get("disk") else ""
    return TaskStatus(RunState.COMPLETED if code == 0 else RunState.FAILED, exit_code=code, detail=detail)


def _task_layout(spec: SliceSpec) -> list[tuple[SliceMachine, tuple[str, ...]]]:
    """Task i runs on slice machine i (a slice machine is one task's vNode) with its devices."""
    if len(spec.machines) != spec.tasks:
        raise ValueError(
            f"slice {spec.slice_id}: {spec.tasks} tasks need {spec.tasks} slice machines, "
            f"got {len(spec.machines)}"
        )
    return [(m, m.devices) for m in spec.machines]


__all__ = ["TASK_PATH", "Isolation", "LocalEngine", "default_jobs_dir", "hostfile_text",
           "job_environment", "make_jobs_root", "make_workdir", "write_readonly"]

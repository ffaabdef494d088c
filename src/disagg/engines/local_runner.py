"""The runner of one prepared job for the local engine (its supervisor), and the file primitives it shares.

The runner is what Slurm's slurmstepd is to a step: a process of the controller's own user that
starts the job's tasks as the tenant's user and records what happened, in files of the job's
directory in the controller's state directory (0700), which no task can open:
  - `started` — the runner's claim: its pid and start time, created exclusively, so a second runner
    for the same directory (a launch repeated after a crash) or a cancel that came first makes it
    exit at once: a job never runs twice;
  - `output` — what the tasks wrote (stdout and stderr, in arrival order; each line prefixed with
    `[task i] ` when the job has more than one task), at most `log_cap` bytes per task: past the cap
    the runner says so in the log and discards the rest;
  - `exit` — the job's exit code (the first non-zero code of its tasks; 128+N for a signal N),
    written once every task has ended.

Each task is a child process that, before it executes the command, joins its cgroup (`cgroups`),
forbids itself new privileges (no setuid binary can raise it), drops every supplementary group and
becomes the tenant's uid/gid, moves into the job's working directory and takes the minimal
environment prepare-task wrote for it. When a task's command exits, the rest of its group is
killed (a daemon it started does not outlive it). Tasks stay in the runner's process group, so a
SIGKILL to that group stops the runner and its tasks at once (the engine's cancel), and the cgroup
kill catches whatever left it.

The runner runs in its own session, apart from the controller, so a controller killed with SIGKILL
leaves it running and a restarted controller finds it by the pid it wrote. It starts once per job
with `python -I -S` and imports only built-in modules, `select` and `cgroups`: about 13 ms of CPU for a
one-task job, of which 6 ms are the interpreter's own start and 2.5 ms the task's `ctypes` (for
prctl); with json, dataclasses, pathlib and selectors it was 35 ms.
"""

from __future__ import annotations

# Only modules the interpreter has loaded already, or built-in ones, at the top: the runner starts once
# per job, on the controller's cores, and pays each import again at each start. Hence no json (it
# imports re: 6 ms of CPU), dataclasses, pathlib, typing, selectors, threading or contextlib here (nor
# in `cgroups`); the job comes in marshal's format (`RUNNER_SPEC`) and the records go out as JSON
# written by `flat_json`.
import _thread
import marshal
import os
import select
import sys
import time

from disagg.engines.cgroups import Confinement, Limits

#: `typing.TYPE_CHECKING` without importing typing (mypy reads a constant of this name the same way).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from disagg.engines.cgroups import TaskGroup

    StrPath = str | os.PathLike[str]

#: prctl(2) option: the process and its children can never gain privileges (setuid bits are ignored).
PR_SET_NO_NEW_PRIVS = 38
#: How long the runner waits for a task's pipes to close after its command exited (without a cgroup,
#: a child that left its process group may hold them open).
DRAIN_S = 2.0
#: The exit code of a task the runner could not start (the command or its confinement failed).
CANNOT_START = 125
#: The job as the runner reads it: what `spec.json` holds, in marshal's format (the controller writes
#: both, this one first; `spec.json` is the one it and people read).
RUNNER_SPEC = "spec.marshal"
#: The OOM killer's bias for a task: taken before anything else of the host's.
TASK_OOM_SCORE_ADJ = 500
#: The controller's processes' (and their runners'): taken last, after every task.
CONTROLLER_OOM_SCORE_ADJ = -900
#: The runner's own group (`Runner.confine_self`): memory, and processes (itself, a holder, a forked task
#: before it joins its own group).
RUNNER_MEMORY = 256 * 2**20
#: The least cpu a runner's group gets: at a 0.001-cpu job's own share its start took a second
#: (the interpreter's 13 ms of CPU at 1 ms per 100 ms period).
RUNNER_MIN_CPUS = 0.1
RUNNER_PIDS = 64
#: How often the runner measures the job's working directory against its disk limit, seconds.
DISK_CHECK_S = 1.0
#: Entries of a working directory the runner counts at most (each costs it a stat at each check).
DISK_MAX_ENTRIES = 100_000


def start_ticks(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, from /proc), or None if it is gone or a zombie.

    With the pid it tells a process apart from a later one that reuses the pid.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # state: zombie or dead
        return None
    return fields[19]  # field 22 of stat: starttime


def claim(path: StrPath, content: str) -> bool:
    """Create `path` with `content` only if it does not exist (atomic across processes).

    No fsync: these files must survive the controller's crash, which the page cache does; a power
    cut is out of scope here, as it is for the store's SQLite in WAL mode with synchronous=NORMAL.
    """
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(content)
    return True


def write_atomic(path: StrPath, content: str | bytes, mode: int = 0o600) -> None:
    """Replace `path` whole (write a temporary file, rename it): a reader sees the old or the new, and of
    two writers at once (two cancels of one job) the last one's."""
    tmp = f"{os.fspath(path)}.{os.getpid()}.{_thread.get_ident()}.tmp"  # beside it: the rename stays atomic
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, mode)
    os.fchmod(fd, mode)  # `mode` whatever the umask (`serve` runs under 077: a 0644 record came out 0600)
    with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as f:
        f.write(content)
    os.replace(tmp, path)


def flat_json(fields: dict[str, int | float | str | None]) -> str:
    """`json.dumps(fields)` for the runner's records (numbers, None, strings of ASCII digits), without
    importing json; ValueError for a string it would have to escape."""
    parts = []
    for name, value in fields.items():
        if value is None:
            text = "null"
        elif isinstance(value, str):
            if not (value.isascii() and value.isdigit()):
                raise ValueError(f"flat_json: {name}={value!r}: only strings of digits are written")
            text = f'"{value}"'
        else:
            text = repr(value)  # an int, or a finite float (time.time()): JSON's number as json writes it
        parts.append(f'"{name}": {text}')
    return "{" + ", ".join(parts) + "}"


def read_spec(d: str) -> dict[str, Any]:
    """The job prepared in directory `d`: `RUNNER_SPEC`, or `spec.json` for a job that a controller
    from before that file prepared (json is imported only then)."""
    try:
        with open(os.path.join(d, RUNNER_SPEC), "rb") as f:
            spec: dict[str, Any] = marshal.load(f)
            return spec
    except FileNotFoundError:
        import json

        with open(os.path.join(d, "spec.json")) as f:
            spec = json.load(f)
            return spec


def cap_note(task: int, cap: int) -> bytes:
    """What the log says where a task's output reached the cap."""
    return f"\n[disagg: task {task} wrote more than {cap} bytes; the rest of its output is discarded]\n".encode()


class JobLog:
    """The job's `output`: every task's stdout and stderr in arrival order, capped per task."""

    def __init__(self, path: StrPath, tasks: int, cap: int) -> None:
        self.fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        self.cap = cap
        self.label = tasks > 1
        self.written = [0] * tasks
        self.partial: dict[tuple[int, int], bytes] = {}

    def write(self, task: int, stream: int, data: bytes) -> None:
        """Add what task `task` wrote on `stream` (1, 2); with several tasks, whole lines, labelled."""
        if self.label:
            data = self.partial.pop((task, stream), b"") + data
            cut = data.rfind(b"\n") + 1
            if len(data) - cut > 65536:  # a very long line is written in pieces
                cut = len(data)
            if cut < len(data):
                self.partial[(task, stream)] = data[cut:]
            data = b"".join(b"[task %d] " % task + line for line in data[:cut].splitlines(keepends=True))
        self._put(task, data)

    def flush(self, task: int, stream: int) -> None:
        """The stream ended: what is left of its last line goes out, ended."""
        rest = self.partial.pop((task, stream), b"")
        if rest:
            self._put(task, b"[task %d] " % task + rest + b"\n")

    def note(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def _put(self, task: int, data: bytes) -> None:
        """Write what fits under the task's cap; the first byte past it writes the note (once) instead."""
        room = self.cap - self.written[task]
        if not data or room < 0:
            return
        if len(data) > room:
            data = data[:room] + cap_note(task, self.cap)
            self.written[task] = self.cap + 1  # capped: nothing more is written for this task
        else:
            self.written[task] += len(data)
        os.write(self.fd, data)


class Task:
    """One running task: its process, the pipes it writes to (read end → stream: 1 stdout, 2 stderr), its
    group; its exit code and when it ended, once it has. `exit_fd`: a pidfd of its process, readable
    once it has exited (None: not asked for yet, or the kernel has no pidfd)."""

    __slots__ = ("index", "pid", "group", "pipes", "code", "ended_at", "exit_fd")  # noqa: RUF023 - as __init__

    def __init__(self, index: int, pid: int, group: TaskGroup | None, pipes: dict[int, int] | None = None,
                 code: int | None = None, ended_at: float = 0.0) -> None:
        self.index = index
        self.pid = pid
        self.group = group
        self.pipes = pipes if pipes is not None else {}
        self.code = code
        self.ended_at = ended_at
        self.exit_fd: int | None = None


def _exec_task(spec: dict[str, Any], task: dict[str, Any], group: TaskGroup | None, out: int, err: int,
               netns_pid: int | None = None) -> None:
    """In the forked child: confine, drop privileges, execute the command (in its sandbox, where the job
    has one: `sandbox`). Never returns."""
    try:
        if group is not None:
            group.join()
        oom_score_adj(TASK_OOM_SCORE_ADJ)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.closerange(3, 65536)
        _no_new_privileges()
        if spec.get("sandbox"):
            from disagg.engines.sandbox import task_argv

            os.umask(0o077)
            argv = task_argv(spec["sandbox"], spec["account"], spec["workdir"], list(spec["command"]), netns_pid)
            os.execve(argv[0], argv, task["env"])
        # os.execvpe imports warnings: import it while the standard library can be read (the tenant's
        # user may not reach the interpreter's directory, e.g. under /root)
        import warnings  # noqa: F401

        account = spec["account"]
        if account.get("drop"):
            os.setgroups([])
            os.setresgid(account["gid"], account["gid"], account["gid"])
            os.setresuid(account["uid"], account["uid"], account["uid"])
        os.umask(0o077)
        os.chdir(spec["workdir"])
        command = list(spec["command"])
        os.execvpe(command[0], command, task["env"])
    except BaseException as exc:
        try:  # noqa: SIM105 - contextlib is one import more at each runner's start
            os.write(2, f"disagg: cannot start task {task.get('index', '?')}: {exc}\n".encode())
        except OSError:
            pass
        os._exit(CANNOT_START)


def oom_score_adj(value: int) -> bool:
    """Set the OOM killer's bias of this process (and of what it starts): -1000 never … 1000 first.
    Whether it took (a negative value needs CAP_SYS_RESOURCE, which a container may not give root)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        return False
    return True


def _pidfd(pid: int) -> int | None:
    """A pidfd of child `pid` (readable once it has exited), or None where the kernel has none (< 5.3)."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _no_new_privileges() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


class Runner:
    """Runs one job's tasks (module docstring) and records its end."""

    def __init__(self, directory: str, spec: dict[str, Any]) -> None:
        self.d = directory
        self.spec = spec
        self.confinement = Confinement.from_json(spec.get("confinement")) if spec.get("confinement") else None
        self.log = JobLog(os.path.join(directory, "output"), len(spec["tasks"]), int(spec["log_cap"]))
        self.poll = select.poll()
        self.watching: dict[int, Task] = {}  # every pipe still open, and every exit not yet seen → its task
        self.netns_pid: int | None = None  # the job's network holder's sandboxed child (several tasks)
        self.holder = 0  # the holder's bwrap (ours to end)
        self.disk_limit = int(spec.get("disk_bytes") or 0)
        self.disk_checked = time.monotonic()
        self.disk_note = ""  # why the runner killed the job, once it has
        self.tasks: list[Task] = []  # what `run` started (`clean_up` removes their groups)

    def group(self, i: int) -> TaskGroup | None:
        if self.confinement is None or not self.confinement.usable:
            return None
        return self.confinement.group(f"{self.spec['handle']}.{i}")

    def start(self, i: int, task: dict[str, Any]) -> Task:
        """Start task `i` in its group; a task whose group cannot be made does not start (code 125)."""
        group = self.group(i)
        if group is not None:
            try:
                group.create(Limits(float(task["cpus"]), int(task["memory_bytes"]), int(self.spec["pids_max"])))
            except OSError as exc:
                self.log.note(f"[disagg: task {i} not started: cannot confine it: {exc}]\n")
                return Task(i, 0, group, code=CANNOT_START, ended_at=time.monotonic())
        r_out, w_out = os.pipe()
        r_err, w_err = os.pipe()
        pid = os.fork()
        if pid == 0:
            _exec_task(self.spec, {**task, "index": i}, group, w_out, w_err, self.netns_pid)
        os.close(w_out)
        os.close(w_err)
        t = Task(i, pid, group, {r_out: 1, r_err: 2})
        for fd in t.pipes:
            self._watch(fd, t)
        t.exit_fd = _pidfd(pid)
        if t.exit_fd is not None:
            self._watch(t.exit_fd, t)
        return t

    def _watch(self, fd: int, t: Task) -> None:
        self.poll.register(fd, select.POLLIN)
        self.watching[fd] = t

    def confine_self(self) -> None:
        """Move the runner into a group of its job's (`<slice>.runner`): its cpu at most the job's request
        (at least RUNNER_MIN_CPUS: a task that spews output makes its runner work within that bound, not on
        the host's whole), memory RUNNER_MEMORY, few processes. Without cgroups it stays where it is."""
        if self.confinement is None or not self.confinement.usable:
            return
        cpus = max(RUNNER_MIN_CPUS, sum(float(t["cpus"]) for t in self.spec["tasks"]))
        group = self.confinement.group(f"{self.spec['handle']}.runner")
        try:
            group.create(Limits(cpus, RUNNER_MEMORY, RUNNER_PIDS + len(self.spec["tasks"])))
            group.join()
        except OSError as exc:
            self.log.note(f"[disagg: the runner stays outside the job's groups: {exc}]\n")

    def start_holder(self) -> None:
        """A job of several tasks in a network of its own: start the holder of that namespace, which
        each task enters (`sandbox`). Without it (it failed), each task gets a namespace of its own."""
        from disagg.engines.sandbox import child_pid, holder_argv

        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                os.set_inheritable(w, True)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1):
                    os.dup2(null, fd)
                argv = holder_argv(self.spec["sandbox"], w)
                os.execv(argv[0], argv)
            finally:
                os._exit(CANNOT_START)
        os.close(w)
        info = b""
        while b"}" not in info:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            info += chunk
        os.close(r)
        try:
            self.netns_pid, self.holder = child_pid(info), pid
        except ValueError:
            self.log.note("[disagg: the job's network holder did not start: each task gets a network of its own]\n")

    def run(self) -> int:
        """Start every task, copy their output until they end, clean up their groups; the job's code."""
        sandbox = self.spec.get("sandbox")
        if sandbox and sandbox["network"] != "host" and len(self.spec["tasks"]) > 1:
            self.start_holder()
        tasks = [self.start(i, t) for i, t in enumerate(self.spec["tasks"])]
        while any(t.code is None or t.pipes for t in tasks):
            # Wakes at output, at a pipe's end (read as b""), at a task's exit (its pidfd: without one, a
            # task whose pipes closed just before it became a zombie would wait out the timeout), or
            # after 200 ms, to stop waiting for the pipes of a task that ended DRAIN_S ago.
            for fd, _ in self.poll.poll(200):
                t = self.watching[fd]
                if fd == t.exit_fd:
                    self._forget(fd)  # reaped just below
                    t.exit_fd = None
                else:
                    self._read(t, fd)
            for t in tasks:
                self._reap(t)
            self._check_disk(tasks)
        self.tasks = tasks
        codes = [t.code or 0 for t in tasks]
        return next((c for c in codes if c != 0), 0)

    def clean_up(self) -> None:
        """After the exit record: remove the tasks' (empty) groups and the namespace holder. Apart from
        `run`: removing the groups can take seconds on a loaded host, and a fault's stop arriving then
        found a job whose every task had ended without an exit record, and ran it again (a chaos soak)."""
        for t in self.tasks:
            if t.group is not None:
                t.group.remove()
        if self.holder:
            os.kill(self.holder, 9)
            os.waitpid(self.holder, 0)

    def _check_disk(self, tasks: list[Task]) -> None:
        """Every DISK_CHECK_S: a job whose working directory holds more than its disk limit is killed, its
        files removed (they would hold the disk until the job's retention ends), and the log says why."""
        if not self.disk_limit or self.disk_note or time.monotonic() - self.disk_checked < DISK_CHECK_S:
            return
        self.disk_checked = time.monotonic()
        used, entries = disk_usage(self.spec["workdir"], DISK_MAX_ENTRIES)
        if used <= self.disk_limit and entries < DISK_MAX_ENTRIES:
            return
        what = f"more than {DISK_MAX_ENTRIES} files" if entries >= DISK_MAX_ENTRIES else f"{used // 2**20} MiB"
        self.disk_note = (f"[disagg: the job's working directory holds {what}, past its disk limit of "
                          f"{self.disk_limit // 2**20} MiB (job_disk_mb): the job is killed and its files removed]\n")
        for t in tasks:
            if t.group is not None:
                t.group.kill()
            elif t.code is None:
                try:  # noqa: SIM105 - contextlib is one import more at each runner's start
                    os.kill(t.pid, 9)
                except OSError:
                    pass
        empty_dir(self.spec["workdir"])
        self.log.note(self.disk_note)

    def _read(self, t: Task, fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if data:
            self.log.write(t.index, t.pipes[fd], data)
            return
        self.log.flush(t.index, t.pipes.pop(fd))
        self._forget(fd)

    def _forget(self, fd: int) -> None:
        """Stop watching `fd` (a pipe or a pidfd) and close it."""
        self.poll.unregister(fd)
        del self.watching[fd]
        os.close(fd)

    def _reap(self, t: Task) -> None:
        """Note a task's exit; kill what it left running; stop waiting for its pipes after DRAIN_S."""
        if t.code is None:
            done, status = os.waitpid(t.pid, os.WNOHANG)
            if not done:
                return
            code = os.waitstatus_to_exitcode(status)
            t.code = 128 - code if code < 0 else code
            t.ended_at = time.monotonic()
            if t.exit_fd is not None:
                self._forget(t.exit_fd)
                t.exit_fd = None
            if t.group is not None:
                t.group.kill()  # what the task started dies with it (and its pipes close)
        if t.pipes and time.monotonic() - t.ended_at > DRAIN_S:
            for fd, stream in list(t.pipes.items()):
                self.log.flush(t.index, stream)
                self._forget(fd)
            t.pipes.clear()


def disk_usage(top: str, most: int) -> tuple[int, int]:
    """(bytes allocated, entries) under directory `top`, counting at most `most` entries (links not
    followed; a file's allocated blocks, so that `fallocate` and sparse files count as they take disk)."""
    used, entries, todo = 0, 0, [top]
    while todo and entries < most:
        try:
            scan = os.scandir(todo.pop())
        except OSError:
            continue
        with scan:
            for entry in scan:
                entries += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                used += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
    return used, entries


def empty_dir(top: str) -> None:
    """Remove everything under `top` (not `top`): what a job wrote past its disk limit."""
    import shutil

    for name in os.listdir(top):
        path = os.path.join(top, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:  # noqa: SIM105 - contextlib is one import more at each runner's start
                os.unlink(path)
            except OSError:
                pass


def main(argv: list[str]) -> int:
    """`python -I -S -c <boot> DIR`: run the job prepared in DIR unless another runner or a cancel claimed it."""
    d = argv[0]
    os.chdir(d)
    ticks = start_ticks(os.getpid())
    if not claim(os.path.join(d, "started"), flat_json({"pid": os.getpid(), "start": ticks})):
        return 0
    runner = Runner(d, read_spec(d))
    runner.confine_self()
    code = runner.run()
    record: dict[str, int | float | str | None] = {"code": code, "at": time.time()}
    if runner.disk_note:
        record["disk"] = 1
    write_atomic(os.path.join(d, "exit"), flat_json(record))
    runner.clean_up()
    return 0


#: The code a launch runs (`python -I -S -c BOOT <src> <dir>`): only this package's directory on the path.
BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from disagg.engines.local_runner import main; " \
       "sys.exit(main(sys.argv[2:]))"

if __name__ == "__main__":  # pragma: no cover - started through BOOT
    sys.exit(main(sys.argv[1:]))

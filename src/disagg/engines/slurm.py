"""The Slurm engine: a slice machine is a Slurm node with exactly its composed GPUs; a job is a held
batch job.

Slice operations on Slurm (FlowOS-RM's Table 1, with Slurm in Mesos's place):

- launch-machine: the slice machine joins Slurm as a dynamic node whose GRES `gpu:N` are device
  files standing for the slice's attached devices (`slurm_node.DynamicNodes`);
- prepare-task: `sbatch --hold` pinned to the slice's nodes (`--nodelist`, `--nodes`, `--ntasks`,
  `--gres=gpu:N`), as the tenant's Unix user (`--uid`/`--gid`, resolved by `accounts` as the local
  engine does), with `--export=NONE` and an `sbatch` that itself gets no variable of the controller;
  the handle is the slice key (the slice id made file-safe), like the local engine's;
- launch-task: `scontrol release`;
- status: `squeue --json` (no accounting database is needed): job state and exit code, which the
  engine writes down when it first sees the job end (Slurm forgets finished jobs after `MinJobAge`);
- terminate (preemption): `scancel --signal=TERM` reaches the job's tasks (its `srun` step), not the
  batch script, which waits for them; cancel at the end of the grace SIGKILLs the job's processes on
  its slice machines (the tenant's uid in their namespaces) at once;
- destroy-machine: the node's processes are stopped, the node is deleted from Slurm, its
  device files go away — the GPUs are back in the pool.

Two directories per job, each of its own owner (as the local engine's):
  - `<site.jobs_dir>/<key>/`, the controller's (0700): `slurm_job_id`, `nodes`, `job.sh` (what was
    submitted), `exit` (written by the engine from Slurm's record, never by the job), `cancelled`;
  - `<work_root>/<key>/`, root's (0711) on a filesystem every node sees: `task.sh` (0444), `output.log`
    (the job's stdout and stderr: made beforehand and owned by the tenant's user, who cannot replace it
    in a directory that is not theirs) and `work/` (0700, the tenant's: cwd, HOME, `hostfile`).

Every task gets the local engine's variables (`local.job_environment`, plus `CUDA_VISIBLE_DEVICES`,
`DISAGG_DEVICES` — the disagg device ids behind it, in the same order — `DISAGG_TASK_INDEX`,
`DISAGG_MACHINE`, `DISAGG_HOST`) and Slurm's own (`SLURM_*`, `SLURMD_NODENAME`, `TMPDIR`), nothing else.
Jobs that users submit directly are reported by `foreign_holdings` so the controller keeps their
nodes' CPUs and GPUs away from the policy.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import shutil
import signal
import stat
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from disagg.engines.accounts import Account, Accounts
from disagg.engines.base import (
    Engine,
    ForeignHolding,
    LogPage,
    SliceMachine,
    SliceSpec,
    TaskRefused,
    TaskState,
    TaskStatus,
    file_page,
)
from disagg.engines.local import (
    TASK_PATH,
    Isolation,
    default_jobs_dir,
    hostfile_text,
    job_environment,
    make_jobs_root,
    make_workdir,
    write_readonly,
)
from disagg.engines.local_runner import write_atomic
from disagg.engines.slurm_node import DynamicNodes, NodeSpec
from disagg.engines.slurm_site import SlurmError, SlurmSite
from disagg.model.states import RunState

JOB_PREFIX = "disagg-"
COMMENT_PREFIX = "disagg job="

#: Slurm job states → engine task states (a held PENDING job is told apart by its reason).
_STATES: dict[str, TaskState] = {
    "PENDING": RunState.PENDING, "CONFIGURING": RunState.PENDING, "REQUEUED": RunState.PENDING,
    "REQUEUE_HOLD": RunState.PENDING,
    "RUNNING": RunState.RUNNING, "COMPLETING": RunState.RUNNING, "SUSPENDED": RunState.RUNNING,
    "STAGE_OUT": RunState.RUNNING,
    "COMPLETED": RunState.COMPLETED,
    "FAILED": RunState.FAILED, "TIMEOUT": RunState.FAILED, "OUT_OF_MEMORY": RunState.FAILED,
    "DEADLINE": RunState.FAILED, "PREEMPTED": RunState.FAILED, "SPECIAL_EXIT": RunState.FAILED,
    "CANCELLED": RunState.CANCELLED,
    "NODE_FAIL": RunState.LOST, "BOOT_FAIL": RunState.LOST, "REVOKED": RunState.LOST,
}
_HELD_REASONS = ("JobHeldUser", "JobHeldAdmin")
_HOLDING_STATES = ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STAGE_OUT")


def slice_key(slice_id: str) -> str:
    """A file- and Slurm-name-safe form of a slice id (the job is named `disagg-<key>`)."""
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", slice_id)
    if not key or len(key) > 100:
        raise ValueError(f"slice id {slice_id!r} cannot name a Slurm job (1–100 characters)")
    return key


def device_kind(device: str) -> str:
    """`pool0/gpu3` → `gpu` (device ids are `<location>/<kind><index>`)."""
    return device.rsplit("/", 1)[-1].rstrip("0123456789")


def is_disagg_job(job: Mapping[str, Any]) -> bool:
    """disagg's jobs carry both its name prefix and its comment; a user's `disagg-foo` job is foreign."""
    return (str(job.get("name", "")).startswith(JOB_PREFIX)
            and str(job.get("comment", "")).startswith(COMMENT_PREFIX))


def parse_gres_indices(detail: str) -> list[int]:
    """`gpu:3(IDX:0,2-3)` → [0, 2, 3]; `gpu:0` or no IDX → []."""
    m = re.search(r"IDX:([0-9,\-]+)", detail)
    if not m:
        return []
    out: list[int] = []
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


@dataclass(frozen=True)
class SlurmJob:
    """A disagg job as Slurm and disagg's files know it (for reconciliation)."""

    handle: str
    slice_key: str
    state: TaskState


class SlurmEngine(Engine):
    """Runs slices as Slurm nodes and jobs as held Slurm batch jobs. See the module docstring."""

    name = "slurm"

    def __init__(self, site: SlurmSite, nodes: DynamicNodes | None = None, squeue_ttl_s: float = 0.1,
                 isolation: Isolation | None = None) -> None:
        """`isolation`: the controller's tenants (their users), `allow_same_user` and `jobs_dir` (where
        the working directories go; else the site's `workdirs`, else `local.default_jobs_dir` of the
        site's root). ValueError naming `jobs_dir` when the tenants' users could not reach it."""
        self.site = site
        self.nodes = nodes or DynamicNodes(site)
        self.squeue_ttl_s = squeue_ttl_s
        self._cache: tuple[float, list[dict[str, Any]]] | None = None
        self._cache_lock = threading.Lock()
        isolation = isolation or Isolation()
        self.accounts = Accounts(isolation.tenants, isolation.allow_same_user, isolation.unix_user_prefix)
        self.work_root = (isolation.jobs_dir or site.workdirs or default_jobs_dir(site.root)).absolute()
        make_jobs_root(self.work_root, site.root)
        site.jobs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        site.jobs_dir.chmod(0o700)

    def notes(self) -> list[str]:
        return [*self.accounts.notes(),
                f"jobs' working directories under {self.work_root} (every Slurm node must see it); "
                "cpu, memory and process limits are Slurm's (its cgroup plugins, where the site sets them)"]

    # -- machines ----------------------------------------------------------------------------
    def launch_machine(self, spec: SliceSpec, machine: SliceMachine) -> None:
        """The slice machine joins Slurm with its GPUs as GRES. Idempotent."""
        gpus = tuple(d for d in machine.devices if device_kind(d) == "gpu")
        self.nodes.join(NodeSpec(machine.name, max(1, math.ceil(machine.cpus)),
                                 max(1, int(machine.memory_gb * 1024)), gpus))

    def destroy_machine(self, spec: SliceSpec, machine: SliceMachine) -> None:
        """Stop what runs on it, delete the node from Slurm, remove its device files. Idempotent."""
        self.nodes.leave(machine.name)
        self._changed()

    # -- jobs --------------------------------------------------------------------------------
    def _job_dir(self, key: str) -> Path:
        """The controller's record of a job (0700): no task can open it."""
        return self.site.jobs_dir / key

    def _area(self, key: str) -> Path:
        """The job's files that its tasks use (root's, 0711): `task.sh`, `output.log`, `work/`."""
        return self.work_root / key

    def workdir(self, handle: str) -> Path:
        """The job's working directory (its HOME), owned by its tenant's user."""
        return self._area(self._key(handle)) / "work"

    def _split(self, handle: str) -> tuple[str | None, str]:
        """handle → (Slurm job id or None when never submitted, slice key)."""
        key = self._key(handle)
        return self._job_id(key), key

    @staticmethod
    def _key(handle: str) -> str:
        """The slice key a handle is; ValueError when it is not one."""
        if not handle or handle != slice_key(handle) or handle.startswith("."):
            raise ValueError(f"not a Slurm engine handle: {handle!r} (a slice key)")
        return handle

    def slurm_job_id(self, handle: str) -> str | None:
        """The Slurm job id behind a handle, None when the job was never submitted."""
        return self._split(handle)[0]

    def _job_id(self, key: str) -> str | None:
        """The Slurm job id of a slice: from its job directory, else found by name (a crash came
        between `sbatch` and writing the id down) and written down then."""
        recorded = self._job_dir(key) / "slurm_job_id"
        if recorded.exists():
            return recorded.read_text().strip()
        name = JOB_PREFIX + key
        for job in self._squeue():
            if job.get("name") == name and is_disagg_job(job):
                recorded.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                recorded.write_text(str(job["job_id"]))
                return str(job["job_id"])
        return None

    def _squeue(self) -> list[dict[str, Any]]:
        """Every job slurmctld still knows (22.05's `squeue --json` ignores filters; we filter here).

        One answer serves every caller for `squeue_ttl_s`: the controller asks about each running slice
        every round, and one full `squeue` per slice per round would load slurmctld for nothing. Anything
        this engine changes in Slurm drops the cached answer.
        """
        with self._cache_lock:
            now = time.monotonic()
            if self._cache is not None and now - self._cache[0] < self.squeue_ttl_s:
                return self._cache[1]
            jobs = self.site.json(["squeue", "--all", "--states=all"]).get("jobs", [])
            out = [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []
            self._cache = (time.monotonic(), out)
            return out

    def _changed(self) -> None:
        """Slurm's state was changed by this engine: the next `_squeue` asks again."""
        with self._cache_lock:
            self._cache = None

    def _find(self, job_id: str) -> dict[str, Any] | None:
        for job in self._squeue():
            if str(job.get("job_id")) == job_id:
                return job
        return None

    def prepare_task(self, spec: SliceSpec) -> str:
        """Submit the job held, pinned to the slice's nodes, as its tenant's user. Same slice → same
        handle, never a second job. TaskRefused when the job has no user it may run as."""
        key = slice_key(spec.slice_id)
        d = self._job_dir(key)
        if self._job_id(key) is not None:
            return key
        name = JOB_PREFIX + key
        if not spec.machines:
            raise ValueError(f"slice {spec.slice_id}: no machines to run on")
        if not spec.tenant:
            raise TaskRefused(f"job {spec.job_id}: no tenant, so no Unix user to run it as")
        account = self.accounts.of(spec.tenant)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        area = self._stage(spec, key, account)
        (d / "nodes").write_text("\n".join(m.name for m in spec.machines) + "\n")
        if account.drop:
            (d / "uid").write_text(f"{account.uid}\n")   # whose processes the kill after a grace is for
        (d / "job.sh").write_text(self._job_script(spec, account, area))
        args = ["sbatch", "--parsable", "--hold", f"--job-name={name}",
                f"--comment={COMMENT_PREFIX}{spec.job_id} slice={spec.slice_id}",
                f"--partition={self.site.partition}",
                f"--nodelist={','.join(m.name for m in spec.machines)}",
                f"--nodes={len(spec.machines)}", f"--ntasks={max(spec.tasks, len(spec.machines))}",
                "--export=NONE", f"--output={area / 'output.log'}", f"--error={area / 'output.log'}",
                f"--chdir={area / 'work'}"]
        if account.drop:
            args += [f"--uid={account.uid}", f"--gid={account.gid}"]
        counts = {sum(device_kind(x) == "gpu" for x in m.devices) for m in spec.machines}
        if len(counts) == 1 and (n := counts.pop()) > 0:
            args.append(f"--gres=gpu:{n}")
        elif len(counts) > 1:
            args.append("--exclusive")   # uneven GPU counts: the whole node (all its GPUs) is the job's
        # sbatch gets none of the controller's variables (with --export=NONE it would still pass SLURM_*
        # ones on) and runs in the job's directory (Slurm tells the job where it was submitted from)
        out = self.site.run([*args, str(d / "job.sh")], env={"PATH": TASK_PATH, "LANG": "C.UTF-8"},
                            cwd=area / "work").stdout.strip()
        self._changed()
        (d / "slurm_job_id").write_text(out.split(";")[0])
        return key

    def _stage(self, spec: SliceSpec, key: str, account: Account) -> Path:
        """The job's area, made afresh (module docstring): root's `task.sh`, an empty `output.log` of
        the tenant's user (Slurm opens it as that user), the working directory with the hostfile."""
        area = self._area(key)
        shutil.rmtree(area, ignore_errors=True)
        area.mkdir(mode=0o700)
        write_readonly(area / "task.sh", self._task_script(spec))
        fd = os.open(area / "output.log", os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
        if account.drop:
            os.fchown(fd, account.uid, account.gid)
        os.close(fd)
        make_workdir(area / "work", account, {"hostfile": hostfile_text(spec)})
        if account.drop:
            area.chmod(0o711)   # its user passes through to its files; it cannot add, remove or rename any
        return area

    def _task_script(self, spec: SliceSpec) -> str:
        """Per-task wrapper: maps the node's CUDA_VISIBLE_DEVICES to disagg device ids, runs the command."""
        cases = []
        for m in spec.machines:
            gpus = " ".join(shlex.quote(x) for x in m.devices if device_kind(x) == "gpu")
            other = " ".join(shlex.quote(x) for x in m.devices if device_kind(x) != "gpu")
            cases.append(f"  {shlex.quote(m.name)}) gpus=({gpus}); other=({other}); "
                         f"export DISAGG_HOST={shlex.quote(m.host)};;")
        return "\n".join([
            "#!/bin/bash",
            "# disagg task wrapper: generated by the Slurm engine.",
            "gpus=(); other=()",
            'case "${SLURMD_NODENAME:-}" in',
            *cases,
            "esac",
            "# an exclusive (uneven) job's steps get no GRES of their own: the node's GPUs are all the job's",
            'if [[ -z "${CUDA_VISIBLE_DEVICES:-}" && ${#gpus[@]} -gt 0 ]]; then',
            '  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $(( ${#gpus[@]} - 1 ))); export CUDA_VISIBLE_DEVICES',
            "fi",
            "ids=()",
            'IFS=, read -ra idx <<< "${CUDA_VISIBLE_DEVICES:-}"',
            'for i in "${idx[@]}"; do ids+=("${gpus[$i]}"); done',
            'ids+=("${other[@]}")',
            'DISAGG_DEVICES=$(IFS=,; echo "${ids[*]}"); export DISAGG_DEVICES',
            'export DISAGG_NODE="${SLURMD_NODENAME:-}" DISAGG_MACHINE="${SLURMD_NODENAME:-}"',
            'export DISAGG_TASK_INDEX="${SLURM_PROCID:-0}"',
            'exec "$@"',
            "",
        ])

    def _job_script(self, spec: SliceSpec, account: Account, area: Path) -> str:
        """Batch script: the job's variables (the local engine's list, nothing else: it starts with
        `--export=NONE`), then one `srun` over every task, which passes them on to the tasks."""
        work = area / "work"
        env = job_environment(spec, account, work, work / "hostfile")
        exports = [f"export {k}={shlex.quote(v)}" for k, v in env.items() if re.fullmatch(r"[A-Za-z_]\w*", k)]
        cmd = " ".join(shlex.quote(c) for c in spec.command)
        return "\n".join([
            "#!/bin/bash",
            f"# disagg job {spec.job_id} on slice {spec.slice_id} as {account.user}: generated by the Slurm engine.",
            "umask 077",
            *exports,
            f"exec srun --export=ALL --kill-on-bad-exit=1 /bin/bash {shlex.quote(str(area / 'task.sh'))} {cmd}",
            "",
        ])

    def launch_task(self, handle: str) -> None:
        """Release the held job. Safe to repeat: a job that is no longer held is left alone."""
        job_id, _ = self._split(handle)
        if job_id is None:
            raise SlurmError(f"job {handle} was never prepared")
        if self.status(handle).state == "held":
            self.site.run(["scontrol", "release", job_id])
            self._changed()

    def status(self, handle: str) -> TaskStatus:
        """Slurm's state of the job; after it left slurmctld's memory, the exit code file decides.

        A job that is not over (or failed) while one of its slice machines is down (its slurmd gone,
        or Slurm marks the node DOWN/NOT_RESPONDING) is `lost`: the machine failed, not the job, and
        the controller re-queues it rather than reporting the job's failure.
        """
        st = self._slurm_status(handle)
        if st.state in (RunState.PENDING, RunState.HELD, RunState.RUNNING, RunState.FAILED):
            for name in self._slice_nodes(self._key(handle)):
                why = self.nodes.down(name, ask_slurm=st.state == RunState.FAILED)
                if why:
                    return TaskStatus(RunState.LOST, None, f"slice machine {name} is down ({why}); {st.detail}")
        return st

    def _slice_nodes(self, key: str) -> list[str]:
        path = self._job_dir(key) / "nodes"
        return path.read_text().split() if path.exists() else []

    def _slurm_status(self, handle: str) -> TaskStatus:
        job_id, key = self._split(handle)
        d = self._job_dir(key)
        job = self._find(job_id) if job_id is not None else None
        exit_code = _read_int(d / "exit")
        if job is None:
            if exit_code is not None:
                ended: TaskState = RunState.COMPLETED if exit_code == 0 else RunState.FAILED
                return TaskStatus(ended, exit_code, "from the job's exit file")
            if (d / RunState.CANCELLED).exists():
                return TaskStatus(RunState.CANCELLED, None, "cancelled by disagg")
            if job_id is None:
                return TaskStatus(RunState.LOST, None, f"no Slurm job was submitted for {handle}")
            return TaskStatus(RunState.LOST, None, f"Slurm job {job_id} is unknown to slurmctld")
        state = str(job.get("job_state", "")).upper()
        reason = str(job.get("state_reason", ""))
        detail = f"slurm {state} ({reason})" if reason and reason != "None" else f"slurm {state}"
        if state == "PENDING" and reason in _HELD_REASONS:
            return TaskStatus(RunState.HELD, None, detail)
        mapped = _STATES.get(state, RunState.LOST)
        if mapped in (RunState.COMPLETED, RunState.FAILED) and exit_code is None:
            exit_code = _wait_status_code(job.get("exit_code"))
            if exit_code is not None:
                self._record_exit(d, exit_code)
        if mapped == RunState.COMPLETED and exit_code not in (None, 0):
            mapped = RunState.FAILED
        if mapped == RunState.RUNNING and state == "COMPLETING" and exit_code is not None:
            mapped = RunState.COMPLETED if exit_code == 0 else RunState.FAILED
        elif mapped == RunState.RUNNING and state == "COMPLETING" and (d / RunState.CANCELLED).exists():
            # disagg cancelled it and Slurm is making sure its processes are gone (seconds, at times)
            mapped = RunState.CANCELLED
        return TaskStatus(mapped, exit_code if mapped in (RunState.COMPLETED, RunState.FAILED) else None, detail)

    @staticmethod
    def _record_exit(d: Path, code: int) -> None:
        """Write down the exit code Slurm reports for an ended job, so it outlives Slurm's memory of the
        job (`MinJobAge`). Only the engine writes it, in the controller's directory: no job can."""
        if d.is_dir():  # a temporary name per thread: two status() calls may record it at once
            write_atomic(d / "exit", f"{code}\n")

    def cancel(self, handle: str) -> None:
        """Stop the job (running or held): `scancel`, which Slurm carries out as SIGTERM to every process
        of the job, then SIGKILL after the site's `KillWait`. A job asked to stop before (`terminate`,
        a preemption) has had its grace: its processes on its slice machines are killed at once (Slurm's
        `scancel --signal=KILL` goes through `KillWait` too: measured). Safe to repeat and on finished jobs."""
        job_id, key = self._split(handle)
        d = self._job_dir(key)
        if d.exists():
            (d / RunState.CANCELLED).touch()
        if job_id is not None:
            self.site.run(["scancel", job_id], check=False)
            self._changed()
            uid = _read_int(d / "uid")
            if (d / "terminated").exists() and uid:
                for name in self._slice_nodes(key):
                    self.nodes.kill_user_processes(name, uid)

    def terminate(self, handle: str, sig: signal.Signals = signal.SIGTERM) -> bool:
        """SIGTERM to the job's tasks (`scancel --signal=TERM`: its steps), which keep running for their
        grace period if they catch it. Not `--full`: the batch script and the `srun` in it would get it
        too, and srun ends the step at once, killing the tasks before they see the signal (measured)."""
        job_id, key = self._split(handle)
        if job_id is None:
            return False
        if self._job_dir(key).is_dir():
            (self._job_dir(key) / "terminated").touch()
        self.site.run(["scancel", f"--signal={sig.name.removeprefix('SIG')}", job_id], check=False)
        return True

    def _open_output(self, handle: str) -> int | None:
        """The job's output file opened for reading, or None. Never through a link, never anything but a
        regular file (a FIFO would block the reader): its tenant's user owns it, though not its directory."""
        path = self._area(self._key(handle)) / "output.log"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    def logs(self, handle: str) -> str:
        fd = self._open_output(handle)
        if fd is None:
            return ""
        with os.fdopen(fd, "rb") as f:
            return f.read().decode("utf-8", errors="replace")

    def log_page(self, handle: str, offset: int, limit: int) -> LogPage:
        """At most `limit` bytes of the output from byte `offset`, read from the file (not whole)."""
        fd = self._open_output(handle)
        if fd is None:
            return LogPage("", 0, 0, 0)
        with os.fdopen(fd, "rb") as f:
            return file_page(f, offset, limit)

    def forget(self, handle: str) -> None:
        """Remove an ended job's files: its area (output, working directory) and the controller's record.
        A job that has not ended is cancelled first. Safe to repeat."""
        key = self._key(handle)
        if self._job_dir(key).exists() and not self.status(handle).state.ended:
            self.cancel(handle)
        shutil.rmtree(self._area(key), ignore_errors=True)
        shutil.rmtree(self._job_dir(key), ignore_errors=True)

    # -- jobs outside disagg -----------------------------------------------------------------
    def foreign_holdings(self) -> list[ForeignHolding]:
        """Nodes, CPUs and GPUs held by running Slurm jobs that disagg did not submit.

        GPU indices (`IDX` in Slurm's GRES detail) are mapped to disagg device ids through the site's
        static nodes, or through a slice machine's record when a user pinned a job to one.
        """
        static = {n.name: n for n in self.site.static_nodes}
        out: list[ForeignHolding] = []
        for job in self._squeue():
            if is_disagg_job(job):
                continue
            if str(job.get("job_state", "")).upper() not in _HOLDING_STATES:
                continue
            res = job.get("job_resources") or {}
            allocated = res.get("allocated_nodes", []) if isinstance(res, dict) else []
            details = job.get("gres_detail") or []
            for i, node in enumerate(allocated):
                name = str(node.get("nodename", ""))
                gres = str(details[i]) if i < len(details) else ""
                indices = parse_gres_indices(gres) if gres.startswith("gpu") else []
                known: tuple[str, ...] = ()
                machine: str | None = None
                if name in static:
                    known, machine = static[name].gpus, static[name].machine
                elif (rec := self.nodes.record(name)) is not None:
                    known = rec.devices
                devices = tuple(known[j] if j < len(known) else f"{name}:gpu{j}" for j in indices)
                cpus = _count_cores(node)
                out.append(ForeignHolding(str(job.get("job_id")), name, machine, cpus, devices))
        return out

    # -- reconciliation ----------------------------------------------------------------------
    def disagg_jobs(self) -> list[SlurmJob]:
        """Every disagg job that Slurm or disagg's job files know, with its state (for reconciliation)."""
        keys = set(self.handles())
        for job in self._squeue():
            if is_disagg_job(job):
                keys.add(str(job["name"])[len(JOB_PREFIX):])
        return [SlurmJob(k, k, self.status(k).state) for k in sorted(keys)]

    def handles(self) -> list[str]:
        """Slices whose job may still be alive (a job directory without an exit code): what the
        controller's reconciliation asks about after a restart. Finished jobs are left out so a restart
        does not query Slurm once per job ever run."""
        if not self.site.jobs_dir.exists():
            return []
        return sorted(p.name for p in self.site.jobs_dir.iterdir() if p.is_dir() and not (p / "exit").exists())

    def joined_machines(self) -> list[str]:
        """Slice machines that have joined (or half-joined) Slurm through this site."""
        return [n.name for n in self.nodes.joined()]

    def orphans(self, live: Collection[str]) -> list[str]:
        keep = set(live)
        return [h for h in self.handles() if h not in keep and not self.status(h).state.ended]

    def adopt(self, machines: Collection[str]) -> list[str]:
        """Make every joined slice machine not in `machines` leave Slurm (reconciliation); returns their names."""
        keep_set = set(machines)
        gone = [name for name in self.joined_machines() if name not in keep_set]
        for name in gone:
            self.nodes.leave(name)
        if gone:
            self._changed()
        return gone

    def job_of(self, spec: SliceSpec) -> tuple[str, TaskStatus] | None:
        """After a controller restart: the handle and state of the slice's job if Slurm or disagg has it.

        None means the job was never submitted (the caller may prepare it). A running job is returned
        as it is and never submitted again (`prepare_task` would return the same handle).
        """
        key = slice_key(spec.slice_id)
        for job in self.disagg_jobs():
            if job.slice_key == key:
                return job.handle, self.status(job.handle)
        return None

    def clean_orphans(self, keep_slices: Iterable[str], keep_machines: Iterable[str]) -> dict[str, list[str]]:
        """Cancel disagg jobs of slices not in `keep_slices`, make machines not in `keep_machines` leave.

        Returns what was cleaned: `{"jobs": handles, "machines": names}`. Job files of cleaned slices stay
        (logs survive); a later `prepare_task` of the same slice id would return the old handle, so a
        slice id is never reused.
        """
        keep_keys = {slice_key(s) for s in keep_slices}
        keep_m = set(keep_machines)
        cleaned: dict[str, list[str]] = {"jobs": [], "machines": []}
        for job in self.disagg_jobs():
            if job.slice_key not in keep_keys and job.state in (RunState.PENDING, RunState.HELD, RunState.RUNNING):
                self.cancel(job.handle)
                cleaned["jobs"].append(job.handle)
        for name in self.joined_machines():
            if name not in keep_m:
                self.nodes.leave(name)
                cleaned["machines"].append(name)
        return cleaned

    def node_gres(self) -> Mapping[str, str]:
        """`{node: gres}` as Slurm reports it now (e.g. `gpu:4`), for checks that GPUs came back."""
        out: dict[str, str] = {}
        for line in self.site.run(["sinfo", "-h", "-N", "-o", "%N %G"]).stdout.splitlines():
            name, _, gres = line.strip().partition(" ")
            if name:
                out[name] = gres.strip()
        return out


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _wait_status_code(raw: object) -> int | None:
    """squeue 22.05 reports the raw wait status (exit code << 8 | signal)."""
    if not isinstance(raw, int):
        return None
    return raw >> 8 if raw > 255 else raw


def _count_cores(node: Mapping[str, Any]) -> float:
    sockets = node.get("sockets", {})
    n = 0
    if isinstance(sockets, dict):
        for sock in sockets.values():
            cores = sock.get("cores", {}) if isinstance(sock, dict) else {}
            n += sum(1 for v in cores.values() if v == "allocated") if isinstance(cores, dict) else 0
    with contextlib.suppress(TypeError, ValueError):
        n = max(n, int(node.get("cpus_used", 0)))
    return float(n)


__all__ = ["COMMENT_PREFIX", "JOB_PREFIX", "SlurmEngine", "SlurmError", "SlurmJob", "device_kind",
           "is_disagg_job", "parse_gres_indices", "slice_key"]

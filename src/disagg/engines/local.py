"""The local engine: a job's tasks run as processes on this host, one directory per slice.

Layout of `<root>/<handle>/`: `spec.json` (what prepare-task staged), `hostfile`, `machines/<name>`
(one marker per launched slice machine), `started` (claimed by the runner, or by a cancel that came
first), `exit` (written by the runner when every task has ended), `task-<i>.stdout|stderr`.

Every task sees its devices: `CUDA_VISIBLE_DEVICES` (indices of its GPUs on the composed node),
`DISAGG_DEVICES` (the device ids), `DISAGG_HOSTFILE` (the slice's hostfile, one line per slice
machine with its slots, OpenMPI style), `DISAGG_TASK_INDEX`, `DISAGG_TASK_COUNT`, `DISAGG_JOB`,
`DISAGG_SLICE`, `DISAGG_MACHINE`.

The runner (`run.sh`, written by `disagg.engines.local_runner`) runs in its own session, so the
jobs outlive a controller killed with SIGKILL and a restarted controller finds them again from these files.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Collection
from pathlib import Path

from disagg.engines.base import Engine, SliceMachine, SliceSpec, TaskStatus
from disagg.engines.local_runner import claim, runner_script, start_ticks, write_atomic
from disagg.fabric.emulated import OperationLatencies
from disagg.model.states import RunState

#: A launched runner that has not claimed its job after this long is taken as lost.
START_GRACE_S = 30.0


class LocalEngine(Engine):
    """Runs jobs as local processes. `latencies` emulate the node operations (boot, hand-over)."""

    name = "local"

    def __init__(self, root: str | Path, latencies: OperationLatencies | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.latencies = latencies or OperationLatencies().scaled(0.0)
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def _dir(self, handle: str) -> Path:
        if not handle or "/" in handle or handle.startswith("."):
            raise ValueError(f"bad handle {handle!r}")
        return self.root / handle

    # --- slice machines --------------------------------------------------------------------
    def launch_machine(self, spec: SliceSpec, machine: SliceMachine) -> None:
        marker = self._dir(spec.slice_id) / "machines" / machine.name
        if marker.exists():
            return
        time.sleep(self.latencies.launch_machine)
        marker.parent.mkdir(parents=True, exist_ok=True)
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
        d = self._dir(spec.slice_id)
        if (d / "spec.json").exists():
            return spec.slice_id
        time.sleep(self.latencies.prepare_task)
        d.mkdir(parents=True, exist_ok=True)
        hostfile = d / "hostfile"
        layout = _task_layout(spec)
        write_atomic(hostfile, "".join(f"{m.name} slots=1\n" for m in spec.machines))
        tasks: list[dict[str, object]] = []
        envs: list[dict[str, str]] = []
        for i, (machine, devices) in enumerate(layout):
            gpus = [str(k) for k, dev in enumerate(devices) if "/gpu" in dev]
            env = {
                "CUDA_VISIBLE_DEVICES": ",".join(gpus),
                "DISAGG_DEVICES": ",".join(devices),
                "DISAGG_HOSTFILE": str(hostfile),
                "DISAGG_TASK_INDEX": str(i),
                "DISAGG_TASK_COUNT": str(spec.tasks),
                "DISAGG_JOB": spec.job_id,
                "DISAGG_SLICE": spec.slice_id,
                "DISAGG_MACHINE": machine.name,
                "DISAGG_HOST": machine.host,
                **spec.env,
            }
            tasks.append({"machine": machine.name, "env": env})
            envs.append(env)
        script = runner_script(d, list(spec.command), envs)
        write_atomic(d / "run.sh", script)
        write_atomic(d / "spec.json", json.dumps({"command": list(spec.command), "tasks": tasks}))
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
        self._children[handle] = subprocess.Popen(
            ["/bin/sh", str(d / "run.sh")],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(d / "runner.log", "ab"),  # noqa: SIM115 - the child keeps it
        )

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
        """Make sure the job is not running and will never start. Safe to repeat."""
        d = self._dir(handle)
        if not d.exists():
            return
        if claim(d / "started", json.dumps({RunState.CANCELLED: True})):
            return  # no runner ever claimed it; none ever will
        pid = self._runner(d) or self._await_claim(d)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        child = self._children.pop(handle, None)
        if child is not None:
            child.wait(timeout=10)
        else:
            end = time.monotonic() + 10
            while self._runner(d) == pid and time.monotonic() < end:
                time.sleep(0.01)
        if _read_exit(d) is None:
            write_atomic(d / "exit", json.dumps({"code": -9, RunState.CANCELLED: True, "at": time.time()}))

    def terminate(self, handle: str) -> bool:
        """SIGTERM to the job's tasks (the runner's children), not to the runner: it stays to record
        their exit code. False when no runner of the job lives."""
        pid = self._runner(self._dir(handle))
        if pid is None:
            return False
        for child in _children(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGTERM)
        return True

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
        d = self._dir(handle)
        outs = sorted(d.glob("task-*.stdout"), key=lambda p: int(p.name.split("-")[1].split(".")[0]))
        parts = []
        for out in outs:
            i = out.name.split(".")[0].split("-")[1]
            err = d / f"task-{i}.stderr"
            text = out.read_text(errors="replace")
            err_text = err.read_text(errors="replace") if err.exists() else ""
            if len(outs) > 1:
                parts.append(f"=== task {i} ===\n")
            parts.append(text)
            if err_text:
                parts.append(f"--- stderr ---\n{err_text}")
        return "".join(parts)

    def handles(self) -> list[str]:
        """Every job directory the engine knows."""
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def orphans(self, live: Collection[str]) -> list[str]:
        keep = set(live)
        return [h for h in self.handles() if h not in keep and not self.status(h).state.ended]

    def close(self) -> None:
        for handle in list(self._children):
            self._reap(handle)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc: its `children` list, else every process's stat)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(stat.parent.name))
    return out


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
    return TaskStatus(RunState.COMPLETED if code == 0 else RunState.FAILED, exit_code=code)


def _task_layout(spec: SliceSpec) -> list[tuple[SliceMachine, tuple[str, ...]]]:
    """Task i runs on slice machine i (a slice machine is one task's vNode) with its devices."""
    if len(spec.machines) != spec.tasks:
        raise ValueError(
            f"slice {spec.slice_id}: {spec.tasks} tasks need {spec.tasks} slice machines, "
            f"got {len(spec.machines)}"
        )
    return [(m, m.devices) for m in spec.machines]

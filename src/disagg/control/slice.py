"""The slice lifecycle: the six FlowOS-RM operations as one persisted state machine per slice.

    composing:     attach-device (every device at once) → launch-machine (every machine at once,
                   each right after its own attaches) → prepare-task → launch-task
    running:       the engine runs the job; the loop polls it
    tearing-down:  stop-task → detach-device (all at once) → destroy-machine (all at once)
    done:          the job gets the slice's outcome (completed, failed, cancelled, or re-queued)

Each step is a row in `slice_steps`, written `started` before it runs and `done`/`failed` after, so
a controller killed at any moment resumes a slice exactly where it was: a `started` step is run
again, which is safe because every step is idempotent (the fabric and the engine accept a repeat).
Each step has its compensation (attach ↔ detach, launch-machine ↔ destroy-machine,
launch-task ↔ stop-task); a teardown compensates only the steps that were ever started. Steps
that do not depend on each other run in parallel, so composing a slice costs about its slowest
chain (one attach plus one boot), not the sum of all its steps (FlowOS-RM lost 32–45% of a short
MNIST job to running them one after another).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam, insert, select, update

from disagg.engines.base import Engine, SliceMachine, SliceSpec
from disagg.fabric.base import FabricDriver, FabricError
from disagg.store import Store
from disagg.store.models import DeviceRow, JobRow, SliceRow, StepRow

log = logging.getLogger(__name__)

COMPOSE_OPS = ("attach-device", "launch-machine", "prepare-task", "launch-task")
TEARDOWN_OPS = ("stop-task", "detach-device", "destroy-machine")
#: How many times a step that failed with a retryable error is tried in all.
STEP_TRIES = 3


class SliceAborted(RuntimeError):
    """The slice left `composing` (cancelled, a device failed) while it was being composed."""


class StepFailed(RuntimeError):
    def __init__(self, op: str, target: str, cause: BaseException) -> None:
        super().__init__(f"{op} {target} failed: {cause}")
        self.op, self.target, self.cause = op, target, cause


@dataclass(frozen=True)
class SlicePlan:
    """What a slice is made of, read back from its stored placement."""

    slice_id: str
    job_id: str
    spec: SliceSpec

    @property
    def machines(self) -> tuple[SliceMachine, ...]:
        return self.spec.machines


StepObserver = Callable[[str, float], None]

_steps: Table = StepRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]
_jobs: Table = JobRow.__table__  # type: ignore[assignment]
_SLICE_STATE = select(_slices.c.state).where(_slices.c.id == bindparam("id"))
_SLICE_ROW = select(_slices).where(_slices.c.id == bindparam("k_id"))
_JOB_COMMAND = select(_jobs.c.id, _jobs.c.command).where(_jobs.c.id == bindparam("k_id"))
# (bind names differ from the column names: in an UPDATE those would be taken as SET values)
_STEP_KEY = and_(
    _steps.c.slice_id == bindparam("k_slice"),
    _steps.c.op == bindparam("k_op"),
    _steps.c.target == bindparam("k_target"),
)
_STEP_STATUS = select(_steps.c.id, _steps.c.status).where(_STEP_KEY)
_STEP_INSERT = insert(_steps)
_STEP_RESTART = (
    update(_steps)
    .where(_steps.c.id == bindparam("k_id"))
    .values(status="started", tries=_steps.c.tries + 1, started_at=bindparam("t_start"), error=None)
)
_STEP_DONE = (
    update(_steps)
    .where(_STEP_KEY)
    .values(status="done", ended_at=bindparam("t_end"), tries=_steps.c.tries + bindparam("extra"))
)
_STEP_FAILED = (
    update(_steps).where(_STEP_KEY).values(status="failed", ended_at=bindparam("t_end"), error=bindparam("err"))
)


def _nothing(_op: str, _seconds: float) -> None:
    return None


def plan_of(row: Any, job: Any) -> SlicePlan:
    """`row`: a slice (its columns); `job`: its job's id and command."""
    machines = tuple(
        SliceMachine(
            name=m["name"],
            host=m["host"],
            cpus=float(m["cpus"]),
            memory_gb=float(m["memory_gb"]),
            devices=tuple(m["devices"]),
        )
        for m in row.placement["machines"]
    )
    spec = SliceSpec(
        slice_id=row.id,
        job_id=job.id,
        command=tuple(job.command),
        machines=machines,
        tasks=len(machines),
        env={"DISAGG_ATTEMPT": str(row.attempt)},
    )
    return SlicePlan(row.id, job.id, spec)


def build_placement(slice_id: str, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The stored form of a slice: one slice machine (a vNode) per task, on the task's machine."""
    machines = []
    for i, t in enumerate(tasks):
        machines.append(
            {
                "name": f"{slice_id}-m{i}",
                "host": t["machine"],
                "task": t["task"],
                "cpus": t["cpus"],
                "memory_gb": t["memory_gb"],
                "devices": [d["id"] for d in t["devices"]],
                "remote": [d["id"] for d in t["devices"] if d["remote"]],
            }
        )
    return {"machines": machines, "tasks": tasks}


class SliceRunner:
    """Drives slices through their steps on a fabric and an engine, recording every step."""

    def __init__(
        self,
        store: Store,
        fabric: FabricDriver,
        engine: Engine,
        observe: StepObserver = _nothing,
        parallel: bool = True,
    ) -> None:
        self.store = store
        self.fabric = fabric
        self.engine = engine
        self.observe = observe
        self.parallel = parallel

    # --- one step --------------------------------------------------------------------------
    def step(
        self,
        slice_id: str,
        op: str,
        target: str,
        action: Callable[[], object],
        after: Callable[[Connection], None] | None = None,
        guard: str | None = None,
    ) -> None:
        """Run one step: record it started, act, record it done (with `after` in that transaction).

        A step already `done` is skipped. `guard` names the slice state the step belongs to: if the
        slice has left it (a cancel, a failure), the step does not start and SliceAborted is raised.
        (Core statements on a bare connection: a slice writes a dozen of these records, and an ORM
        session would cost more CPU than the statements themselves.)
        """
        with self.store.write_core() as conn:
            if guard is not None:
                state = conn.execute(_SLICE_STATE, {"id": slice_id}).scalar()
                if state != guard:
                    raise SliceAborted(f"slice {slice_id} is {state}, no longer {guard}")
            key = {"k_slice": slice_id, "k_op": op, "k_target": target}
            row = conn.execute(_STEP_STATUS, key).first()
            if row is not None and row.status == "done":
                return
            if row is None:
                conn.execute(
                    _STEP_INSERT,
                    {"slice_id": slice_id, "op": op, "target": target, "status": "started", "tries": 1,
                     "started_at": time.time()},
                )
            else:
                conn.execute(_STEP_RESTART, {"k_id": row.id, "t_start": time.time()})
        t0 = time.perf_counter()
        tries = 0
        while True:
            tries += 1
            try:
                action()
                break
            except FabricError as exc:
                if exc.retryable and tries < STEP_TRIES:
                    continue
                self._record_failure(slice_id, op, target, exc)
                raise StepFailed(op, target, exc) from exc
            except Exception as exc:
                self._record_failure(slice_id, op, target, exc)
                raise StepFailed(op, target, exc) from exc
        elapsed = time.perf_counter() - t0
        with self.store.write_core() as conn:
            conn.execute(_STEP_DONE, {**key, "t_end": time.time(), "extra": tries - 1})
            if after is not None:
                after(conn)
        self.observe(op, elapsed)

    def _record_failure(self, slice_id: str, op: str, target: str, exc: BaseException) -> None:
        with self.store.write_core() as conn:
            conn.execute(
                _STEP_FAILED,
                {"k_slice": slice_id, "k_op": op, "k_target": target, "t_end": time.time(), "err": str(exc)[:2000]},
            )

    def _all(self, calls: list[Callable[[], None]]) -> None:
        """Run independent calls at once (or one by one when `parallel` is off); re-raise the first error."""
        if not calls:
            return
        if not self.parallel or len(calls) == 1:
            for call in calls:
                call()
            return
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            futures = [pool.submit(c) for c in calls]
            errors = [f.exception() for f in futures]
        for e in errors:
            if e is not None:
                raise e

    def load(self, slice_id: str) -> tuple[Any, Any]:
        """The slice's row and its job's id and command (Core rows: attribute access by column)."""
        with self.store.read_core() as conn:
            row = conn.execute(_SLICE_ROW, {"k_id": slice_id}).first()
            if row is None:
                raise KeyError(slice_id)
            job = conn.execute(_JOB_COMMAND, {"k_id": row.job_id}).first()
            assert job is not None
            return row, job

    # --- composing -------------------------------------------------------------------------
    def compose(self, slice_id: str) -> None:
        """Compose the slice and start its job. On failure, the slice turns to tearing-down."""
        row, job = self.load(slice_id)
        plan = plan_of(row, job)
        try:
            self._all([self._machine_chain(plan, m, row.placement) for m in plan.machines])
            handle: dict[str, str] = {}

            def prepare() -> None:
                handle["h"] = self.engine.prepare_task(plan.spec)

            def keep_handle(s: Connection) -> None:
                s.execute(update(SliceRow).where(SliceRow.id == slice_id).values(handle=handle["h"]))

            self.step(slice_id, "prepare-task", plan.job_id, prepare, keep_handle, guard="composing")
            row, _ = self.load(slice_id)
            h = row.handle or plan.slice_id
            self.step(
                slice_id,
                "launch-task",
                plan.job_id,
                lambda: self.engine.launch_task(h),
                _running(slice_id),
                guard="composing",
            )
        except SliceAborted:
            return
        except StepFailed as exc:
            self.abort(slice_id, "requeue", str(exc), failed_device=_failed_device(exc, self.fabric))

    def _machine_chain(self, plan: SlicePlan, machine: SliceMachine, placement: dict[str, Any]) -> Callable[[], None]:
        remote = set(next(m for m in placement["machines"] if m["name"] == machine.name)["remote"])
        gbps = {d["id"]: float(d.get("network_gbps", 0.0)) for t in placement.get("tasks", []) for d in t["devices"]}

        def chain() -> None:
            self._all(
                [
                    self._attach(plan.slice_id, dev, machine.host, dev in remote, gbps.get(dev, 0.0))
                    for dev in machine.devices
                ]
            )
            self.step(
                plan.slice_id,
                "launch-machine",
                machine.name,
                lambda: self.engine.launch_machine(plan.spec, machine),
                guard="composing",
            )

        return chain

    def _attach(self, slice_id: str, device: str, host: str, remote: bool, gbps: float) -> Callable[[], None]:
        """Attach one device, reserving on its path the bandwidth the placement gave it."""

        def attach() -> None:
            self.step(
                slice_id,
                "attach-device",
                device,
                lambda: self.fabric.attach(device, host, "pcie-over-ethernet" if remote else "local", gbps),
                guard="composing",
            )

        return attach

    def abort(self, slice_id: str, outcome: str, detail: str, failed_device: str | None = None) -> bool:
        """Send a composing or running slice to teardown with `outcome`. False if it already left."""
        with self.store.write() as s:
            if failed_device is not None:
                s.execute(update(DeviceRow).where(DeviceRow.id == failed_device).values(health="failed"))
            n = s.execute(
                update(SliceRow)
                .where(SliceRow.id == slice_id, SliceRow.state.in_(("composing", "running")))
                .values(state="tearing-down", outcome=outcome, detail=detail[:2000], updated_at=time.time())
            ).rowcount  # type: ignore[attr-defined]
        return bool(n)

    # --- tearing down ----------------------------------------------------------------------
    def teardown(self, slice_id: str) -> None:
        """Compensate every step that was ever started, then settle the job. Safe to repeat."""
        row, job = self.load(slice_id)
        if row.state == "done":
            return
        plan = plan_of(row, job)
        with self.store.read_core() as conn:
            begun = {(r.op, r.target) for r in conn.execute(select(_steps.c.op, _steps.c.target).where(
                _steps.c.slice_id == slice_id))}
        handle = row.handle
        if handle is None and ("prepare-task", job.id) in begun:
            # prepared, but the controller died before it kept the handle: same spec, same handle
            handle = self.engine.prepare_task(plan.spec)
        if handle is not None:
            self.step(slice_id, "stop-task", job.id, lambda: self.engine.cancel(handle))
        detaches = []
        for m in plan.machines:
            for dev in m.devices:
                if ("attach-device", dev) in begun:
                    detaches.append(self._detach(slice_id, dev, m.host))
        self._all(detaches)
        self._all([self._destroy(plan, m) for m in plan.machines if ("launch-machine", m.name) in begun])
        self._settle(slice_id)

    def _detach(self, slice_id: str, device: str, host: str) -> Callable[[], None]:
        def release(s: Connection) -> None:
            s.execute(
                update(DeviceRow).where(DeviceRow.id == device, DeviceRow.slice_id == slice_id).values(slice_id=None)
            )

        def detach() -> None:
            self.step(slice_id, "detach-device", device, lambda: self.fabric.detach(device, host), release)

        return detach

    def _destroy(self, plan: SlicePlan, machine: SliceMachine) -> Callable[[], None]:
        def destroy() -> None:
            self.step(
                plan.slice_id,
                "destroy-machine",
                machine.name,
                lambda: self.engine.destroy_machine(plan.spec, machine),
            )

        return destroy

    def _settle(self, slice_id: str) -> None:
        """The slice is gone: free what it held and give its job the outcome, in one transaction."""
        now = time.time()
        with self.store.write() as s:
            sl = s.get(SliceRow, slice_id)
            assert sl is not None
            if sl.state == "done":
                return
            sl.state, sl.updated_at = "done", now
            s.execute(update(DeviceRow).where(DeviceRow.slice_id == slice_id).values(slice_id=None))
            job = s.get(JobRow, sl.job_id)
            assert job is not None
            if job.slice_id != slice_id or job.state in ("completed", "failed", "cancelled"):
                return
            if sl.outcome == "requeue":
                if job.attempts > job.max_retries:
                    job.state = "failed"
                    job.reason = f"gave up after {job.attempts} attempts; last: {sl.detail}"
                    job.reason_code = "retries-exhausted"
                else:
                    job.state, job.reason, job.reason_code = "queued", f"re-queued: {sl.detail}", "requeued"
            elif sl.outcome in ("completed", "failed", "cancelled"):
                job.state = sl.outcome
            job.updated_at = now


def _running(slice_id: str) -> Callable[[Connection], None]:
    """After launch-task: the slice runs, and so does its job (both only if still composing)."""

    def running(s: Connection) -> None:
        now = time.time()
        n = s.execute(
            update(SliceRow)
            .where(SliceRow.id == slice_id, SliceRow.state == "composing")
            .values(state="running", updated_at=now)
        ).rowcount
        if n:
            s.execute(
                update(JobRow)
                .where(JobRow.slice_id == slice_id, JobRow.state == "composing")
                .values(state="running", reason=None, reason_code=None, updated_at=now)
            )

    return running


def _failed_device(exc: StepFailed, fabric: FabricDriver) -> str | None:
    """The device to mark failed after a failed attach, when the fabric says it is broken."""
    if exc.op == "attach-device" and not fabric.healthy(exc.target):
        return exc.target
    return None

"""The store's slice operations: what the slice workers and the loop read and record as slices live.

A slice's steps are rows of `slice_steps`, written `started` before the step acts and `done` or
`failed` after; what a finished step changes besides (the engine's handle kept, the slice now
running, a device released) is a named `StepEffect` made in the same transaction as its `done`.
Every state change goes through `disagg.store.lifecycle`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sqlalchemy import Connection, Table, and_, bindparam, func, insert, select, update

from disagg.model import SlicePlacement
from disagg.model.states import (
    ACTIVE_SLICE_STATES,
    JOB_FINAL,
    LIVE_SLICE_STATES,
    Health,
    JobReason,
    JobState,
    SliceOutcome,
    SliceState,
    StepStatus,
)
from disagg.store.base import StoreBase
from disagg.store.batch import GroupCalls
from disagg.store.lifecycle import (
    WHY_MAX,
    JobMove,
    move_job,
    move_jobs,
    move_slice,
    release_devices,
    release_orphans,
    set_health,
)
from disagg.store.models import DeviceRow, JobRow, SliceRow, StepRow

T = TypeVar("T")

_steps: Table = StepRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]
_jobs: Table = JobRow.__table__  # type: ignore[assignment]
_devices: Table = DeviceRow.__table__  # type: ignore[assignment]
# an outer join: a composition (a slice with no job) has no command, and its own tenant
_RECORD = select(_slices, _jobs.c.command, func.coalesce(_jobs.c.tenant, _slices.c.tenant, "").label("owner")
                 ).outerjoin(_jobs, _jobs.c.id == _slices.c.job_id)
_SLICE_STATE = select(_slices.c.state).where(_slices.c.id == bindparam("id"))
# (bind names differ from the column names: in an UPDATE those would be taken as SET values)
_STEP_KEY = and_(
    _steps.c.slice_id == bindparam("k_slice"),
    _steps.c.op == bindparam("k_op"),
    _steps.c.target == bindparam("k_target"),
)
_STEP_STATUS = select(_steps.c.id, _steps.c.status).where(_STEP_KEY)
_STEP_RESTART = (
    update(_steps)
    .where(_steps.c.id == bindparam("k_id"))
    .values(status=StepStatus.STARTED, tries=_steps.c.tries + 1, started_at=bindparam("t_start"), error=None)
)
_STEP_DONE = (
    update(_steps)
    .where(_STEP_KEY)
    .values(status=StepStatus.DONE, ended_at=bindparam("t_end"), tries=_steps.c.tries + bindparam("extra"))
)
_STEP_FAILED = (
    update(_steps).where(_STEP_KEY).values(status=StepStatus.FAILED, ended_at=bindparam("t_end"),
                                           error=bindparam("err"))
)


class SliceAborted(RuntimeError):
    """The slice left the state a step belongs to (cancelled, a device failed) before the step began."""


@dataclass(frozen=True)
class SliceRecord:
    """A stored slice as the workers use it: its placement as a typed value, and its job's command.

    A composition (a Redfish client's system) has no job: `job_id` None, no command."""

    id: str
    job_id: str | None
    attempt: int
    state: SliceState
    outcome: str | None
    detail: str | None
    handle: str | None
    placement: SlicePlacement
    command: tuple[str, ...]
    created_at: float
    tenant: str = ""


@dataclass(frozen=True)
class StepRecord:
    """One recorded step of a slice."""

    slice_id: str
    op: str
    target: str
    status: StepStatus
    tries: int
    started_at: float | None
    ended_at: float | None
    error: str | None


@dataclass(frozen=True)
class KeepHandle:
    """After prepare-task: keep the engine's handle of the job."""

    handle: str


@dataclass(frozen=True)
class SliceRunning:
    """After launch-task: the slice runs, and so does its job (both only if still composing)."""


@dataclass(frozen=True)
class ReleaseDevice:
    """After detach-device: the device no longer belongs to the slice."""

    device: str


@dataclass(frozen=True)
class DropDevice:
    """After the detach-device an update of a composition asked for: the device no longer belongs to the
    slice, nor to its placement (the composed system no longer lists it)."""

    device: str


StepEffect = KeepHandle | SliceRunning | ReleaseDevice | DropDevice


def _record(row: Any) -> SliceRecord:
    return SliceRecord(row.id, row.job_id, row.attempt, SliceState(row.state), row.outcome, row.detail, row.handle,
                       SlicePlacement.from_json(row.id, row.placement), tuple(row.command or ()), row.created_at,
                       row.owner)


class SliceOps(StoreBase):
    """Reading slices, recording their steps, and the moves their life makes."""

    def load_slice(self, slice_id: str) -> SliceRecord:
        """The slice and its job's command; KeyError when there is no such slice."""
        with self.read_core() as conn:
            row = conn.execute(_RECORD.where(_slices.c.id == slice_id)).first()
        if row is None:
            raise KeyError(slice_id)
        return _record(row)

    def live_slices(self) -> list[SliceRecord]:
        """Slices that still hold resources (composing, running, tearing down)."""
        with self.read_core() as conn:
            return [_record(r) for r in conn.execute(_RECORD.where(_slices.c.state.in_(LIVE_SLICE_STATES)))]

    def all_slices(self) -> list[SliceRecord]:
        """Every slice ever made (audits and benchmarks on small stores; the API pages through views)."""
        with self.read_core() as conn:
            return [_record(r) for r in conn.execute(_RECORD)]

    def first_placed_at(self) -> dict[str, float]:
        """Each job's first slice's creation time: when it was first placed and committed (`bench
        controller`). Worked out by the database: reading every slice whole into records, 12,000 of them
        on PostgreSQL at load 35, outlasted the session's idle-in-transaction timeout."""
        query = (select(_slices.c.job_id, func.min(_slices.c.created_at)).where(_slices.c.job_id.is_not(None))
                 .group_by(_slices.c.job_id))
        with self.read_core() as conn:
            return {str(job): float(at) for job, at in conn.execute(query)}

    def slice_steps(self, slice_id: str | None = None) -> list[StepRecord]:
        """The recorded steps of one slice (of every slice when None), in the order they were first started."""
        query = select(_steps).order_by(_steps.c.id)
        if slice_id is not None:
            query = query.where(_steps.c.slice_id == slice_id)
        with self.read_core() as conn:
            return [StepRecord(r.slice_id, r.op, r.target, StepStatus(r.status), r.tries, r.started_at, r.ended_at,
                               r.error) for r in conn.execute(query)]

    def held_devices(self) -> dict[str, str]:
        """Device → the slice the store says holds it."""
        query = select(_devices.c.id, _devices.c.slice_id).where(_devices.c.slice_id.is_not(None))
        with self.read_core() as conn:
            return {str(d): str(s) for d, s in conn.execute(query)}

    def running_slices(self) -> list[tuple[str, str | None]]:
        """(slice, engine handle) of every running slice: what the loop polls."""
        query = select(_slices.c.id, _slices.c.handle).where(_slices.c.state == SliceState.RUNNING)
        with self.read_core() as conn:
            return [(str(i), h) for i, h in conn.execute(query)]

    def slices_to_work(self, per_tenant: int | None = None) -> list[tuple[str, SliceState, str]]:
        """Slices a worker must move on (composing or tearing down), oldest first, each with its tenant (a
        composition's own, a job's slice its job's): the loop hands them to the workers in a fair order.
        `per_tenant`: only each tenant's oldest so many — all a fair pick of that many workers can use —
        so that a backlog of 10,000 compositions is not read whole each time a worker is free."""
        tenant = func.coalesce(_slices.c.tenant, _jobs.c.tenant).label("tenant")
        waiting = (select(_slices.c.id, _slices.c.state, tenant, _slices.c.created_at)
                   .outerjoin(_jobs, _jobs.c.id == _slices.c.job_id)
                   .where(_slices.c.state.in_((SliceState.COMPOSING, SliceState.TEARING_DOWN))))
        if per_tenant is None:
            query = waiting.order_by(_slices.c.created_at, _slices.c.id)
        else:
            rank = func.row_number().over(partition_by=tenant, order_by=(_slices.c.created_at, _slices.c.id))
            ranked = waiting.add_columns(rank.label("rank")).subquery()
            query = (select(ranked.c.id, ranked.c.state, ranked.c.tenant).where(ranked.c.rank <= per_tenant)
                     .order_by(ranked.c.created_at, ranked.c.id))
        with self.read_core() as conn:
            return [(str(row[0]), SliceState(row[1]), str(row[2] or "")) for row in conn.execute(query)]

    # --- steps -------------------------------------------------------------------------------
    def _open(self, url: str) -> None:
        super()._open(url)
        # SQLite's single writer is shared by the step records a group at a time (`write_grouped`); its
        # thread starts with the first record. PostgreSQL writes concurrently: none.
        self._grouped: GroupCalls | None = GroupCalls(self) if self._writers is not None else None

    def close(self) -> None:
        if self._grouped is not None:
            self._grouped.close()  # (what is queued is written first)
        super().close()

    def write_grouped(self, fn: Callable[[Connection], T]) -> T:
        """`fn(conn)` in a `write_core()` transaction that, on SQLite, other threads' `write_grouped` calls
        queued meanwhile share (`batch.GroupCalls`: one turn of the single writer for a group of short
        transactions); returns what fn returns once committed. fn must only touch the database, and may
        run twice (a group one of whose calls raised is run again call by call). PostgreSQL writes
        concurrently: there each call is a transaction of its own."""
        if self._grouped is None:
            with self.write_core() as conn:
                return fn(conn)
        return self._grouped.call(fn)

    def begin_step(self, slice_id: str, op: str, target: str, guard: SliceState | None) -> bool:
        """Record a step `started` (again, if it ran before); False when it is `done` already.

        `guard`: the slice state the step belongs to; SliceAborted if the slice has left it. The step
        records of every worker share transactions (`write_grouped`): a dozen per job, each a turn of
        SQLite's single writer of its own, bounded how many jobs the workers brought to an end.
        """
        return self.write_grouped(lambda conn: _begin_step(conn, slice_id, op, target, guard))

    def step_done(self, slice_id: str, op: str, target: str, retries: int, effect: StepEffect | None = None) -> None:
        """Record a step `done` (after `retries` extra tries), with what it changes besides, in one transaction."""
        def done(conn: Connection) -> None:
            conn.execute(_STEP_DONE, {"k_slice": slice_id, "k_op": op, "k_target": target, "t_end": time.time(),
                                      "extra": retries})
            if effect is not None:
                _apply_effect(conn, slice_id, effect)

        self.write_grouped(done)

    def step_failed(self, slice_id: str, op: str, target: str, error: str) -> None:
        self.write_grouped(lambda conn: conn.execute(_STEP_FAILED, {
            "k_slice": slice_id, "k_op": op, "k_target": target, "t_end": time.time(), "err": error[:WHY_MAX]}))

    def begun_steps(self, slice_id: str) -> set[tuple[str, str]]:
        """(op, target) of every step the slice ever started: what its teardown must compensate."""
        query = select(_steps.c.op, _steps.c.target).where(_steps.c.slice_id == slice_id)
        with self.read_core() as conn:
            return {(str(op), str(target)) for op, target in conn.execute(query)}

    # --- moves -------------------------------------------------------------------------------
    def slice_composed(self, slice_id: str, detail: str | None = None) -> bool:
        """A composition's machines and devices are all there: composing → composed. False if it left.
        `detail`: why it is composed otherwise than asked (an update that failed and was undone)."""
        why = "its machine and devices are composed" if detail is None else detail
        with self.write_core() as conn:
            return move_slice(conn, slice_id, SliceState.COMPOSED, why, (SliceState.COMPOSING,), time.time(),
                              detail=None if detail is None else detail[:WHY_MAX]) is not None

    def abort_slice(self, slice_id: str, outcome: SliceOutcome, detail: str, failed_device: str | None = None) -> bool:
        """Send a composing or running slice to teardown with `outcome`. False if it already left.

        `failed_device`: a device a failed attach showed broken, marked failed in the same transaction.
        """
        with self.write_core() as conn:
            if failed_device is not None:
                set_health(conn, [failed_device], Health.FAILED, f"an attach showed it broken: {detail}", time.time())
            left = move_slice(conn, slice_id, SliceState.TEARING_DOWN, detail, ACTIVE_SLICE_STATES, time.time(),
                              outcome=outcome, detail=detail[:WHY_MAX])
        return left is not None

    def finish_slice(self, slice_id: str, ended: JobState, exit_code: int | None) -> bool:
        """The engine says the job ended (`completed` or `failed`): the slice goes to teardown and the job
        takes its outcome now (its teardown does not change it). False if the slice was no longer running."""
        return self.finish_slices([(slice_id, ended, exit_code)])[0]

    def finish_slices(self, ended: list[tuple[str, JobState, int | None]]) -> list[bool]:
        """`finish_slice` for every (slice, outcome, exit code) the loop found ended, in one transaction: a
        poll that finds 500 ended jobs waits once for SQLite's writer, not 500 times behind the workers."""
        now = time.time()
        out: list[bool] = []
        with self.write_core() as conn:
            for slice_id, state, exit_code in ended:
                detail = f"exit code {exit_code}"
                if move_slice(conn, slice_id, SliceState.TEARING_DOWN, f"job {state}: {detail}",
                              (SliceState.RUNNING,), now, outcome=SliceOutcome(state), detail=detail) is None:
                    out.append(False)
                    continue
                job_id = conn.execute(select(_slices.c.job_id).where(_slices.c.id == slice_id)).scalar_one()
                failed = state is not JobState.COMPLETED
                move_job(conn, job_id, state, detail, (JobState.RUNNING,), now, exit_code=exit_code,
                         reason=detail if failed else None, reason_code=JobReason.EXIT_CODE if failed else None)
                out.append(True)
        return out

    def ended_before_teardown(self, slice_id: str, ended: JobState, exit_code: int | None) -> bool:
        """A slice torn down by a fault or a preemption whose job had ended already (the engine kept its exit
        record): the job takes that outcome now, so that settling the slice does not re-queue it. False if
        the job was no longer running on this slice."""
        now = time.time()
        detail = f"exit code {exit_code}"
        with self.write_core() as conn:
            sl = conn.execute(select(_slices.c.job_id, _slices.c.detail).where(
                _slices.c.id == slice_id, _slices.c.state == SliceState.TEARING_DOWN)).first()
            if sl is None or sl.job_id is None or conn.execute(
                    select(_jobs.c.slice_id).where(_jobs.c.id == sl.job_id)).scalar() != slice_id:
                return False
            failed = ended is not JobState.COMPLETED
            why = f"job {ended}: {detail}, before its slice was torn down ({sl.detail})"
            if move_job(conn, sl.job_id, ended, why, (JobState.RUNNING,), now, exit_code=exit_code,
                        reason=detail if failed else None,
                        reason_code=JobReason.EXIT_CODE if failed else None) is None:
                return False
            conn.execute(update(_slices).where(_slices.c.id == slice_id).values(outcome=SliceOutcome(ended)))
        return True

    def settle_slice(self, slice_id: str) -> None:
        """The slice is gone: free what it held and give its job the outcome, in one transaction. Idempotent."""
        now = time.time()
        with self.write_core() as conn:
            sl = conn.execute(select(_slices).where(_slices.c.id == slice_id)).first()
            if sl is None or move_slice(conn, slice_id, SliceState.DONE, "torn down", (SliceState.TEARING_DOWN,),
                                        now) is None:
                return
            release_devices(conn, slice_id)
            job = conn.execute(select(_jobs).where(_jobs.c.id == sl.job_id)).first()
            if job is None or job.slice_id != slice_id or job.state in JOB_FINAL:
                return
            _settle_job(conn, job, sl, now)

    def reconcile_records(self, live: set[str]) -> tuple[list[str], list[str]]:
        """After a restart: free devices held by slices that are gone, re-queue jobs whose slice is gone.

        Returns (devices freed, jobs re-queued).
        """
        now = time.time()
        with self.write_core() as conn:
            freed = release_orphans(conn, live)
            live_jobs = conn.execute(select(_jobs.c.id, _jobs.c.slice_id)
                                     .where(_jobs.c.state.in_((JobState.COMPOSING, JobState.RUNNING))))
            why = "re-queued: its slice was gone"
            moves = [JobMove(str(j), JobState.QUEUED, why, (JobState.COMPOSING, JobState.RUNNING),
                             {"reason": why, "reason_code": JobReason.REQUEUED})
                     for j, s in live_jobs if s not in live]
            requeued = [j for j, _ in move_jobs(conn, moves, now)]
        return freed, requeued


def _begin_step(conn: Connection, slice_id: str, op: str, target: str, guard: SliceState | None) -> bool:
    """`begin_step`'s transaction."""
    if guard is not None:
        state = conn.execute(_SLICE_STATE, {"id": slice_id}).scalar()
        if state != guard:
            raise SliceAborted(f"slice {slice_id} is {state}, no longer {guard}")
    key = {"k_slice": slice_id, "k_op": op, "k_target": target}
    row = conn.execute(_STEP_STATUS, key).first()
    if row is not None and row.status == StepStatus.DONE:
        return False
    now = time.time()
    if row is None:
        conn.execute(insert(_steps), {"slice_id": slice_id, "op": op, "target": target,
                                      "status": StepStatus.STARTED, "tries": 1, "started_at": now})
    else:
        conn.execute(_STEP_RESTART, {"k_id": row.id, "t_start": now})
    return True


def _apply_effect(conn: Connection, slice_id: str, effect: StepEffect) -> None:
    now = time.time()
    if isinstance(effect, KeepHandle):
        conn.execute(update(_slices).where(_slices.c.id == slice_id).values(handle=effect.handle))
    elif isinstance(effect, ReleaseDevice | DropDevice):
        release_devices(conn, slice_id, [effect.device])
        if isinstance(effect, DropDevice):
            _drop_from_placement(conn, slice_id, effect.device)
    elif move_slice(conn, slice_id, SliceState.RUNNING, "launched", (SliceState.COMPOSING,), now) is not None:
        job_id = conn.execute(select(_slices.c.job_id).where(_slices.c.id == slice_id)).scalar_one()
        move_job(conn, job_id, JobState.RUNNING, "launched", (JobState.COMPOSING,), now, reason=None,
                 reason_code=None)


def _drop_from_placement(conn: Connection, slice_id: str, device: str) -> None:
    raw = conn.execute(select(_slices.c.placement).where(_slices.c.id == slice_id)).scalar_one()
    placement = SlicePlacement.from_json(slice_id, raw)
    tasks = tuple(replace(t, devices=tuple(d for d in t.devices if d.id != device)) for t in placement.tasks)
    conn.execute(update(_slices).where(_slices.c.id == slice_id)
                 .values(placement=SlicePlacement(slice_id, tasks).to_json()))


def _settle_job(conn: Connection, job: Any, sl: Any, now: float) -> None:
    """What a torn-down slice's outcome does to its job (still in composing or running)."""
    live = (JobState.COMPOSING, JobState.RUNNING)
    if sl.outcome == SliceOutcome.PREEMPTED:
        # not a failure of the job: re-queued whatever its retries, its wait counter W kept
        why = f"re-queued: {sl.detail}"
        move_job(conn, job.id, JobState.QUEUED, why, live, now, reason=why, reason_code=JobReason.PREEMPTED)
    elif sl.outcome == SliceOutcome.REQUEUE:
        if job.attempts > job.max_retries:
            why = f"gave up after {job.attempts} attempts; last: {sl.detail}"
            move_job(conn, job.id, JobState.FAILED, why, live, now, reason=why, reason_code=JobReason.RETRIES_EXHAUSTED)
        else:
            why = f"re-queued: {sl.detail}"
            move_job(conn, job.id, JobState.QUEUED, why, live, now, reason=why, reason_code=JobReason.REQUEUED)
    elif sl.outcome == SliceOutcome.FAILED:  # the engine refused the job: it fails with the engine's word
        move_job(conn, job.id, JobState.FAILED, sl.detail, live, now, reason=sl.detail, reason_code=JobReason.REFUSED)
    elif sl.outcome is not None:
        ended = JobState(sl.outcome)
        # only a running job completes; a failure or a cancel ends a composing one too
        move_job(conn, job.id, ended, sl.detail, (JobState.RUNNING,) if ended is JobState.COMPLETED else live, now)


__all__ = [
    "DropDevice",
    "KeepHandle",
    "ReleaseDevice",
    "SliceAborted",
    "SliceOps",
    "SliceRecord",
    "SliceRunning",
    "StepEffect",
    "StepRecord",
]

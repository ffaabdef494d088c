"""The store's job operations: submissions, the queue a round reads, cancel, and a job's history.

Every change of a job's state goes through `disagg.store.lifecycle` (guarded, with its event).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Table, Text, bindparam, cast, func, select

from disagg.model import DEVICE_KINDS, Job, TaskRequest
from disagg.model.states import ACTIVE_SLICE_STATES, JobReason, JobState, SliceOutcome, SliceState
from disagg.store.base import StoreBase
from disagg.store.batch import GroupInsert
from disagg.store.lifecycle import (
    CHUNK,
    job_events,
    move_job,
    move_queued,
    move_slice,
    new_jobs,
    note_jobs,
)
from disagg.store.models import JobRow, SliceRow

_jobs: Table = JobRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]
_JOB_BY_ID = select(_jobs).where(_jobs.c.id == bindparam("k_id"))
#: What a job shows of itself (`job_dict`), by column: not its order key nor its idempotency record.
_SHOWN = tuple(c for c in _jobs.c if c.key not in ("seq", "idempotency_key", "request_hash"))
#: Jobs that a cancel still stops.
_CANCELLABLE = (JobState.QUEUED, JobState.COMPOSING, JobState.RUNNING, JobState.HELD)


class QueuedModels:
    """The queued jobs as the policies see them (`model_job`), made once per job. A job's request (its
    tasks, command, image, tenant, SLO, importance, preemptibility, submission time) is written when it
    is submitted and never again; of what a policy reads, only `wait_rounds` moves while it waits. So a
    round reads each queued job's id and W, and whole rows only for the jobs it has not seen: under
    `bench controller` the window's 2,000 rows, read whole and decoded each round, were a ninth of the
    loop's time. Bounded by the window; thread-safe."""

    def __init__(self) -> None:
        self._made: dict[str, Job] = {}
        self._lock = threading.Lock()

    def window(self, conn: Connection, window: int) -> list[Job]:
        ids = conn.execute(select(_jobs.c.id, _jobs.c.wait_rounds).where(_jobs.c.state == JobState.QUEUED)
                           .order_by(_jobs.c.seq).limit(window)).all()
        with self._lock:
            made = dict(self._made)
        missing = [str(i) for i, _ in ids if i not in made]
        for k in range(0, len(missing), CHUNK):
            rows = conn.execute(select(*_MODELLED).where(_jobs.c.id.in_(missing[k:k + CHUNK])))
            made.update((str(r.id), model_job(r)) for r in rows)
        out = []
        for job_id, waited in ids:
            job = made.get(job_id)
            if job is None:
                continue  # removed between the two reads (PostgreSQL reads each statement afresh)
            out.append(job if job.wait_rounds == waited else dataclasses.replace(job, wait_rounds=waited))
        with self._lock:
            if len(self._made) > 2 * len(ids) + 1000:
                self._made = {j.name: j for j in out}
            self._made.update((j.name, j) for j in out)
        return out


#: The columns `model_job` reads: half the row (not its name, key, hash, reason, times of moves...), which
#: a round reads for each job it has not seen (the decoding of the rest was a third of the queue's read).
_MODELLED = tuple(_jobs.c[k] for k in ("id", "image", "submitted_at", "importance", "slo_s", "wait_rounds",
                                       "command", "tenant", "preemptible", "tasks"))

#: Each store's queued models, by its SQLAlchemy engine (one per `Store`; gone with it).
_QUEUED: weakref.WeakKeyDictionary[Engine, QueuedModels] = weakref.WeakKeyDictionary()
_QUEUED_LOCK = threading.Lock()


def _queued_models(engine: Engine) -> QueuedModels:
    with _QUEUED_LOCK:
        return _QUEUED.setdefault(engine, QueuedModels())


class IdempotencyConflict(ValueError):
    """The same idempotency key was used with a different request body."""


class JobLive(ValueError):
    """A job that has not ended cannot be removed (cancel it first); says its state."""

    def __init__(self, job_id: str, state: str) -> None:
        super().__init__(f"job {job_id} is {state}: only an ended job's record can be removed (cancel it first)")
        self.state = state


def model_job(row: Any) -> Job:
    """A stored job as the policies see it (its id is its name). `row`: a job row or its columns."""
    t = row.tasks
    devices: dict[str, int] = {k: int(t.get(k, 0)) for k in DEVICE_KINDS if int(t.get(k, 0) or 0) > 0}
    models: dict[str, str] = {k: str(t[f"{k}_model"]) for k in DEVICE_KINDS if t.get(f"{k}_model")}
    return Job(
        name=row.id,
        image=row.image,
        submit_s=row.submitted_at,
        importance=row.importance,
        slo_s=row.slo_s,
        wait_rounds=row.wait_rounds,
        command=tuple(row.command),
        tenant=row.tenant,
        preemptible=row.preemptible is not False,
        tasks=TaskRequest(
            int(t.get("count", 1)), float(t.get("cpus", 1.0)), float(t.get("memory_gb", 1.0)), devices, models
        ),
    )


def job_dict(r: Any) -> dict[str, Any]:
    """A job as the API shows it (`r`: a job row, or a mapping of its stored columns)."""
    get = r.get if isinstance(r, dict) else lambda k: getattr(r, k)
    out: dict[str, Any] = {("slice" if c.key == "slice_id" else c.key): get(c.key) for c in _SHOWN}
    out["command"] = list(out["command"])
    out["tasks"] = dict(out["tasks"])
    out["preemptible"] = out.get("preemptible") is not False
    return out


def new_job_row(tenant: str, request: dict[str, Any], key: str | None, digest: str | None, now: float
                ) -> dict[str, Any]:
    """The stored columns of a new, queued job from a checked request (the API's JobIn as a dict)."""
    return {
        "id": new_id("j"), "seq": time.time_ns(), "tenant": tenant, "name": request["name"],
        "image": request["image"], "command": list(request["command"]), "tasks": dict(request["tasks"]),
        "slo_s": request.get("slo_s"), "importance": float(request.get("importance", 1.0)),
        "max_retries": int(request.get("max_retries", 2)), "state": JobState.QUEUED,
        "reason": "waiting for the next scheduling round", "reason_code": JobReason.NEW, "wait_rounds": 0,
        "attempts": 0, "exit_code": None, "slice_id": None, "submitted_at": now, "updated_at": now,
        "idempotency_key": key, "request_hash": digest, "preemptible": bool(request.get("preemptible", True)),
    }


def new_id(prefix: str) -> str:
    """A fresh id: `j-…` for jobs, `s-…` for slices (12 hex digits of a random UUID)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class JobSummary:
    """What an audit needs of a job (`disagg bench crash` checks its invariants on these)."""

    id: str
    state: JobState
    slice_id: str | None
    reason: str | None


class JobOps(StoreBase):
    """Submissions, the queue, cancel, history."""

    def submissions(self) -> GroupInsert:
        """A group writer for new jobs: rows from `new_job_row` are committed in batches; `insert(row)`
        returns a Future set once the row is stored."""
        return GroupInsert(self, new_jobs)

    def queued_jobs(self, window: int) -> list[Job]:
        """The `window` oldest queued jobs, oldest first, as the policies see them."""
        with self.read_core() as conn:
            return _queued_models(conn.engine).window(conn, window)

    def queued_representatives(self, window: int, limit: int) -> list[Job]:
        """Backfill's candidates (control/loop.py, placement/backfill.py): among the queued jobs after
        the `window` oldest, the oldest of each distinct request (`tasks`: what it asks for), oldest
        first, at most `limit`. One GROUP BY over the queue (a 10,000-job queue asks a few dozen distinct
        things), then those rows. Jobs asking the same in another spelling of the JSON count as two."""
        if limit <= 0:
            return []
        queued = _jobs.c.state == JobState.QUEUED
        # The last job of the window: the representatives come after it (none when the window holds all).
        edge = select(_jobs.c.seq).where(queued).order_by(_jobs.c.seq).offset(window - 1).limit(1).scalar_subquery()
        asks = cast(_jobs.c.tasks, Text)
        firsts = (select(func.min(_jobs.c.seq).label("seq")).where(queued, _jobs.c.seq > edge).group_by(asks)
                  .order_by(func.min(_jobs.c.seq)).limit(limit))
        with self.read_core() as conn:
            seqs = [r.seq for r in conn.execute(firsts)]
            if not seqs:
                return []
            rows = conn.execute(select(_jobs).where(queued, _jobs.c.seq.in_(seqs)).order_by(_jobs.c.seq, _jobs.c.id))
            seen: set[str] = set()
            out = []
            for r in rows:  # two jobs with the same seq and request: the first stands for both
                ask = str(sorted(r.tasks.items()))
                if ask not in seen:
                    seen.add(ask)
                    out.append(model_job(r))
        return out

    def job_by_key(self, tenant: str, key: str, digest: str) -> dict[str, Any] | None:
        """The job `tenant` submitted with Idempotency-Key `key`, if any; IdempotencyConflict when that
        job's request body (its `digest`) differs."""
        query = select(_jobs).where(_jobs.c.tenant == tenant, _jobs.c.idempotency_key == key)
        with self.read_core() as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        if row.request_hash != digest:
            raise IdempotencyConflict(
                f"Idempotency-Key {key!r} was used for job {row.id} with a different request body")
        return job_dict(row)

    def cancel_job(self, job_id: str) -> dict[str, Any] | None:
        """Cancel a job: a queued one stops waiting; a live slice goes to teardown. Safe to repeat; None
        when there is no such job."""
        now = time.time()
        with self.write_core(urgent=True) as conn:
            row = conn.execute(_JOB_BY_ID, {"k_id": job_id}).first()
            if row is None:
                return None
            if move_job(conn, job_id, JobState.CANCELLED, "cancelled by user", _CANCELLABLE, now,
                        reason="cancelled by user", reason_code=JobReason.CANCELLED) and row.slice_id is not None:
                move_slice(conn, row.slice_id, SliceState.TEARING_DOWN, "cancelled by user", ACTIVE_SLICE_STATES,
                           now, outcome=SliceOutcome.CANCELLED, detail="cancelled by user")
            row = conn.execute(_JOB_BY_ID, {"k_id": job_id}).first()
        return job_dict(row)

    def set_aside(self, job_ids: list[str], why: str) -> list[str]:
        """Fail queued jobs that a scheduling round cannot plan (reason `unplaceable`, with `why`); those moved."""
        with self.write_core(urgent=True) as conn:
            return move_queued(conn, JobState.FAILED, dict.fromkeys(job_ids, why), JobReason.UNPLACEABLE,
                               time.time())

    def note_jobs(self, notes: dict[str, str]) -> None:
        """Record, on each job, something that happened to it without moving it (job → why): an event."""
        now = time.time()
        with self.write_core() as conn:
            note_jobs(conn, notes, now)

    def queued_counts(self) -> dict[str, int]:
        """How many jobs each tenant has queued."""
        query = select(_jobs.c.tenant, func.count()).where(_jobs.c.state == JobState.QUEUED).group_by(_jobs.c.tenant)
        with self.read_core() as conn:
            return {str(t): int(n) for t, n in conn.execute(query)}

    def job_attempt(self, job_id: str) -> tuple[str, str] | None:
        """(the job's latest slice, the engine's handle of it), or None before it was ever placed."""
        query = (select(_slices.c.id, _slices.c.handle).join(_jobs, _jobs.c.slice_id == _slices.c.id)
                 .where(_jobs.c.id == job_id))
        with self.read_core() as conn:
            row = conn.execute(query).first()
        return None if row is None else (str(row.id), str(row.handle or row.id))

    def job_ended(self, job_id: str) -> bool:
        """Whether the job is in a final state (a missing job counts as ended)."""
        with self.read_core() as conn:
            state = conn.execute(select(_jobs.c.state).where(_jobs.c.id == job_id)).scalar()
        return state is None or JobState(state).final

    def job_handle(self, job_id: str) -> str | None:
        """The engine's handle of the job's latest slice (its slice id when the engine gave none)."""
        query = (select(_slices.c.id, _slices.c.handle).join(_jobs, _jobs.c.slice_id == _slices.c.id)
                 .where(_jobs.c.id == job_id))
        with self.read_core() as conn:
            row = conn.execute(query).first()
        return None if row is None else str(row.handle or row.id)

    def job_summaries(self) -> list[JobSummary]:
        """Every job's id, state, slice and reason."""
        query = select(_jobs.c.id, _jobs.c.state, _jobs.c.slice_id, _jobs.c.reason)
        with self.read_core() as conn:
            return [JobSummary(i, JobState(st), sl, why) for i, st, sl, why in conn.execute(query)]

    def job_events(self, job_id: str, after: int | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """The job's transitions and its slices', oldest first: from, to, when, why (each with its `id`);
        from event id `after` on, at most `limit` (None: all)."""
        with self.read_core() as conn:
            return job_events(conn, job_id, after, limit)


__all__ = ["IdempotencyConflict", "JobLive", "JobOps", "JobSummary", "job_dict", "model_job", "new_id", "new_job_row"]

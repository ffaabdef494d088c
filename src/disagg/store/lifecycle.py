"""Guarded transitions: the only code that writes the state of a job, a slice, a device (health, drain,
holder) or a link, and the events that record them.

Every move is checked against the transition tables of `disagg.model.states` before any SQL runs
(a move the table forbids is a programming error: `IllegalTransition` names both states), then made
only if the row is still in one of the states the caller expects — a cancel, a failure or the other
process may have moved it first, and then nothing is written and the caller hears `None`. The move
and its event row (from, to, when, why) go into the caller's transaction, so the history can never
disagree with the state.

Devices and links: a device's health (healthy ⇄ failed) and drain (in-service ⇄ drained) and a link's
state (up ⇄ down) move the same way — checked against their tables, compare-and-set on the state read,
an event per move (`subject` device | link, the id in `target`). A device's holder is set only on a free
device and cleared only by the slice that holds it (`hold_devices`, `release_devices`); those moves have
no event of their own: the slice's events (placed, torn down) already say when.

Core statements on a bare connection: the slice workers and the scheduling loop make these moves on
their hot paths, where an ORM session costs more than the statements.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from sqlalchemy import Connection, Table, bindparam, insert, select, update

from disagg.model.states import (
    Drain,
    Health,
    IllegalTransition,
    JobReason,
    JobState,
    LinkState,
    SliceState,
    check_drain_move,
    check_health_move,
    check_job_move,
    check_link_move,
    check_slice_move,
)
from disagg.store.models import DeviceRow, EventRow, JobRow, LinkRow, SliceRow

_jobs: Table = JobRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]
_events: Table = EventRow.__table__  # type: ignore[assignment]
_devices: Table = DeviceRow.__table__  # type: ignore[assignment]
_links: Table = LinkRow.__table__  # type: ignore[assignment]
#: Ids per statement (a cluster may fail or hold thousands of devices at once).
CHUNK = 500
#: An event's `why` is kept to this many characters (a step's error can be long).
WHY_MAX = 2000


@dataclass(frozen=True)
class JobMove:
    """One job to move in a batch (`move_jobs`): to `to`, if it is still in one of `expect`."""

    job_id: str
    to: JobState
    why: str | None
    expect: tuple[JobState, ...]
    values: dict[str, Any] = field(default_factory=dict)


def _event(conn: Connection, subject: str, job_id: str | None, slice_id: str | None, src: str | None, dst: str,
           why: str | None, now: float, target: str | None = None) -> dict[str, Any]:
    """An event row; it carries the epoch of the leader that writes it (None: an API's write)."""
    return {"at": now, "subject": subject, "job_id": job_id, "slice_id": slice_id, "from_state": src,
            "to_state": dst, "why": None if why is None else why[:WHY_MAX], "target": target,
            "epoch": leader_epoch(conn)}


def leader_epoch(conn: Connection) -> int | None:
    """The leader epoch this transaction writes under: `StoreBase.write`/`write_core` checked it against the
    lease (`store/lease.py`) before the first statement; None outside a leader (an API's write)."""
    epoch = conn.info.get("leader_epoch")
    return int(epoch) if epoch is not None else None


def move_job(conn: Connection, job_id: str, to: JobState, why: str | None, expect: Collection[JobState],
             now: float, **values: Any) -> JobState | None:
    """Move a job to `to` if it is in one of `expect`; returns the state it left (None: not moved).

    `values` are other columns written with the move (reason, exit code, slice). Raises
    IllegalTransition when some state of `expect` may not go to `to`.
    """
    moved = move_jobs(conn, [JobMove(job_id, to, why, tuple(expect), values)], now)
    return moved[0][1] if moved else None


def move_jobs(conn: Connection, moves: Iterable[JobMove], now: float) -> list[tuple[str, JobState]]:
    """Make many job moves in one go (a round places hundreds); returns (job, state it left) for each made."""
    moves = list(moves)
    for m in moves:
        for src in m.expect:
            check_job_move(m.job_id, src, m.to)
    if not moves:
        return []
    current = _current(conn, _jobs, [m.job_id for m in moves])
    asked: list[tuple[JobMove, JobState, str | None]] = []
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for m in moves:
        now_in = current.get(m.job_id)
        if now_in is None or now_in[0] not in m.expect:
            continue
        # compare-and-set on the state read: a move another transaction made meanwhile wins (on
        # PostgreSQL the UPDATE waits for that row and re-checks its WHERE; SQLite's writers are serial)
        asked.append((m, JobState(now_in[0]), now_in[1]))
        rows.append((m.job_id, now_in[0], {"state": m.to, "updated_at": now, **m.values}))
    made: list[tuple[str, JobState]] = []
    events = []
    for (m, src, slice_was), done in zip(asked, _cas_many(conn, _jobs, rows), strict=True):
        if done:
            events.append(_event(conn, "job", m.job_id, m.values.get("slice_id", slice_was), src, m.to, m.why, now))
            made.append((m.job_id, src))
    if events:
        conn.execute(insert(_events), events)
    return made


def move_queued(conn: Connection, to: JobState, why: dict[str, str], code: JobReason, now: float) -> list[str]:
    """Move queued jobs the controller itself sets aside to `to` (failed: unplaceable, over-limit; held:
    never-fits), each with its why and the reason `code`; those moved (a job placed or cancelled since is
    left alone)."""
    moves = [JobMove(j, to, w, (JobState.QUEUED,), {"reason": w, "reason_code": code}) for j, w in why.items()]
    return [j for j, _ in move_jobs(conn, moves, now)]


def move_slice(conn: Connection, slice_id: str, to: SliceState, why: str | None, expect: Collection[SliceState],
               now: float, **values: Any) -> SliceState | None:
    """Move a slice to `to` if it is in one of `expect`; returns the state it left (None: not moved)."""
    for src in expect:
        check_slice_move(slice_id, src, to)
    row = conn.execute(select(_slices.c.state, _slices.c.job_id).where(_slices.c.id == slice_id)).first()
    if row is None or row.state not in expect:
        return None
    if not _cas(conn, _slices, slice_id, row.state, {"state": to, "updated_at": now, **values}):
        return None
    conn.execute(insert(_events), [_event(conn, "slice", row.job_id, slice_id, row.state, to, why, now)])
    return SliceState(row.state)


# --- devices and links ---------------------------------------------------------------------------
def set_health(conn: Connection, device_ids: Iterable[str], to: Health, why: str, now: float) -> list[str]:
    """Move the devices' health to `to` (those already there stay, unrecorded); returns the devices moved."""
    return _move_column(conn, _devices, "health", sorted(set(device_ids)), to, check_health_move, why, now)


def set_drain(conn: Connection, device_ids: Iterable[str], to: Drain, why: str, now: float) -> list[str]:
    """Drain the devices, or return them to service; returns the devices moved."""
    return _move_column(conn, _devices, "drained", sorted(set(device_ids)), to, check_drain_move, why, now)


def set_links(conn: Connection, down: Iterable[str], why_down: str, why_up: str, now: float) -> list[str]:
    """Make the links in `down` down and every other link up (what the fabric reports, mirrored whole);
    returns the links moved."""
    down = set(down)
    state = {str(i): bool(up) for i, up in conn.execute(select(_links.c.id, _links.c.up))}
    going_down = sorted(i for i, up in state.items() if i in down and up)
    going_up = sorted(i for i, up in state.items() if i not in down and not up)
    return (_move_column(conn, _links, "up", going_down, LinkState.DOWN, check_link_move, why_down, now)
            + _move_column(conn, _links, "up", going_up, LinkState.UP, check_link_move, why_up, now))


#: A device's or a link's guarded state, as one of its enums.
Thing = Health | Drain | LinkState


def _stored(column: str, value: Thing) -> object:
    """How a guarded column stores its state (a device's drain and a link's state are booleans)."""
    return value is Drain.DRAINED if column == "drained" else value is LinkState.UP if column == "up" else value


def _read(column: str, stored: object) -> Thing:
    if column == "drained":
        return Drain.DRAINED if stored else Drain.IN_SERVICE
    if column == "up":
        return LinkState.UP if stored else LinkState.DOWN
    return Health(str(stored))


def _move_column(conn: Connection, table: Table, column: str, ids: list[str], to: Thing,
                 check: Callable[[str, Any, Any], None], why: str, now: float) -> list[str]:
    """The guarded move of one state column of devices or links: read, check each move against its
    table, compare-and-set on the state read, one event per move made."""
    subject = "device" if table is _devices else "link"
    col = table.c[column]
    moved: list[str] = []
    events = []
    for i in range(0, len(ids), CHUNK):
        chunk = ids[i:i + CHUNK]
        for ident, stored in conn.execute(select(table.c.id, col).where(table.c.id.in_(chunk))):
            src = _read(column, stored)
            if src is to:
                continue
            check(ident, src, to)
            result = conn.execute(update(table).where(table.c.id == ident, col == stored)
                                  .values({column: _stored(column, to)}))
            if result.rowcount:
                moved.append(str(ident))
                events.append(_event(conn, subject, None, None, src, to, why, now, target=str(ident)))
    if events:
        conn.execute(insert(_events), events)
    return moved


def hold_devices(conn: Connection, device_ids: Collection[str], slice_id: str) -> None:
    """The slice takes the devices: each must be free (a commit or a composition checked them under a
    lock); IllegalTransition names one another slice holds (the check and the write disagree: a bug)."""
    hold_devices_of(conn, {slice_id: device_ids})


def hold_devices_of(conn: Connection, held: Mapping[str, Collection[str]]) -> None:
    """`hold_devices` for many slices at once (a round commits thousands): one statement for them all
    (`_all_or_none`), or, when one device is not free, one per device up to the one that names it."""
    take = update(_devices).where(_devices.c.id == bindparam("d_id"), _devices.c.slice_id.is_(None)).values(
        slice_id=bindparam("d_slice"))
    rows = [{"d_id": device, "d_slice": slice_id} for slice_id, device_ids in held.items()
            for device in sorted(set(device_ids))]
    if _all_or_none(conn, take, rows):
        return
    for row in rows:
        if conn.execute(take, row).rowcount != 1:
            device, slice_id = row["d_id"], row["d_slice"]
            other = conn.execute(select(_devices.c.slice_id).where(_devices.c.id == device)).scalar()
            who = f"held by {other}" if other is not None else "held by another slice"
            raise IllegalTransition("device", device, who, f"held by {slice_id}")


def _all_or_none(conn: Connection, statement: Any, rows: list[dict[str, Any]]) -> bool:
    """Execute `statement` for every row in one go (a driver's executemany: a round's thousand moves cost
    a tenth of a second one statement at a time), if each row changes exactly one row of the table.
    Otherwise nothing of it stays (it ran in a savepoint) and False: the caller goes row by row, to
    know which. Also False, having done nothing, for fewer than two rows or a driver whose executemany
    does not count the rows it changed."""
    if len(rows) < 2 or not conn.dialect.supports_sane_multi_rowcount:
        return False
    savepoint = conn.begin_nested()
    if conn.execute(statement, rows).rowcount == len(rows):
        savepoint.commit()
        return True
    savepoint.rollback()
    return False


def release_devices(conn: Connection, slice_id: str, device_ids: Collection[str] | None = None) -> None:
    """The slice gives back its devices (all, or those named); a device another slice holds is untouched."""
    query = update(_devices).where(_devices.c.slice_id == slice_id)
    if device_ids is None:
        conn.execute(query.values(slice_id=None))
        return
    ids = sorted(set(device_ids))
    for i in range(0, len(ids), CHUNK):
        conn.execute(query.where(_devices.c.id.in_(ids[i:i + CHUNK])).values(slice_id=None))


def release_orphans(conn: Connection, live: set[str]) -> list[str]:
    """After a restart: free the devices held by slices that are gone (not in `live`); returns them."""
    held = conn.execute(select(_devices.c.id, _devices.c.slice_id).where(_devices.c.slice_id.is_not(None))).all()
    freed = [(str(d), str(s)) for d, s in held if s not in live]
    gone = sorted({holder for _, holder in freed})
    for i in range(0, len(gone), CHUNK):  # by holder: a device taken since by a live slice is not touched
        conn.execute(update(_devices).where(_devices.c.slice_id.in_(gone[i:i + CHUNK])).values(slice_id=None))
    return [d for d, _ in freed]


def thing_events(conn: Connection, subject: str, target: str, limit: int = 100) -> list[dict[str, Any]]:
    """A device's or a link's moves, newest first (at most `limit`)."""
    query = (select(_events).where(_events.c.subject == subject, _events.c.target == target)
             .order_by(_events.c.id.desc()).limit(limit))
    return [{"id": r.id, "at": r.at, "subject": r.subject, "target": r.target, "from": r.from_state,
             "to": r.to_state, "why": r.why} for r in conn.execute(query)]


def _cas(conn: Connection, table: Table, ident: str, src: str, values: dict[str, Any]) -> bool:
    """Write `values` if the row is still in state `src`; whether it was."""
    return _cas_many(conn, table, [(ident, src, values)])[0]


#: Job ids per `IN (...)` of a statement over many jobs.
_CHUNK = 500
#: The state and slice of the jobs named (an expanding IN: built and compiled once).
_NOTED = select(_jobs.c.id, _jobs.c.state, _jobs.c.slice_id).where(_jobs.c.id.in_(bindparam("ids", expanding=True)))


def _cas_statement(table: Table, columns: tuple[str, ...]) -> Any:
    """The compare-and-set UPDATE of `columns` with bound parameters: built once, it is compiled once
    (a statement built per row cost 0.27 ms of SQLAlchemy's construction and caching per job moved)."""
    return update(table).where(table.c.id == bindparam("cas_id"), table.c.state == bindparam("cas_src")).values(
        {c: bindparam(f"cas_{c}") for c in columns})


def _cas_params(ident: str, src: str, values: dict[str, Any]) -> dict[str, Any]:
    return {"cas_id": ident, "cas_src": src, **{f"cas_{c}": v for c, v in values.items()}}


def _cas_many(conn: Connection, table: Table, rows: list[tuple[str, str, dict[str, Any]]]) -> list[bool]:
    """`_cas` for each (id, state read, values) in order; whether each was made. The rows that write the
    same columns one after the other go as one statement when every one of them is still in its state
    (`_all_or_none`: a round's moves all are, unless a cancel came between the read and the write), else
    one by one, in the same order."""
    out: list[bool] = []
    for columns, run in groupby(rows, key=lambda row: tuple(sorted(row[2]))):
        group = list(run)
        statement = _cas_statement(table, columns)
        params = [_cas_params(ident, src, values) for ident, src, values in group]
        if _all_or_none(conn, statement, params):
            out += [True] * len(group)
        else:
            out += [bool(conn.execute(statement, p).rowcount) for p in params]
    return out


def note_job(conn: Connection, job_id: str, why: str, now: float) -> None:
    """Record something that happened to a job without moving it (a preempted job signalled in its
    grace period): an event from its state to the same state, with why."""
    note_jobs(conn, {job_id: why}, now)


def note_jobs(conn: Connection, notes: dict[str, str], now: float) -> None:
    """`note_job` for many jobs (job → why) in a few statements: a round notes each job it placed (which
    profile placed it), and a statement built per job cost the loop a tenth of its time at 1,000 jobs/s."""
    ids = list(notes)
    events: list[dict[str, Any]] = []
    for i in range(0, len(ids), _CHUNK):
        for job_id, state, slice_id in conn.execute(_NOTED, {"ids": ids[i:i + _CHUNK]}):
            events.append(_event(conn, "job", job_id, slice_id, state, state, notes[job_id], now))
    if events:
        conn.execute(insert(_events), events)


def new_jobs(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert submitted jobs (each `queued`). A job's creation is not a transition: its history begins
    with its row (`submitted_at`), which `job_events` shows as the first entry — a second row per
    submission cost the group writer a sixth of its throughput."""
    conn.execute(insert(_jobs), rows)


def new_slices(conn: Connection, rows: list[dict[str, Any]], now: float) -> None:
    """Insert slices a round decided (each `composing`) with their first event."""
    if not rows:
        return
    conn.execute(insert(_slices), rows)
    conn.execute(insert(_events), [_event(conn, "slice", r["job_id"], r["id"], None, SliceState.COMPOSING, "placed",
                                          now) for r in rows])


def _current(conn: Connection, table: Table, ids: list[str]) -> dict[str, tuple[str, str | None]]:
    """(state, slice id) of each row, read in chunks (a round may move thousands of jobs)."""
    out: dict[str, tuple[str, str | None]] = {}
    sid = table.c.slice_id if "slice_id" in table.c else table.c.id
    for i in range(0, len(ids), 500):
        query = select(table.c.id, table.c.state, sid).where(table.c.id.in_(ids[i:i + 500]))
        out.update((r[0], (r[1], r[2])) for r in conn.execute(query))
    return out


def job_events(conn: Connection, job_id: str, after: int | None = None, limit: int | None = None
               ) -> list[dict[str, Any]]:
    """The job's history, oldest first: its submission (id 0: a job's creation is not a transition, its row
    says when), then its own moves and its slices' moves — from event id `after` on, at most `limit`."""
    submitted = conn.execute(select(_jobs.c.submitted_at).where(_jobs.c.id == job_id)).scalar()
    if submitted is None:
        return []
    first = [] if after is not None and after >= 0 else [
        {"id": 0, "at": submitted, "subject": "job", "slice": None, "from": None, "to": JobState.QUEUED,
         "why": "submitted"}]
    query = select(_events).where(_events.c.job_id == job_id)
    if after is not None:
        query = query.where(_events.c.id > after)
    query = query.order_by(_events.c.id)
    if limit is not None:
        query = query.limit(max(0, limit - len(first)))
    return first[:limit] + [
        {"id": r.id, "at": r.at, "subject": r.subject, "slice": r.slice_id, "from": r.from_state, "to": r.to_state,
         "why": r.why}
        for r in conn.execute(query)
    ]


__all__ = ["WHY_MAX", "JobMove", "hold_devices", "hold_devices_of", "job_events", "leader_epoch", "move_job",
           "move_jobs", "move_queued", "move_slice", "new_jobs", "new_slices", "note_job", "note_jobs",
           "release_devices", "release_orphans", "set_drain", "set_health", "set_links", "thing_events"]

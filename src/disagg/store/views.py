"""The store's read side: named, read-only views of jobs, slices and the inventory, as the API shows them.

Every view is a method of the `Store`, opens one read transaction of its own and returns plain dicts (the
shapes of `disagg.api.schemas`), so nothing outside `store/` writes a query to show something. A view
that reads a slice's placement reads it as the typed `SlicePlacement`, never as a dict by hand.

Listings read columns, not ORM objects, where they read every device (52,500 devices as objects took
1.1 s), and count in SQL where the page shows only counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from disagg.model.allocation import node_allocation
from disagg.model.slices import SlicePlacement
from disagg.model.states import LIVE_SLICE_STATES, DeviceState, Health, JobState, LinkState
from disagg.store.base import StoreBase
from disagg.store.jobs import job_dict
from disagg.store.models import (
    DEVICE_FIELDS,
    DeviceFields,
    DeviceRow,
    JobRow,
    LinkRow,
    MachineRow,
    SliceRow,
    StepRow,
    device_state,
    device_state_of,
)
from disagg.store.snapshot import read_reach
from disagg.store.tokens import Principal

#: A job that waits to be placed (again): it shows no slice and no placement.
_WAITING = (JobState.QUEUED, JobState.HELD)
#: The live slice states as the plain strings stored in the column.
_LIVE = tuple(st.value for st in LIVE_SLICE_STATES)


# --- the shapes the API shows ------------------------------------------------------------------
def device_dict(r: DeviceFields, reachable: bool = True) -> dict[str, Any]:
    """A device as the API shows it; `reachable` is false while a link it sits behind is down."""
    return {
        "id": r.id,
        "kind": r.kind,
        "model": r.model,
        "location": r.location,
        "state": device_state(r, reachable),
        "slice": r.slice_id,
        "health": r.health,
        "drained": r.drained,
        "reachable": reachable,
    }


def slice_dict(r: SliceRow, steps: list[StepRow] | None = None) -> dict[str, Any]:
    """A slice as the API shows it: its stored slice machines as they are, and its steps if asked."""
    out: dict[str, Any] = {
        "id": r.id,
        "job": r.job_id,
        "attempt": r.attempt,
        "state": r.state,
        "outcome": r.outcome,
        "detail": r.detail,
        "machines": list(r.placement.get("machines", [])),
        "handle": r.handle,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
    }
    if steps is not None:
        out["steps"] = [
            {
                "op": st.op,
                "target": st.target,
                "status": st.status,
                "tries": st.tries,
                "started_at": st.started_at,
                "ended_at": st.ended_at,
                "error": st.error,
            }
            for st in steps
        ]
    return out


# --- jobs and slices ---------------------------------------------------------------------------
def _own_job(s: Session, job_id: str, who: Principal) -> JobRow | None:
    """The job if `who` may see it: its tenant's, or any for an admin (another tenant's is None,
    as an unknown one is, so the API answers both with the same 404)."""
    row = s.get(JobRow, job_id)
    if row is None or (not who.admin and row.tenant != who.tenant):
        return None
    return row


def _job_out(s: Session, row: JobRow) -> dict[str, Any]:
    out = job_dict(row)
    out["placement"] = None
    if row.state in _WAITING:  # re-queued or held: no placement (nor slice) until it is placed again
        out["slice"] = None
    elif row.slice_id is not None:
        sl = s.get(SliceRow, row.slice_id)
        if sl is not None:
            out["placement"] = [t.to_json() for t in SlicePlacement.from_json(sl.id, sl.placement).tasks]
    return out


def _steps(s: Session, slice_id: str) -> list[StepRow]:
    return list(s.scalars(select(StepRow).where(StepRow.slice_id == slice_id).order_by(StepRow.id)))


def live_placements(s: Session) -> list[SlicePlacement]:
    return [SlicePlacement.from_json(sid, data)
            for sid, data in s.execute(select(SliceRow.id, SliceRow.placement).where(SliceRow.state.in_(_LIVE)))]


# --- the inventory -----------------------------------------------------------------------------
def _machine_out(r: Any, slices: list[str], devs: list[DeviceFields], reachable: bool = True,
                 held: Iterable[tuple[float, float]] = ()) -> dict[str, Any]:
    """One machine or pool: unreachable while a down link cuts it off (nothing behind it can be used),
    failed for a pool whose devices all failed; attached while a live slice uses it or any of its devices."""
    states = [device_state(d) for d in devs]
    state = DeviceState.ATTACHED if slices or DeviceState.ATTACHED in states else DeviceState.FREE
    if states and all(st == DeviceState.FAILED for st in states) and r.kind == "pool":
        state = DeviceState.FAILED
    if not reachable:
        state = DeviceState.UNREACHABLE
    return {
        "id": r.name,
        "kind": r.kind,
        "location": r.rack,
        "state": state,
        "slice": slices[0] if slices else None,
        "slices": slices,
        "cpus": r.cpus,
        "memory_gb": r.memory_gb,
        "devices": [d.id for d in devs],
        "allocation": node_allocation(r.cpus, r.memory_gb, held,
                                      ((d, device_state(d), reachable) for d in devs)),
    }


#: A page's position: the sort key of its last item (what a cursor carries).
Key = list[Any]
#: A page: its items, and the key of the next page (None: it is the last one).
Page = tuple[list[dict[str, Any]], Key | None]


def _limited(query: Any, limit: int | None) -> Any:
    """The query with one row more than a page, to tell whether another page follows (None: every row)."""
    return query if limit is None else query.limit(limit + 1)


def _split_page(rows: list[Any], limit: int | None) -> tuple[bool, list[Any]]:
    """(whether another page follows, the page's rows)."""
    if limit is None:
        return False, rows
    return len(rows) > limit, rows[:limit]


def _newest_first(s: Session, q: Any, order: Any, ident: Any, after: Key | None, limit: int,
                  kind: Callable[[Any], Any]) -> tuple[list[Any], Key | None]:
    """One page of `q`'s rows, newest first by (`order`, `ident`), after the key `after` (keyset paging:
    a page stays right while rows come and go); the rows and the next page's key (None: the last page)."""
    if after is not None:
        at, key = kind(after[0]), str(after[1])
        q = q.where(or_(order < at, and_(order == at, ident < key)))
    rows = list(s.scalars(q.order_by(order.desc(), ident.desc()).limit(limit + 1)))
    more, rows = rows[limit:], rows[:limit]
    return rows, ([getattr(rows[-1], order.key), getattr(rows[-1], ident.key)] if more else None)


class ViewOps(StoreBase):
    """The named reads the API, the dashboard and the metrics show (a tenant sees only its own jobs)."""

    def job_visible(self, job_id: str, who: Principal) -> bool:
        """Whether `who` may see the job (it exists and is theirs, or `who` is an admin)."""
        with self.read() as s:
            return _own_job(s, job_id, who) is not None

    def job_view(self, job_id: str, who: Principal) -> dict[str, Any] | None:
        """A job with its placement (the tasks of its current slice), or None if `who` may not see it."""
        with self.read() as s:
            row = _own_job(s, job_id, who)
            out = None if row is None else _job_out(s, row)
        return None if out is None else self.with_times([out])[0]

    def with_times(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The jobs with their true times (`OperatorOps.job_times`: started, ended, waited, ran)."""
        times = self.job_times(jobs)  # type: ignore[attr-defined]
        return [{**j, **times[j["id"]]} for j in jobs]

    def jobs_list(self, who: Principal, state: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """`who`'s jobs (every tenant's for an admin), newest first, in `state` if given, at most `limit`."""
        return self.jobs_page(who, state, limit)[0]

    def jobs_page(self, who: Principal, state: str | None = None, limit: int = 100, after: Key | None = None
                  ) -> Page:
        """A page of `jobs_list` after the key `after` (a page's `next`): (jobs, the next page's key or None)."""
        with self.read() as s:
            q = select(JobRow)
            if not who.admin:
                q = q.where(JobRow.tenant == who.tenant)
            if state is not None:
                q = q.where(JobRow.state == state)
            rows, key = _newest_first(s, q, JobRow.seq, JobRow.id, after, limit, int)
            out = [_job_out(s, r) for r in rows]
        return self.with_times(out), key

    def slices_list(self, who: Principal, state: str | None = None, steps: bool = False, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """The slices of `who`'s jobs (all for an admin), newest first; `steps` adds their step records."""
        return self.slices_page(who, state, steps, limit)[0]

    def slices_page(self, who: Principal, state: str | None = None, steps: bool = False, limit: int = 100,
                    after: Key | None = None) -> Page:
        """A page of `slices_list` after the key `after`: (slices, the next page's key or None)."""
        with self.read() as s:
            q = select(SliceRow)
            if not who.admin:
                q = q.join(JobRow, JobRow.id == SliceRow.job_id).where(JobRow.tenant == who.tenant)
            if state is not None:
                q = q.where(SliceRow.state == state)
            rows, key = _newest_first(s, q, SliceRow.created_at, SliceRow.id, after, limit, float)
            return [slice_dict(r, _steps(s, r.id) if steps else None) for r in rows], key

    def slice_view(self, slice_id: str, who: Principal) -> dict[str, Any] | None:
        """One slice with its step records, if `who` may see it (its job's tenant, or an admin); else None,
        as for an unknown one."""
        with self.read() as s:
            row = s.get(SliceRow, slice_id)
            if row is None or (not who.admin and (row.job_id is None or _own_job(s, row.job_id, who) is None)):
                return None
            return slice_dict(row, _steps(s, row.id))

    def job_slices(self, job_id: str) -> list[dict[str, Any]]:
        """Every slice of a job (one per attempt), newest first, with its step records (the job page's
        timeline). The caller has checked that the job may be seen."""
        with self.read() as s:
            query = select(SliceRow).where(SliceRow.job_id == job_id).order_by(SliceRow.created_at.desc())
            return [slice_dict(r, _steps(s, r.id)) for r in s.scalars(query)]

    def live_slices_view(self) -> list[dict[str, Any]]:
        """The slices that hold resources (composing, running, tearing down), oldest first."""
        with self.read() as s:
            query = select(SliceRow).where(SliceRow.state.in_(_LIVE)).order_by(SliceRow.created_at)
            return [slice_dict(r) for r in s.scalars(query)]

    def devices_view(self) -> list[dict[str, Any]]:
        """Every device in inventory order; unreachable while a down link cuts its location off."""
        return self.devices_page(None, None)[0]

    def devices_page(self, limit: int | None = 100, after: Key | None = None) -> Page:
        """Devices in inventory order after the key `after`, at most `limit` (None: all)."""
        with self.read() as s:
            reach = read_reach(s.connection())
            q = select(*DEVICE_FIELDS, DeviceRow.position)
            if after is not None:
                q = q.where(DeviceRow.position > int(after[0]))
            rows = list(s.execute(_limited(q.order_by(DeviceRow.position), limit)))
            more, rows = _split_page(rows, limit)
            out = [device_dict(r, reachable=reach.reachable(r.location)) for r in rows]
            return out, ([rows[-1].position] if more else None)

    def links_view(self) -> list[dict[str, Any]]:
        """Links: bandwidth, up or down, and the load the live slices' remote devices put on them.

        The load is the policy's own accounting: each remote device of a live slice carries its
        placement's `network_gbps` on every link of its path (machine uplink, rack links, pool uplink).
        """
        return self.links_page(None, None)[0]

    def links_page(self, limit: int | None = 100, after: Key | None = None) -> Page:
        """`links_view` by link id after the key `after`, at most `limit` (None: all)."""
        with self.read() as s:
            load: dict[str, float] = {}
            users: dict[str, set[str]] = {}
            for placement in live_placements(s):
                for _, d in placement.devices():
                    for link in d.path:  # summed device by device, in path order: the same floats as ever
                        load[link] = load.get(link, 0.0) + d.network_gbps
                        users.setdefault(link, set()).add(placement.slice_id)
            q = select(LinkRow)
            if after is not None:
                q = q.where(LinkRow.id > str(after[0]))
            more, rows = _split_page(list(s.scalars(_limited(q.order_by(LinkRow.id), limit))), limit)
            return [
                {
                    "id": r.id,
                    "gbps": r.gbps,
                    "state": LinkState.UP if r.up else LinkState.DOWN,
                    "load_gbps": round(load.get(r.id, 0.0), 6),
                    "utilisation": round(load.get(r.id, 0.0) / r.gbps, 6) if r.gbps > 0 else 0.0,
                    "slices": sorted(users.get(r.id, ())),
                }
                for r in rows
            ], ([rows[-1].id] if more else None)

    def machines_view(self) -> list[dict[str, Any]]:
        """Machines and pools in inventory order, with their devices and the live slices on them."""
        return self.machines_page(None, None)[0]

    def machines_page(self, limit: int | None = 100, after: Key | None = None) -> Page:
        """`machines_view` after the key `after`, at most `limit` (None: all)."""
        with self.read() as s:
            nodes = select(MachineRow.name, MachineRow.kind, MachineRow.rack, MachineRow.cpus, MachineRow.memory_gb,
                           MachineRow.position)
            if after is not None:
                nodes = nodes.where(MachineRow.position > int(after[0]))
            more, rows = _split_page(list(s.execute(_limited(nodes.order_by(MachineRow.position), limit))), limit)
            names = {r.name for r in rows}
            holders: dict[str, list[str]] = {}
            held: dict[str, list[tuple[float, float]]] = {}  # host → (cpus, memory GB) of each slice machine
            for placement in live_placements(s):
                for m in placement.machines:
                    holders.setdefault(m.host, []).append(placement.slice_id)
                    held.setdefault(m.host, []).append((m.cpus, m.memory_gb))
            devs: dict[str, list[DeviceFields]] = {}
            dq = select(*DEVICE_FIELDS).order_by(DeviceRow.position)
            if limit is not None:
                dq = dq.where(DeviceRow.location.in_(names))
            for d in s.execute(dq):
                devs.setdefault(d.location, []).append(d)
            reach = read_reach(s.connection())
            out = [_machine_out(r, sorted(set(holders.get(r.name, []))), devs.get(r.name, []),
                                reach.reachable(r.name), held.get(r.name, ())) for r in rows]
            return out, ([rows[-1].position] if more else None)

    def machine_racks(self, names: Iterable[str]) -> dict[str, str]:
        """The rack of each named machine (names not in the inventory are left out)."""
        with self.read() as s:
            query = select(MachineRow.name, MachineRow.rack).where(MachineRow.name.in_(set(names)))
            return {str(name): str(rack) for name, rack in s.execute(query)}

    def attention_devices(self, limit: int) -> list[dict[str, Any]]:
        """The failed and the drained devices (those an operator has to look at), the first `limit`."""
        with self.read() as s:
            query = select(*DEVICE_FIELDS).where(or_(DeviceRow.health == Health.FAILED, DeviceRow.drained.is_(True)))
            reach = read_reach(s.connection())
            return [device_dict(r, reach.reachable(r.location))
                    for r in s.execute(query.order_by(DeviceRow.position).limit(limit))]


    # --- counts ------------------------------------------------------------------------------------

    def counts(self) -> dict[str, dict[str, int]]:
        """Jobs, slices and devices by state (for /metrics and the dashboard)."""
        with self.read() as s:
            jobs = {str(st): int(n) for st, n in s.execute(select(JobRow.state, func.count()).group_by(JobRow.state))}
            slices = {
                str(st): int(n) for st, n in s.execute(select(SliceRow.state, func.count()).group_by(SliceRow.state))
            }
        devices = {state: n for (state,), n in self.device_counts().items()}
        return {"jobs": jobs, "slices": slices, "devices": devices}

    def node_counts(self) -> dict[tuple[str, str], int]:
        """Machines and pools per (rack, kind): the dashboard's summary of a large inventory."""
        with self.read() as s:
            query = select(MachineRow.rack, MachineRow.kind, func.count()).group_by(MachineRow.rack, MachineRow.kind)
            return {(str(rack), str(kind)): int(n) for rack, kind, n in s.execute(query)}

    def device_counts(self, *by: str) -> dict[tuple[str, ...], int]:
        """Devices by their one-word state and by `by` ("kind", "model", "rack"), counted in SQL:
        loading every device row to count them took 0.9 s at 52,500 devices. Keys: (state, *by). While a
        link is down, by location too (what it cuts off is `unreachable`)."""
        attached = DeviceRow.slice_id.is_not(None)
        columns = {"kind": DeviceRow.kind, "model": DeviceRow.model, "rack": MachineRow.rack}
        extra = [columns[b] for b in by]
        out: dict[tuple[str, ...], int] = {}
        with self.read() as s:
            reach = read_reach(s.connection())
            where = [DeviceRow.location] if reach.behind else []
            query = select(DeviceRow.health, attached, DeviceRow.drained, *extra, *where, func.count()).group_by(
                DeviceRow.health, attached, DeviceRow.drained, *extra, *where)
            if "rack" in by:
                query = query.join(MachineRow, MachineRow.name == DeviceRow.location)
            for health, is_attached, drained, *keys, n in s.execute(query):
                reachable = reach.reachable(str(keys.pop())) if where else True
                key = (device_state_of(str(health), bool(is_attached), bool(drained), reachable), *map(str, keys))
                out[key] = out.get(key, 0) + int(n)
        return out


__all__ = ["Key", "Page", "ViewOps", "device_dict", "job_dict", "slice_dict"]

"""The store's tenant operations: an admin's overrides of the tenants spec, who holds what, the decayed
usage fair share reads, the queue per tenant, and preemptions in their grace period.

What a tenant holds is read from the live slices (their typed placements) and their jobs' tenants;
the decayed usage is the loop's (it writes it, the API process reads it). A preemption is a row per
slice from the round that chose it until the slice is gone: while it is there, the loop polls that
slice itself (`control.preemption`) and the round knows its resources are coming free.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, delete, func, insert, select

from disagg.model import Job
from disagg.model.states import LIVE_SLICE_STATES, Health, JobReason, JobState, SliceState
from disagg.model.tenancy import Holder
from disagg.placement.usage import placement_usage
from disagg.store.base import StoreBase
from disagg.store.jobs import model_job
from disagg.store.lifecycle import move_queued, note_job
from disagg.store.models import (
    DeviceRow,
    JobRow,
    MachineRow,
    PreemptionRow,
    SliceRow,
    TenantRow,
    TenantUsageRow,
    TokenRow,
)
from disagg.store.snapshot import holder, live_slices_placed

_jobs: Table = JobRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]
_tenants: Table = TenantRow.__table__  # type: ignore[assignment]
_usage: Table = TenantUsageRow.__table__  # type: ignore[assignment]
_preemptions: Table = PreemptionRow.__table__  # type: ignore[assignment]
_tokens: Table = TokenRow.__table__  # type: ignore[assignment]
_machines: Table = MachineRow.__table__  # type: ignore[assignment]
_devices: Table = DeviceRow.__table__  # type: ignore[assignment]
_LIVE_JOB = (JobState.COMPOSING, JobState.RUNNING)
#: How a composition's holder id begins (`snapshot.holder`).
COMPOSITION = "composition:"


def holdings_by_tenant(conn: Connection) -> dict[str, dict[str, float]]:
    """What each tenant's live slices hold, read on `conn` (a composition's tenant is its slice's own)."""
    placed = live_slices_placed(conn)
    jobs = [j for _, j, _ in placed if not j.startswith(COMPOSITION)]
    owners = {str(j): str(t) for j, t in conn.execute(select(_jobs.c.id, _jobs.c.tenant).where(_jobs.c.id.in_(jobs)))}
    if len(jobs) < len(placed):
        owners.update({holder(str(i), None): str(t) for i, t in conn.execute(
            select(_slices.c.id, _slices.c.tenant).where(_slices.c.job_id.is_(None),
                                                         _slices.c.state.in_(LIVE_SLICE_STATES)))})
    out: dict[str, dict[str, float]] = {}
    for _, job, p in placed:
        placement_usage(p, out.setdefault(str(owners.get(job, "?")), {}))
    return out


@dataclass(frozen=True)
class PreemptionRecord:
    """A slice being preempted, with where its slice stands now."""

    slice_id: str
    job_id: str
    tenant: str
    for_job: str
    for_tenant: str
    reclaims: dict[str, float]
    signalled_at: float
    deadline: float
    slice_state: SliceState | None
    handle: str | None


class TenantOps(StoreBase):
    """Tenants' overrides, holdings, usage history, queue and preemptions."""

    # --- the spec's overrides ---------------------------------------------------------------
    def tenant_overrides(self) -> dict[str, dict[str, Any]]:
        """name → the tenant's entry as an admin set it (`PUT /v1/tenants/{name}`), name included."""
        with self.read_core() as conn:
            return {str(n): {**dict(spec), "name": str(n)} for n, spec in conn.execute(select(_tenants.c.name,
                                                                                             _tenants.c.spec))}

    def put_tenant(self, name: str, spec: dict[str, Any]) -> None:
        """Set one tenant's entry (replacing an earlier override). `spec` was checked by the caller."""
        with self.write_core(urgent=True) as conn:
            conn.execute(delete(_tenants).where(_tenants.c.name == name))
            conn.execute(insert(_tenants), {"name": name, "spec": spec, "updated_at": time.time()})

    def tenant_names(self) -> set[str]:
        """Every tenant the store knows of: those with jobs, tokens or an override."""
        with self.read_core() as conn:
            names = {str(t) for (t,) in conn.execute(select(_jobs.c.tenant).distinct())}
            names |= {str(t) for (t,) in conn.execute(select(_tokens.c.tenant).where(_tokens.c.admin.is_(False))
                                                      .distinct())}
            names |= {str(t) for (t,) in conn.execute(select(_tenants.c.name))}
        return names

    # --- holdings -----------------------------------------------------------------------------
    def holders(self) -> dict[str, Holder]:
        """Every job whose slice holds resources, and every live composition (`composition:<slice>`, as the
        snapshot's allocations name it: a composition is held by its tenant like a job, and may be preempted
        when it borrows): its tenant, whether it may be preempted, when its slice was made, and whom it is
        being preempted for."""
        query = (select(_jobs.c.id, _jobs.c.tenant, _jobs.c.preemptible, _slices.c.created_at, _preemptions.c.for_job)
                 .join(_slices, _slices.c.id == _jobs.c.slice_id)
                 .outerjoin(_preemptions, _preemptions.c.slice_id == _slices.c.id)
                 .where(_jobs.c.state.in_(_LIVE_JOB), _slices.c.state.in_(LIVE_SLICE_STATES)))
        composed = (select(_slices.c.id, _slices.c.tenant, _slices.c.created_at, _preemptions.c.for_job)
                    .outerjoin(_preemptions, _preemptions.c.slice_id == _slices.c.id)
                    .where(_slices.c.job_id.is_(None), _slices.c.state.in_(LIVE_SLICE_STATES)))
        with self.read_core() as conn:
            out = {str(j): Holder(str(t), p is not False, float(c), None if f is None else str(f))
                   for j, t, p, c, f in conn.execute(query)}
            out.update({holder(str(i), None): Holder(str(t or "?"), True, float(c), None if f is None else str(f))
                        for i, t, c, f in conn.execute(composed)})
        return out

    def tenant_holdings(self) -> dict[str, dict[str, float]]:
        """What each tenant's live slices hold (its jobs' and its compositions'): cpus, memory, devices by
        kind, remote bandwidth."""
        with self.read_core() as conn:
            return holdings_by_tenant(conn)

    def capacity(self) -> dict[str, float]:
        """What the cluster has of each resource (as `placement.usage.capacity` counts it), summed in SQL:
        a scrape or a view need not read every device."""
        m = _machines.c
        with self.read_core() as conn:
            sums = select(func.sum(m.cpus), func.sum(m.memory_gb), func.sum(m.uplink_gbps)).where(m.kind == "machine")
            cpus, memory, uplinks = conn.execute(sums).one()
            kinds = conn.execute(select(_devices.c.kind, func.count()).where(_devices.c.health == Health.HEALTHY)
                                 .group_by(_devices.c.kind)).all()
        out = {"cpus": float(cpus or 0.0), "memory_gb": float(memory or 0.0), "network_gbps": float(uplinks or 0.0)}
        out.update({str(k): float(n) for k, n in kinds})
        return out

    def tenant_counts(self) -> dict[str, dict[str, int]]:
        """tenant → {queued, composing, running, ...}: its jobs by state (final states left out)."""
        query = (select(_jobs.c.tenant, _jobs.c.state, func.count())
                 .where(_jobs.c.state.in_((JobState.QUEUED, *_LIVE_JOB))).group_by(_jobs.c.tenant, _jobs.c.state))
        out: dict[str, dict[str, int]] = {}
        with self.read_core() as conn:
            for tenant, state, n in conn.execute(query):
                out.setdefault(str(tenant), {})[str(state)] = int(n)
        return out

    # --- the queue, per tenant ----------------------------------------------------------------
    def queued_by_tenant(self, window: int) -> list[Job]:
        """The `window` oldest queued jobs of each tenant, oldest first: a round with fair share sees
        every tenant's head, however long another tenant's burst."""
        ranked = select(_jobs, func.row_number().over(partition_by=_jobs.c.tenant, order_by=_jobs.c.seq)
                        .label("rank")).where(_jobs.c.state == JobState.QUEUED).subquery()
        query = select(ranked).where(ranked.c.rank <= window).order_by(ranked.c.seq)
        with self.read_core() as conn:
            return [model_job(r) for r in conn.execute(query)]

    def queued_of(self, tenant: str) -> list[Job]:
        """Every queued job of `tenant`, oldest first (a lowered limit is checked against them all)."""
        query = select(_jobs).where(_jobs.c.state == JobState.QUEUED, _jobs.c.tenant == tenant).order_by(_jobs.c.seq)
        with self.read_core() as conn:
            return [model_job(r) for r in conn.execute(query)]

    def fail_beyond_limit(self, why: dict[str, str]) -> list[str]:
        """Fail queued jobs whose request is above what their tenant may ever hold (job → why, reason
        `over-limit`); those moved (a job placed or cancelled since is left alone)."""
        if not why:
            return []
        with self.write_core(urgent=True) as conn:
            return move_queued(conn, JobState.FAILED, why, JobReason.OVER_LIMIT, time.time())

    # --- decayed usage --------------------------------------------------------------------------
    def load_usage(self) -> dict[str, dict[str, float]]:
        """Each tenant's decayed usage as the loop last wrote it."""
        with self.read_core() as conn:
            return {str(t): {str(k): float(v) for k, v in dict(u).items()}
                    for t, u in conn.execute(select(_usage.c.tenant, _usage.c.usage))}

    def save_usage(self, history: dict[str, dict[str, float]]) -> None:
        """Replace the decayed usage with the loop's."""
        now = time.time()
        with self.write_core() as conn:
            conn.execute(delete(_usage))
            if history:
                conn.execute(insert(_usage), [{"tenant": t, "usage": dict(u), "updated_at": now}
                                              for t, u in history.items()])

    # --- preemptions ----------------------------------------------------------------------------
    def record_preemption(self, slice_id: str, job_id: str, tenant: str, for_job: str, for_tenant: str,
                          reclaims: dict[str, float], why: str, grace_s: float) -> bool:
        """Note that a running slice (or a composed composition: `job_id` is its holder id) is being
        preempted (its job's event says why); False when it is already being preempted, or no longer
        running (composed)."""
        now = time.time()
        with self.write_core() as conn:
            state = conn.execute(select(_slices.c.state).where(_slices.c.id == slice_id)).scalar()
            known = conn.execute(select(_preemptions.c.slice_id).where(_preemptions.c.slice_id == slice_id)).first()
            composition = job_id.startswith(COMPOSITION)
            if state != (SliceState.COMPOSED if composition else SliceState.RUNNING) or known is not None:
                return False
            conn.execute(insert(_preemptions), {
                "slice_id": slice_id, "job_id": job_id, "tenant": tenant, "for_job": for_job,
                "for_tenant": for_tenant, "reclaims": reclaims, "signalled_at": now, "deadline": now + grace_s})
            if not composition:
                note_job(conn, job_id, why, now)
        return True

    def preemptions(self) -> list[PreemptionRecord]:
        """Every slice being preempted, with its slice's state and handle now."""
        p = _preemptions.c
        query = (select(p.slice_id, p.job_id, p.tenant, p.for_job, p.for_tenant, p.reclaims, p.signalled_at,
                        p.deadline, _slices.c.state, _slices.c.handle)
                 .outerjoin(_slices, _slices.c.id == p.slice_id))
        with self.read_core() as conn:
            return [PreemptionRecord(str(s), str(j), str(t), str(f), str(ft), dict(r), float(at), float(dl),
                                     None if st is None else SliceState(st), h)
                    for s, j, t, f, ft, r, at, dl, st, h in conn.execute(query)]

    def drop_preemption(self, slice_id: str) -> None:
        with self.write_core() as conn:
            conn.execute(delete(_preemptions).where(_preemptions.c.slice_id == slice_id))

    def running_slice_of(self, job_id: str) -> tuple[str, str | None] | None:
        """(slice, engine handle) of the job's running slice, if it has one."""
        query = (select(_slices.c.id, _slices.c.handle).join(_jobs, _jobs.c.slice_id == _slices.c.id)
                 .where(_jobs.c.id == job_id, _slices.c.state == SliceState.RUNNING))
        with self.read_core() as conn:
            row = conn.execute(query).first()
        return None if row is None else (str(row[0]), row[1])


__all__ = ["COMPOSITION", "PreemptionRecord", "TenantOps", "holdings_by_tenant"]

"""History: the controller's numbers over time, sampled into the store and read back in buckets.

The scheduling loop (`disagg.control.history.HistorySampler`) writes one sample every few seconds —
queue length, jobs running, devices in use by kind, the load the live slices put on each link, rounds
per minute and their mean time — and drops samples older than the retention window. The dashboard's
charts and `GET /v1/history?from=&to=&step=` read them averaged over buckets of `step` seconds.

A sample is one row with a JSON document: its keys may grow without a migration, and a link that
carries nothing is simply absent (at 12,500 machines a row per link per sample would be 12,500 rows
every 5 s).
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import JSON, Float, Integer, delete, func, insert, select
from sqlalchemy.orm import Mapped, mapped_column

from disagg.model.states import Health, JobState
from disagg.store.base import StoreBase
from disagg.store.models import Base, DeviceRow, JobRow, LeaseRow, LinkRow
from disagg.store.views import live_placements

#: The numbers a sample holds (scalars) and the ones that map a name to a number (per kind, per link).
SCALARS = ("queue_length", "jobs_running", "rounds_per_min", "round_s", "link_utilisation_max")
MAPS = ("devices_in_use", "devices_total", "link_load_gbps")
#: At most this many buckets in one answer (a chart is a few hundred pixels wide).
MAX_POINTS = 2000


class HistoryRow(Base):
    """One sample of the controller's numbers (`data`: the keys of SCALARS and MAPS)."""

    __tablename__ = "history"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


def bucket(samples: list[tuple[float, dict[str, Any]]], start: float, end: float, step: float
           ) -> list[dict[str, Any]]:
    """Average the samples in [start, end) over buckets of `step` seconds; empty buckets are left out.

    A scalar is the mean of the samples that have it (a round time exists only where rounds ran); a
    mapping's value is the mean per key over the bucket's samples, a missing key counting as 0 (a link
    absent from a sample carried nothing)."""
    groups: dict[int, list[dict[str, Any]]] = {}
    if end <= start or step <= 0:
        return []
    for at, data in samples:
        if start <= at < end:
            groups.setdefault(int((at - start) // step), []).append(data)
    points = []
    for index in sorted(groups):
        group = groups[index]
        point: dict[str, Any] = {"at": start + index * step, "samples": len(group)}
        for key in SCALARS:
            values = [float(d[key]) for d in group if d.get(key) is not None]
            point[key] = sum(values) / len(values) if values else None
        for key in MAPS:
            names = sorted({name for d in group for name in d.get(key, {})})
            point[key] = {n: sum(float(d.get(key, {}).get(n, 0.0)) for d in group) / len(group) for n in names}
        points.append(point)
    return points


def buckets_needed(start: float, end: float, step: float) -> int:
    """How many buckets [start, end) in steps of `step` makes (the API refuses more than MAX_POINTS)."""
    return math.ceil((end - start) / step)


class HistoryOps(StoreBase):
    """Write samples (the loop), drop old ones, read them back in buckets (the API, the dashboard)."""

    def current_numbers(self) -> dict[str, Any]:
        """What a sample holds that the store knows, read in one transaction: jobs queued and running,
        devices in use and in all per kind, the load the live slices put on each link (Gbit/s), and what
        the markers read (broken devices and links, the lease's epoch)."""
        by_state = select(JobRow.state, func.count()).where(JobRow.state.in_((JobState.QUEUED, JobState.RUNNING)))
        by_kind = select(DeviceRow.kind, func.count()).group_by(DeviceRow.kind)
        with self.read() as s:
            jobs = {str(st): int(n) for st, n in s.execute(by_state.group_by(JobRow.state))}
            total = {str(k): int(n) for k, n in s.execute(by_kind)}
            used = {str(k): int(n) for k, n in s.execute(by_kind.where(DeviceRow.slice_id.is_not(None)))}
            failed = {str(k): int(n) for k, n in s.execute(by_kind.where(DeviceRow.health == Health.FAILED))}
            down = int(s.execute(select(func.count()).select_from(LinkRow).where(LinkRow.up.is_(False))).scalar_one())
            epoch = s.execute(select(LeaseRow.epoch).where(LeaseRow.id == 1)).scalar()
            load: dict[str, float] = {}
            for placement in live_placements(s):
                for _, d in placement.devices():
                    for link in d.path:
                        load[link] = load.get(link, 0.0) + d.network_gbps
            links = select(LinkRow.id, LinkRow.gbps).where(LinkRow.id.in_(list(load)))
            gbps = {str(k): float(g) for k, g in s.execute(links)}
        utilisation = [load[k] / gbps[k] for k in load if gbps.get(k)]
        return {
            "queue_length": int(jobs.get(JobState.QUEUED, 0)),
            "jobs_running": int(jobs.get(JobState.RUNNING, 0)),
            "devices_in_use": {str(k): int(used.get(k, 0)) for k in sorted(total)},
            "devices_total": {str(k): int(n) for k, n in sorted(total.items())},
            "link_load_gbps": {k: round(v, 6) for k, v in sorted(load.items()) if v > 0},
            "link_utilisation_max": round(max(utilisation, default=0.0), 6),
            # not in the API's points: the dashboard's fault and repair markers read them (`history_samples`)
            "devices_failed": failed,
            "links_down": down,
            # the lease's epoch: it rises at every takeover (another replica, or a restart): a failover marker
            "epoch": int(epoch or 0),
        }

    def record_history(self, at: float, data: dict[str, Any], keep_after: float | None = None) -> None:
        """Store one sample taken at `at`; with `keep_after`, drop the samples older than it (retention)."""
        with self.write_core() as conn:
            conn.execute(insert(HistoryRow), [{"at": at, "data": data}])
            if keep_after is not None:
                conn.execute(delete(HistoryRow).where(HistoryRow.at < keep_after))

    def history(self, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """The samples in [start, end) averaged over buckets of `step` seconds, oldest first."""
        query = (select(HistoryRow.at, HistoryRow.data).where(HistoryRow.at >= start, HistoryRow.at < end)
                 .order_by(HistoryRow.at))
        with self.read_core() as conn:
            samples = [(float(at), dict(data)) for at, data in conn.execute(query)]
        return bucket(samples, start, end, step)

    def history_samples(self, start: float, end: float) -> list[tuple[float, dict[str, Any]]]:
        """The samples in [start, end) as they were taken, oldest first (the dashboard buckets them itself:
        counts by their largest value, never averaged into fractions)."""
        query = (select(HistoryRow.at, HistoryRow.data).where(HistoryRow.at >= start, HistoryRow.at < end)
                 .order_by(HistoryRow.at))
        with self.read_core() as conn:
            return [(float(at), dict(data)) for at, data in conn.execute(query)]

    def history_span(self) -> tuple[float, float] | None:
        """The times of the oldest and the newest sample kept (None: none yet)."""
        with self.read_core() as conn:
            first, last = conn.execute(select(func.min(HistoryRow.at), func.max(HistoryRow.at))).one()
        return None if first is None else (float(first), float(last))


__all__ = ["MAPS", "MAX_POINTS", "SCALARS", "HistoryOps", "HistoryRow", "bucket", "buckets_needed"]

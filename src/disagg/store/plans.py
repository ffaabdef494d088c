"""Committing a round's plan (Nomad's SubmitPlan): the policy decided on a snapshot; this applies it.

One transaction reads the room that is really left now (machines' cpus and memory after the live
slices, the granted devices — read and locked — and the links' bandwidth after the live slices'
traffic), checks every placement with the pure `placement.commit.over_commit` in queue order, and
for each that still fits creates its slice and moves its job to `composing`. A placement that no
longer fits (a device failed, another process took it since the snapshot) is not applied: its job
stays queued and the caller hears the conflict, to refresh its snapshot and plan again. Jobs left
waiting get their wait counter W raised and the policy's reason stored, one UPDATE per distinct
reason.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Table, select, update

from disagg.model import SlicePlacement
from disagg.model.slices import PlacedDevice, PlacedTask
from disagg.model.states import Health, JobState, SliceState
from disagg.placement.commit import RoomLedger, over_commit
from disagg.placement.decisions import Decisions, JobPlacement
from disagg.store.base import StoreBase
from disagg.store.jobs import new_id
from disagg.store.lifecycle import JobMove, hold_devices_of, move_jobs, new_slices
from disagg.store.models import DeviceRow, JobRow, SliceRow
from disagg.store.snapshot import Inventory, LiveUse, current_inventory, down_links, live_use, remember_placed

_jobs: Table = JobRow.__table__  # type: ignore[assignment]
_devices: Table = DeviceRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]


@dataclass
class CommitResult:
    """What a commit did: the jobs placed (with their new slices) and those whose placement no longer fit."""

    placed: list[tuple[str, str]] = field(default_factory=list)
    conflicts: list[tuple[str, str]] = field(default_factory=list)


def slice_placement(slice_id: str, p: JobPlacement) -> SlicePlacement:
    """A policy's placement of one job as the typed value its slice carries."""
    return SlicePlacement(slice_id, tuple(
        PlacedTask(t.task, t.machine, t.cpus, t.memory_gb,
                   tuple(PlacedDevice(g.id, g.kind, g.remote, g.location, tuple(g.path), g.network_gbps)
                         for g in t.devices))
        for t in p.tasks))


class PlanOps(StoreBase):
    """The commit half of plan / commit."""

    def commit_placements(self, plan: Decisions, considered: Iterable[str], count_wait: bool = True) -> CommitResult:
        """Apply the round's plan in one transaction that re-checks the invariants (module docstring).

        `considered`: every job the round looked at; those the plan neither placed nor explained still
        waited a round. `count_wait`: raise W for the jobs left waiting (False when re-committing a
        re-plan of this round's conflicts, whose jobs were counted already).
        """
        now = time.time()
        result = CommitResult()
        with self.write_core() as conn:
            ledger = _ledger(conn, plan)
            considered = list(considered)
            attempts = dict(conn.execute(select(_jobs.c.id, _jobs.c.attempts).where(
                _jobs.c.id.in_(considered), _jobs.c.state == JobState.QUEUED)).all()) if considered else {}
            waits: dict[tuple[str | None, str | None], list[str]] = defaultdict(list)
            placed = self._place(conn, plan, ledger, attempts, result, waits, now)
            decided = {p.job for p in plan.placed} | {u.job for u in plan.unplaced}
            for u in plan.unplaced:
                if u.job in attempts:
                    waits[(u.message, str(u.reason))].append(u.job)
            waits[(None, None)] += [j for j in considered if j not in decided and j in attempts]
            _note_waits(conn, waits, count_wait, now)
        remember_placed((self.engine, self.read_engine), placed)
        return result

    @staticmethod
    def _place(conn: Connection, plan: Decisions, ledger: CommitRoom, attempts: dict[str, int],
               result: CommitResult, waits: dict[tuple[str | None, str | None], list[str]], now: float
               ) -> dict[str, SlicePlacement]:
        """Create the slices of the placements that still fit; note the rest as conflicts. Returns the new
        slices' placements, by slice."""
        slices: list[dict[str, Any]] = []
        placed: dict[str, SlicePlacement] = {}
        held: dict[str, list[str]] = {}
        moves: list[JobMove] = []
        for p in plan.placed:
            if p.job not in attempts:
                continue  # cancelled (or moved by the other process) since the snapshot
            problem = over_commit(p, ledger)
            if problem:
                result.conflicts.append((p.job, problem))
                waits[(f"placement conflict: {problem}", "contention")].append(p.job)
                continue
            ledger.take(p)
            slice_id = new_id("s")
            attempt = attempts[p.job] + 1
            placement = placed[slice_id] = slice_placement(slice_id, p)
            held[slice_id] = [d.id for _, d in placement.devices()]
            slices.append({"id": slice_id, "job_id": p.job, "attempt": attempt, "state": SliceState.COMPOSING,
                           "outcome": None, "detail": None, "placement": placement.to_json(),
                           "handle": None, "created_at": now, "updated_at": now})
            moves.append(JobMove(p.job, JobState.COMPOSING, f"placed on slice {slice_id}", (JobState.QUEUED,),
                                 {"slice_id": slice_id, "attempts": attempt, "reason": None, "reason_code": None}))
            result.placed.append((p.job, slice_id))
        new_slices(conn, slices, now)
        move_jobs(conn, moves, now)
        hold_devices_of(conn, held)
        return placed


class CommitRoom(RoomLedger):
    """The room a commit checks its placements against: a `RoomLedger` (what it takes is taken as a
    ledger takes it) whose machines and links are filled in when first asked, from the inventory less
    what the live slices hold (`snapshot.LiveUse`, kept with the live set): only those the placements
    name, not all 12,500 (and their every live slice) each commit; the granted devices' problems and
    the down links as read."""

    def __init__(self, inventory: Inventory, use: LiveUse, devices: dict[str, str | None], down: set[str]) -> None:
        super().__init__({}, {}, devices, {}, down)
        self._size, self._links, self._use = inventory.machine_size, inventory.link_gbps, use

    def cpus_left(self, machine: str) -> float | None:
        if machine not in self.cpus:
            size = self._size.get(machine)
            if size is None:
                return None
            self.cpus[machine] = size[0] - self._use.cpu.get(machine, 0.0)
            self.memory[machine] = size[1] - self._use.memory.get(machine, 0.0)
        return self.cpus[machine]

    def memory_left(self, machine: str) -> float:
        self.cpus_left(machine)
        return self.memory[machine]

    def link_left(self, link: str) -> float:
        if link not in self.bandwidth:
            gbps = self._links.get(link)
            if gbps is None:
                return math.inf  # (not metered: left out of `bandwidth`, as the ledger reads it)
            self.bandwidth[link] = gbps - self._use.links.get(link, 0.0)
        return self.bandwidth[link]

    def take(self, p: JobPlacement) -> None:
        """The ledger's take, once what it subtracts from is filled in (`over_commit` asked it already)."""
        for t in p.tasks:
            self.cpus_left(t.machine)
            for g in t.devices:
                for lk in g.path:
                    self.link_left(lk)
        super().take(p)


def _ledger(conn: Connection, plan: Decisions) -> CommitRoom:
    """The room left now: cpus/memory and links' bandwidth after the live slices (`live_use`: on SQLite
    kept with the live set, moved by the slices changed since the last read — the transaction's first
    statement, so it has written nothing yet), the granted devices (read and locked: reading every
    device row took 0.8 s a round at 52,500 devices), the down links."""
    use, inventory = live_use(conn), current_inventory(conn)
    granted = sorted({g.id for p in plan.placed for t in p.tasks for g in t.devices})
    devices: dict[str, str | None] = {}
    for i in range(0, len(granted), 500):
        chunk = (select(_devices.c.id, _devices.c.health, _devices.c.drained, _devices.c.slice_id)
                 .where(_devices.c.id.in_(granted[i:i + 500])).with_for_update())
        for dev_id, health, drained, holder in conn.execute(chunk):
            devices[dev_id] = ("is already held" if holder is not None else
                               "is failed" if health != Health.HEALTHY else "is drained" if drained else None)
    return CommitRoom(inventory, use, devices, set(down_links(conn)))


def _note_waits(conn: Connection, waits: dict[tuple[str | None, str | None], list[str]], count_wait: bool,
                now: float) -> None:
    """One UPDATE per distinct reason (rounds leave many jobs waiting for the same reason)."""
    for (message, code), ids in waits.items():
        values: dict[str, Any] = {"wait_rounds": _jobs.c.wait_rounds + 1} if count_wait else {}
        if message is not None:
            values.update(reason=message, reason_code=code, updated_at=now)
        if values and ids:
            for i in range(0, len(ids), 500):
                conn.execute(update(_jobs).where(_jobs.c.id.in_(ids[i:i + 500]), _jobs.c.state == JobState.QUEUED)
                             .values(**values))


__all__ = ["CommitResult", "CommitRoom", "PlanOps", "slice_placement"]

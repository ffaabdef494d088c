"""A waiting job's reason names the down links that keep what it asks for out of reach.

The policies count only what they may use: a device or a machine behind a down link is not offered
(`model.cluster.Reach`), so a job needing NVMe while the NVMe box's uplink is down would read "needs
2 nvme; 0 free" — true, but silent on why. After a round, each job left waiting for devices, cpus or
bandwidth gets the cut-off part of what it asks for named, with the link: "…; out of reach: 4 nvme
behind down link up:iobox1". Pure: the snapshot and the round's decisions in, decisions out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from disagg.model import Cluster, Job
from disagg.model.states import DEVICE_DRAINED, DEVICE_FAILED
from disagg.placement.decisions import Decisions, Reason, Unplaced

#: The reasons that are about room (a job waiting for its quota or behind the FIFO head is not told).
ROOM_REASONS = frozenset({Reason.NO_DEVICES, Reason.NO_CAPACITY, Reason.NO_BANDWIDTH, Reason.CONTENTION})


def name_cut_off(decisions: Decisions, snapshot: Cluster, jobs: Sequence[Job]) -> Decisions:
    """The decisions with each waiting job's reason naming what a down link cuts off of what it asks."""
    behind = snapshot.reach.behind
    if not behind or not decisions.unplaced:
        return decisions
    devices: Counter[tuple[str, str, str]] = Counter()  # (kind, model, link) of usable devices cut off
    for d in snapshot.devices:
        link = behind.get(d.location)
        if link is not None and d.health not in (DEVICE_FAILED, DEVICE_DRAINED):
            devices[(d.kind, d.model, link)] += 1
    machines = Counter(behind[m.name] for m in snapshot.machines if m.name in behind)
    by_name = {j.name: j for j in jobs}
    out = []
    for u in decisions.unplaced:
        job = by_name.get(u.job)
        note = (_note(job, devices, machines if u.reason is Reason.NO_CAPACITY else Counter())
                if job is not None and u.reason in ROOM_REASONS else "")
        out.append(Unplaced(u.job, u.reason, f"{u.message}; out of reach: {note}") if note else u)
    return replace(decisions, unplaced=tuple(out))


def _note(job: Job, devices: Counter[tuple[str, str, str]], machines: Counter[str]) -> str:
    """What of the job's ask sits behind down links, e.g. "4 nvme behind down link up:iobox1"."""
    parts = []
    t = job.tasks
    for kind in t.kinds:
        model = t.models.get(kind)
        cut: Counter[str] = Counter()
        for (k, m, link), n in devices.items():
            if k == kind and (model is None or m == model):
                cut[link] += n
        parts += [f"{n} {kind} behind down link {link}" for link, n in sorted(cut.items())]
    parts += [f"{n} machine(s) behind down link {link}" for link, n in sorted(machines.items())]
    return ", ".join(parts)


__all__ = ["ROOM_REASONS", "name_cut_off"]

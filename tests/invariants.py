"""Checks every policy's decisions must pass: nothing over-committed, no device twice, gangs whole."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from disagg.model import Cluster, Job
from disagg.placement import Decisions

EPS = 1e-6


def check_decisions(cluster: Cluster, queue: Sequence[Job], decisions: Decisions, server_centric: bool = False) -> None:
    jobs = {j.name: j for j in queue}
    placed = [p.job for p in decisions.placed]
    unplaced = [u.job for u in decisions.unplaced]
    # Every job is decided exactly once.
    assert sorted(placed + unplaced) == sorted(jobs), "each job must be placed or explained exactly once"
    for u in decisions.unplaced:
        assert u.message.strip(), f"{u.job}: an unplaced job needs a reason"
    cpu: dict[str, float] = defaultdict(float)
    mem: dict[str, float] = defaultdict(float)
    link: dict[str, float] = defaultdict(float)
    held = {d for a in cluster.allocations for d in a.devices}
    by_id_all = cluster.device_by_id
    for a in cluster.allocations:
        cpu[a.machine] += a.cpus
        mem[a.machine] += a.memory_gb
        if a.network_gbps:
            link[cluster.uplink(a.machine)] += a.network_gbps
            remote = [by_id_all[d].location for d in a.devices if by_id_all[d].location != a.machine]
            for loc in remote:
                for lk in cluster.path(a.machine, loc)[1:]:
                    link[lk] += a.network_gbps / len(remote)
    seen: set[str] = set()
    added_links: set[str] = set()
    by_id = cluster.device_by_id
    for p in decisions.placed:
        job = jobs[p.job]
        t = job.tasks
        # Gang: all tasks, each with all its devices.
        assert len(p.tasks) == t.count, f"{p.job}: {len(p.tasks)} of {t.count} tasks placed"
        for task in p.tasks:
            cpu[task.machine] += t.cpus
            mem[task.machine] += t.memory_gb
            kinds: dict[str, int] = defaultdict(int)
            for d in task.devices:
                assert d.id in by_id, f"{d.id} does not exist"
                dev = by_id[d.id]
                assert d.id not in seen, f"{d.id} given twice"
                assert d.id not in held, f"{d.id} is already held by a running job"
                assert dev.health == "healthy", f"{d.id} is not healthy"
                assert dev.kind == d.kind
                if t.models.get(d.kind):
                    assert dev.model == t.models[d.kind], f"{d.id} is a {dev.model}, not {t.models[d.kind]}"
                seen.add(d.id)
                kinds[d.kind] += 1
                assert d.remote == (dev.location != task.machine), f"{d.id}: remote flag wrong"
                if server_centric:
                    assert not d.remote, f"{d.id}: server-centric policy gave a remote device"
                if d.remote:
                    path = cluster.path(task.machine, dev.location)
                    assert tuple(d.path) == path, f"{d.id}: path {d.path} != {path}"
                    for lk in path:
                        link[lk] += d.network_gbps
                        added_links.add(lk)
            assert dict(kinds) == {k: t.wants(k) for k in t.kinds}, f"{task.task}: devices {dict(kinds)}"
    for m in cluster.machines:
        assert cpu[m.name] <= m.cpus + EPS, f"{m.name}: cpus over-committed ({cpu[m.name]} > {m.cpus})"
        assert mem[m.name] <= m.memory_gb + EPS, f"{m.name}: memory over-committed"
    caps = cluster.link_by_id
    for lk, used in link.items():
        # Warm traffic alone may already exceed a link; what policies add must not push it further.
        if lk in added_links:
            assert used <= caps[lk].gbps + EPS, f"link {lk} over-committed: {used} > {caps[lk].gbps}"

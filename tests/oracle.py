"""An independent oracle for the liveness properties: can a job be placed on an idle cluster at all?

Written apart from the policies (no placement code), as a small integer program solved by OR-Tools'
CP-SAT: every task on one machine with its cpus and memory, every device it wants from a location
with a free one (its own machine only, for a server-centric policy), and each link's bandwidth enough
for the remote devices whose paths cross it (a location's uplink carries the traffic of every path
that starts or ends there; across racks, both racks' uplinks too).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from disagg.model import Cluster, Job
from disagg.placement.cost import profile_of, remote_gbps

#: Integer scale for cpus, memory and bandwidth (the policies' own slack is 1e-9).
SCALE = 1_000_000


def fits_idle(cluster: Cluster, job: Job, server_centric: bool) -> bool:
    """Whether the job could be placed on `cluster` with nothing running and nothing else waiting."""
    t = job.tasks
    machines = cluster.machines
    locations = [m.name for m in machines] + [p.name for p in cluster.pools]
    rack = {m.name: m.rack for m in machines} | {p.name: p.rack for p in cluster.pools}
    uplink = {m.name: m.uplink_gbps for m in machines} | {p.name: p.uplink_gbps for p in cluster.pools}
    gbps = round(remote_gbps(job, profile_of(job)) * SCALE)
    free = {(k, loc): sum(1 for d in cluster.devices if d.kind == k and d.location == loc and d.health == "healthy"
                          and t.models.get(k) in (None, d.model))
            for k in t.kinds for loc in locations}
    model = cp_model.CpModel()
    x = {(i, m.name): model.new_bool_var(f"x{i}{m.name}") for i in range(t.count) for m in machines}
    y = {}
    for i in range(t.count):
        model.add_exactly_one(x[i, m.name] for m in machines)
        for m in machines:
            for k in t.kinds:
                sources = [m.name] if server_centric else locations
                for loc in sources:
                    if free[k, loc]:
                        y[i, m.name, k, loc] = model.new_int_var(0, min(free[k, loc], t.wants(k)), "y")
                model.add(sum(y.get((i, m.name, k, loc), 0) for loc in sources) == t.wants(k) * x[i, m.name])
    for m in machines:
        tasks = [x[i, m.name] for i in range(t.count)]
        model.add(sum(tasks) * round(t.cpus * SCALE) <= round(m.cpus * SCALE))
        model.add(sum(tasks) * round(t.memory_gb * SCALE) <= round(m.memory_gb * SCALE))
    for (k, loc), n in free.items():
        model.add(sum(v for (_, _, kk, ll), v in y.items() if kk == k and ll == loc) <= n)
    for link, cap in _links(locations, rack, uplink, cluster.rack_uplink_gbps):
        crossing = [v for (_, m, _, loc), v in y.items() if m != loc and link(m, loc)]
        if crossing:
            model.add(sum(crossing) * gbps <= round(cap * SCALE))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 20.0
    status = solver.solve(model)
    assert status != cp_model.UNKNOWN, "the oracle ran out of time"
    return status in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def _links(locations: list[str], rack: dict[str, str], uplink: dict[str, float], rack_gbps: float):  # type: ignore[no-untyped-def]
    """Each link as (does the path from a to b cross it?, its capacity)."""
    for loc in locations:
        yield (lambda a, b, loc=loc: loc in (a, b)), uplink[loc]
    for r in sorted(set(rack.values())):
        yield (lambda a, b, r=r: rack[a] != rack[b] and r in (rack[a], rack[b])), rack_gbps

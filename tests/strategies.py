"""Hypothesis strategies shared by the property tests: small random clusters and queues."""

from __future__ import annotations

from hypothesis import strategies as st

from disagg.model import Allocation, Cluster, Device, Job, Machine, Pool, TaskRequest, device_id

APPS = ["rodinia/nw", "rodinia/hotspot", "rodinia/srad", "rodinia/b+tree", "other/app"]


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    n = draw(st.integers(1, 6))
    racks = draw(st.integers(1, 2))
    machines = [Machine(f"m{i}", f"r{i % racks}", draw(st.sampled_from([4, 8, 20])), 64.0,
                        draw(st.sampled_from([5.0, 10.0, 40.0]))) for i in range(n)]
    pools = [Pool(f"p{i}", f"r{i % racks}", 40.0) for i in range(draw(st.integers(0, 2)))]
    devices: list[Device] = []
    for loc in [m.name for m in machines] + [p.name for p in pools]:
        for kind, model in (("gpu", draw(st.sampled_from(["K80", "P100"]))), ("nvme", "ssd")):
            for i in range(draw(st.integers(0, 4 if kind == "gpu" else 1))):
                devices.append(Device(device_id(loc, kind, i), kind, model, loc, i,  # type: ignore[arg-type]
                                      health=draw(st.sampled_from(["healthy"] * 5 + ["failed"]))))
    held: set[str] = set()
    allocations = []
    for m in machines:
        if draw(st.booleans()):
            local = [d.id for d in devices if d.location == m.name and d.id not in held][: draw(st.integers(0, 2))]
            held.update(local)
            allocations.append(Allocation(f"w-{m.name}", m.name, draw(st.integers(0, int(m.cpus))), 8.0,
                                          tuple(local), draw(st.sampled_from([0.0, 1.0, 4.0]))))
    return Cluster(tuple(machines), tuple(pools), tuple(devices), draw(st.sampled_from([10.0, 100.0])),
                   tuple(allocations))


@st.composite
def queues(draw: st.DrawFn) -> list[Job]:
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        devices = {k: v for k, v in (("gpu", draw(st.integers(0, 3))), ("nvme", draw(st.integers(0, 1)))) if v}
        models = {"gpu": draw(st.sampled_from(["K80", "P100"]))} if devices.get("gpu") and draw(st.booleans()) else {}
        jobs.append(Job(f"j{i}", draw(st.sampled_from(APPS)),
                        TaskRequest(draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4])), 8.0, devices, models),
                        submit_s=draw(st.floats(0, 100)), importance=draw(st.sampled_from([1.0, 5.0, 10.0])),
                        slo_s=draw(st.sampled_from([None, 100.0, 400.0])), wait_rounds=draw(st.integers(0, 5))))
    return jobs

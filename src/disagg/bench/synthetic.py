"""Synthetic clusters and queues for benchmarks: racks of 40 machines, a GPU pool per rack, a warm
cluster with half the cpus taken, and Rodinia-like jobs. Pure: randomness comes from the seed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from disagg.model import Allocation, Cluster, Device, Job, Machine, Pool, TaskRequest, device_id
from disagg.model.tenancy import Holder, Tenancy
from disagg.model.tenants import parse_tenants
from disagg.profiles import RODINIA
from disagg.profiles.model import Profile

RACK_SIZE = 40
POOL_GPUS = 8
MACHINE_CPUS = 32
MACHINE_MEMORY_GB = 256


def synthetic_cluster(machines: int, gpus_per_machine: int, seed: int, warm_share: float = 0.5) -> Cluster:
    """`machines` machines in racks of 40, each rack with a pool of 8 GPUs; about `warm_share` of the
    cpus held by CPU-only warm jobs (as the seed's warm-up), some of them network-heavy."""
    rng = np.random.default_rng(seed)
    n_racks = (machines + RACK_SIZE - 1) // RACK_SIZE
    ms = tuple(Machine(f"m{i}", f"r{i // RACK_SIZE}", MACHINE_CPUS, MACHINE_MEMORY_GB, 25.0) for i in range(machines))
    pools = tuple(Pool(f"pool{r}", f"r{r}", 100.0) for r in range(n_racks))
    devices: list[Device] = []
    for m in ms:
        devices += [Device(device_id(m.name, "gpu", g), "gpu", "V100", m.name, g) for g in range(gpus_per_machine)]
    for p in pools:
        devices += [Device(device_id(p.name, "gpu", g), "gpu", "V100", p.name, g) for g in range(POOL_GPUS)]
    taken = rng.integers(0, MACHINE_CPUS + 1, size=machines) if warm_share > 0 else np.zeros(machines, int)
    taken = np.minimum(taken, np.rint(MACHINE_CPUS * 2 * warm_share)).astype(int)
    traffic = rng.choice([0.0, 0.0, 2.0, 8.0], size=machines)
    allocations = tuple(
        Allocation(f"warm{i}", ms[i].name, float(taken[i]), float(taken[i]) * 4.0, (), float(traffic[i]))
        for i in range(machines) if taken[i] > 0
    )
    return Cluster(machines=ms, pools=pools, devices=tuple(devices), rack_uplink_gbps=400.0,
                   allocations=allocations)


def rodinia_queue(pending: int, seed: int, now: float = 0.0) -> list[Job]:
    """`pending` Rodinia-like jobs: 1–2 tasks, 2–8 cpus, 1–4 GPUs, SLOs of 1.2–2x the local time."""
    rng = np.random.default_rng(seed + 1)
    apps = sorted(RODINIA)
    jobs = []
    for i in range(pending):
        app = apps[int(rng.integers(len(apps)))]
        cpus = float(rng.choice([2, 4, 8]))
        gpu = int(rng.choice([1, 1, 2, 4]))
        count = int(rng.choice([1, 1, 1, 2]))
        slo = RODINIA[app].base_s * float(rng.choice([1.2, 1.5, 2.0]))
        jobs.append(Job(
            name=f"j{i}", image=f"rodinia/{app}", submit_s=now - float(rng.uniform(0, 600)),
            importance=float(rng.choice([1, 3, 5])), slo_s=slo,
            tasks=TaskRequest(count=count, cpus=cpus, memory_gb=cpus * 4, devices={"gpu": gpu}),
        ))
    return jobs


#: Tenants per cohort in `with_tenants`.
COHORT_SIZE = 10


def with_tenants(cluster: Cluster, queue: list[Job], tenants: int, seed: int) -> tuple[Cluster, list[Job]]:
    """The same round with `tenants` tenants: jobs and warm allocations dealt round-robin, weights
    1–3, cohorts of 10, each with an even share of the GPUs and cpus as its quota and as much again to
    borrow (so the quota walk, fair share and preemption planning all run, but refuse nothing the
    plain round would place), and a decayed usage that puts some tenants below their share."""
    rng = np.random.default_rng(seed + 2)
    names = [f"t{i:03d}" for i in range(tenants)]
    gpus = sum(1 for d in cluster.devices if d.kind == "gpu") / tenants
    cpus = sum(m.cpus for m in cluster.machines) / tenants
    spec = parse_tenants([{"name": n, "weight": int(rng.integers(1, 4)), "cohort": f"c{i // COHORT_SIZE}",
                           "quota": {"gpu": gpus, "cpus": cpus}, "borrow": {"gpu": gpus, "cpus": cpus}}
                          for i, n in enumerate(names)])
    holders = {a.job: Holder(names[i % tenants], True, float(-rng.uniform(0, 3600)))
               for i, a in enumerate(cluster.allocations)}
    history = {n: {"gpu": float(rng.uniform(0, gpus)), "cpus": float(rng.uniform(0, cpus))} for n in names}
    jobs = [replace(j, tenant=names[i % tenants]) for i, j in enumerate(queue)]
    return cluster.with_tenancy(Tenancy(spec, holders, history)), jobs


def with_learned_profiles(queue: list[Job], images: int, seed: int) -> list[Job]:
    """The same jobs as images of a learned table of `images` images, which the round is told as the
    controller tells it what it learned (`Job.profile`). Image k is a variant of Rodinia app k mod 13,
    each number within 10% of the app's (so the jobs' SLOs keep their meaning and the round's work is
    the same kind: what is measured is the table's size); each job runs one of its own app's variants."""
    rng = np.random.default_rng(seed + 2)
    apps = sorted(RODINIA)
    table = []
    for k in range(max(1, images)):
        app = RODINIA[apps[k % len(apps)]]
        near = rng.uniform(0.9, 1.1, size=5)
        table.append(Profile(f"img{k}", app.base_s * near[0], min(1.0, app.transfer_share * near[1]),
                             max(1.0, app.remote_factor * near[2]), app.load_sensitivity * near[3],
                             app.network_gbps * near[4], source="learned (synthetic)"))
    variants: dict[str, list[Profile]] = {}
    for k, profile in enumerate(table):
        variants.setdefault(apps[k % len(apps)], []).append(profile)
    out = []
    for j in queue:
        mine = variants.get(j.image.rsplit("/", 1)[-1]) or table
        profile = mine[int(rng.integers(len(mine)))]
        out.append(replace(j, image=f"learned/{profile.name}", profile=profile))
    return out

"""Small builders for tests: a machine, a pool, a cluster, a job, in one line each."""

from __future__ import annotations

from disagg.model import Allocation, Cluster, Device, Job, Machine, Pool, TaskRequest, device_id


def make_machine(name: str = "m0", rack: str = "r0", cpus: float = 20, memory_gb: float = 512,
                 uplink_gbps: float = 10) -> Machine:
    return Machine(name, rack, cpus, memory_gb, uplink_gbps)


def devices_at(location: str, count: int, kind: str = "gpu", model: str = "K80") -> list[Device]:
    return [Device(device_id(location, kind, i), kind, model, location, i) for i in range(count)]  # type: ignore[arg-type]


def make_cluster(machines: int = 4, gpus: int = 4, cpus: float = 20, memory_gb: float = 512, uplink_gbps: float = 10,
                 pools: int = 0, pool_gpus: int = 4, racks: int = 1, taken_cpus: dict[str, float] | None = None,
                 traffic: dict[str, float] | None = None, rack_uplink_gbps: float = 100) -> Cluster:
    ms = [make_machine(f"m{i}", f"r{i % racks}", cpus, memory_gb, uplink_gbps) for i in range(machines)]
    ps = [Pool(f"box{i}", f"r{i % racks}", 40.0) for i in range(pools)]
    devs: list[Device] = []
    for m in ms:
        devs += devices_at(m.name, gpus)
    for p in ps:
        devs += devices_at(p.name, pool_gpus, model="P100")
    allocs = []
    for name, c in (taken_cpus or {}).items():
        allocs.append(Allocation(f"warm-{name}", name, c, 8.0, (), (traffic or {}).get(name, 0.0)))
    for name, g in (traffic or {}).items():
        if name not in (taken_cpus or {}):
            allocs.append(Allocation(f"net-{name}", name, 0.0, 0.0, (), g))
    return Cluster(tuple(ms), tuple(ps), tuple(devs), rack_uplink_gbps, tuple(allocs))


def make_job(name: str = "j0", image: str = "rodinia/nw", count: int = 1, cpus: float = 4, memory_gb: float = 16,
             gpu: int = 1, slo_s: float | None = 400.0, importance: float = 1.0, submit_s: float = 0.0,
             wait_rounds: int = 0, nvme: int = 0, gpu_model: str | None = None) -> Job:
    devices = {k: v for k, v in (("gpu", gpu), ("nvme", nvme)) if v}
    models = {"gpu": gpu_model} if gpu_model else {}
    return Job(name, image, TaskRequest(count, cpus, memory_gb, devices, models), submit_s, importance, slo_s,
               wait_rounds)

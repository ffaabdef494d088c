"""Named scenarios: the seed's testbed scaled to 4, 16 and 128 machines, with its workload and warm-up.

Testbed (seed 001, "Testing environment"): each machine has 20 cores, 512 GB and 4 NVIDIA K80; we give
it a 10 Gb/s uplink (the testbed's 10 GbE, over which HFCUDA remoted GPUs) and group machines in racks
of 16 behind 40 Gb/s rack uplinks. Workload: Poisson arrivals at 16 jobs/s, one Rodinia job = one task
with 1 GPU, 2 cores and 8 GB; the 4-machine scenarios draw the application from a normal distribution
(the prototype experiments, "Experiment 2"), the larger ones uniformly (the simulation, "Trace-driven
simulation configuration"). Warm-up: CPU-only whole-machine jobs holding 50% of the CPUs for ≈2000 s.

The workload's, NumPy's and the tenants' modules are imported by the methods that use them: `disagg
simulate --help` lists the scenarios by name, and every `disagg` command loads that help.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from disagg.model import Cluster, Device, Machine, device_id

if TYPE_CHECKING:
    from disagg.model.tenants import Tenants
    from disagg.sim.workload import Choice, Submission

MACHINE_CPUS = 20.0
MACHINE_MEMORY_GB = 512.0
MACHINE_GPUS = 4
GPU_MODEL = "K80"
MACHINE_UPLINK_GBPS = 10.0
RACK_SIZE = 16
RACK_UPLINK_GBPS = 40.0


class UnknownScenarioError(ValueError):
    """A scenario name that is not defined; the message lists the known ones."""


def paper_cluster(
    machines: int, gpus_per_machine: int = MACHINE_GPUS, rack_size: int = RACK_SIZE,
    uplink_gbps: float = MACHINE_UPLINK_GBPS, rack_uplink_gbps: float = RACK_UPLINK_GBPS,
) -> Cluster:
    """`machines` copies of the seed's testbed machine, in racks of `rack_size`."""
    ms = tuple(Machine(f"m{i:04d}", f"r{i // rack_size:03d}", MACHINE_CPUS, MACHINE_MEMORY_GB, uplink_gbps)
               for i in range(machines))
    devices = tuple(Device(device_id(m.name, "gpu", g), "gpu", GPU_MODEL, m.name, g)
                    for m in ms for g in range(gpus_per_machine))
    return Cluster(machines=ms, devices=devices, rack_uplink_gbps=rack_uplink_gbps)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A cluster, a workload and a warm-up; `paper` holds the seed's table rows for this scenario."""

    name: str
    description: str
    machines: int
    jobs: int
    choice: Choice = "uniform"
    rate_per_s: float = 16.0
    warmup_share: float = 0.5
    warmup_s: float = 2000.0
    source: str = ""

    def cluster(self) -> Cluster:
        return paper_cluster(self.machines)

    def submissions(self, seed: int, cluster: Cluster | None = None) -> list[Submission]:
        """The same jobs for every policy at a given seed: warm-up first, then the Poisson workload."""
        import numpy as np

        from disagg.sim.workload import WarmupSpec, WorkloadSpec, poisson_workload, warmup_jobs

        work_seq, warm_seq = np.random.SeedSequence([seed, 11]).spawn(2)
        spec = WorkloadSpec(jobs=self.jobs, rate_per_s=self.rate_per_s, choice=self.choice)
        warm = WarmupSpec(cpu_share=self.warmup_share, duration_s=self.warmup_s)
        warmups = warmup_jobs(cluster or self.cluster(), warm, np.random.default_rng(warm_seq))
        return warmups + poisson_workload(spec, np.random.default_rng(work_seq))

    def tenants(self) -> Tenants | None:
        """The seed's scenarios have one tenant and no tenants spec."""
        return None


@dataclass(frozen=True, slots=True)
class BurstScenario:
    """Two tenants of one cohort share the cluster half and half (each may borrow the other half):
    `alice` floods it from the start, `bob` arrives `bob_at_s` later. Without fairness bob waits for
    alice's whole burst; with it he takes back his half (preemption) and the two share evenly."""

    name: str
    description: str
    machines: int = 8
    alice_jobs: int = 320
    bob_jobs: int = 160
    rate_per_s: float = 2.0
    bob_at_s: float = 600.0
    source: str = "issue 15"

    @property
    def jobs(self) -> int:
        return self.alice_jobs + self.bob_jobs

    def cluster(self) -> Cluster:
        return paper_cluster(self.machines)

    def tenants(self) -> Tenants:
        from disagg.model.tenants import parse_tenants

        half = self.machines * MACHINE_GPUS / 2
        return parse_tenants([
            {"name": who, "weight": 1, "cohort": "lab", "quota": {"gpu": half}, "borrow": {"gpu": half}}
            for who in ("alice", "bob")], self.name)

    def submissions(self, seed: int, cluster: Cluster | None = None) -> list[Submission]:
        """Each tenant's jobs: the seed's Rodinia jobs (one task, 1 GPU), Poisson arrivals."""
        import numpy as np

        from disagg.sim.workload import Submission, WorkloadSpec, poisson_workload

        alice_seq, bob_seq = np.random.SeedSequence([seed, 13]).spawn(2)
        out: list[Submission] = []
        for who, jobs, start, seq in (("alice", self.alice_jobs, 1.0, alice_seq),
                                      ("bob", self.bob_jobs, self.bob_at_s, bob_seq)):
            spec = WorkloadSpec(jobs=jobs, rate_per_s=self.rate_per_s, start_s=start)
            for sub in poisson_workload(spec, np.random.default_rng(seq)):
                job = replace(sub.job, name=f"{who}-{sub.job.name}", tenant=who)
                out.append(Submission(job, sub.base_s))
        return sorted(out, key=lambda s: s.job.submit_s)


class NamedScenario(Protocol):
    """What a named scenario gives a run: a cluster, the submissions for a seed, its tenants (if any)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    def cluster(self) -> Cluster: ...

    def submissions(self, seed: int, cluster: Cluster | None = None) -> list[Submission]: ...

    def tenants(self) -> Tenants | None: ...


SCENARIOS: dict[str, NamedScenario] = {
    s.name: s
    for s in (
        Scenario("paper-4m-128j", "4 machines, 128 jobs (seed Experiment 2, Fig. 4, Tables 2-3)", 4, 128,
                 "normal", source="Experiment 2 (prototype)"),
        Scenario("paper-4m-512j", "4 machines, 512 jobs (seed Experiment 2, Fig. 5, Tables 2-3)", 4, 512,
                 "normal", source="Experiment 2 (prototype)"),
        Scenario("paper-16m-512j", "16 machines, 512 jobs (seed Experiments 4-5, Fig. 7, Tables 4-5)",
                 16, 512, source="Experiments 4-5 (simulation)"),
        Scenario("paper-128m-4096j", "128 machines, 4096 jobs (seed Experiments 4-5, Figs. 8-10, Tables 4-5)",
                 128, 4096, source="Experiments 4-5 (simulation)"),
        BurstScenario("tenants-burst", "8 machines, two tenants: alice floods 320 jobs, bob brings 160 "
                                       "600 s later; quota 16 GPUs each, may borrow 16 (issue 15)"),
    )
}


def get_scenario(name: str) -> NamedScenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UnknownScenarioError(
            f"unknown scenario {name!r}; known scenarios: {', '.join(SCENARIOS)}") from None

"""What `disagg bench chaos` will do, drawn up front from one seed, and the pure checks it applies.

Every random choice of a soak comes from one `random.Random(seed)` here, before the controller starts:
the tenants, every submission (tenant, shape, sleep, idempotency key), every device and link failure
with its repair, every kill -9 and every cancel. A seed therefore replays the same actions at the same
offsets; only the controller's own timing (what is composing when a cancel lands) differs.

The checks are pure too: whether a waiting job fits what is free and reachable now (`fits`), and
what the tasks' start/end markers say about jobs that ran twice (`rerun_violations`).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The tenants' kinds, given in turn: a borrower and a lender in one cohort, a tenant with a quota
#: and no cohort (its over-limit jobs must be refused), and one without limits.
TENANT_KINDS: tuple[dict[str, Any], ...] = (
    {"cohort": "chaos", "quota": {"gpu": 2, "nvme": 1}, "borrow": {"gpu": 2, "nvme": 1}},
    {"cohort": "chaos", "quota": {"gpu": 2, "nvme": 2}},
    {"quota": {"gpu": 1, "nvme": 1}},
    {},
)
#: The disaggregable kinds a job of the soak asks for.
DEVICE_KINDS = ("gpu", "nvme")
#: Share of a limited tenant's submissions that ask for more than its limit (refused with 422 is right).
OVER_LIMIT_SHARE = 0.05
#: The image every job of the soak names (its commands sleep a second at most; the placement prices
#: it by its profile: 200 s locally).
IMAGE = "rodinia/nw"
#: Share of the submissions that set an SLO, and the SLOs they draw: one second (the least the API takes,
#: far below the image's local time: a goal no placement meets), the local time itself and half again.
SLO_SHARE = 0.3
SLO_FACTORS = (None, 1.0, 1.5)


@dataclass(frozen=True)
class Action:
    """One thing the soak does `at` seconds into the fault phase.

    kind: submit | fail-device | repair-device | fail-link | repair-link | kill | cancel.
    `target`: the device or link, or the submitting tenant; `body`/`key`: a submission; `pick`: which
    composing job a cancel takes (a fraction of the list), `over_limit`: a submission above its limit.
    """

    at: float
    kind: str
    target: str = ""
    body: Mapping[str, Any] | None = None
    key: str = ""
    pick: float = 0.0
    over_limit: bool = False


@dataclass(frozen=True)
class ChaosOptions:
    """A soak's knobs (`disagg bench chaos --help`)."""

    seconds: float = 120.0
    seed: int = 1
    tenants: int = 4
    rate: float = 0.5
    latency_scale: float = 0.02
    max_wait_rounds: int = 10
    min_wait_s: float = 5.0
    drain_s: float = 180.0
    device_fault_every_s: float = 8.0
    link_fault_every_s: float = 12.0
    kill_every_s: float = 30.0
    cancel_every_s: float = 6.0
    repair_after_s: tuple[float, float] = (5.0, 25.0)
    #: Run in this directory and keep it (the server's log, the store, the markers); None: a temporary one.
    keep_dir: str | None = None

    def replay(self) -> str:
        """The command line that replays this soak."""
        return (f"disagg bench chaos --seconds {self.seconds:g} --seed {self.seed} --tenants {self.tenants} "
                f"--rate {self.rate:g} --latency-scale {self.latency_scale:g} "
                f"--max-wait-rounds {self.max_wait_rounds} --drain-s {self.drain_s:g}")


def tenant_specs(n: int) -> list[dict[str, Any]]:
    """`n` tenants `chaos-a`, `chaos-b`, … of the kinds in `TENANT_KINDS`, in turn."""
    return [{"name": f"chaos-{chr(ord('a') + i % 26)}{i // 26 or ''}", **TENANT_KINDS[i % len(TENANT_KINDS)]}
            for i in range(n)]


def limits(spec: Mapping[str, Any]) -> dict[str, float]:
    """quota + borrow per resource the tenant's quota names (what it may hold at most)."""
    quota, borrow = spec.get("quota", {}), spec.get("borrow", {})
    return {r: float(q) + float(borrow.get(r, 0)) for r, q in quota.items()}


def ask(tasks: Mapping[str, Any]) -> dict[str, float]:
    """What a job asks for in all (its tasks summed), per resource a quota can name."""
    count = int(tasks.get("count", 1))
    out = {k: float(count * int(tasks.get(k, 0))) for k in DEVICE_KINDS if tasks.get(k)}
    out["cpus"] = count * float(tasks.get("cpus", 1.0))
    out["memory_gb"] = count * float(tasks.get("memory_gb", 1.0))
    return out


def above(need: Mapping[str, float], limit: Mapping[str, float]) -> list[str]:
    """The resources of `need` above `limit`."""
    return [r for r, n in need.items() if r in limit and n > limit[r] + 1e-9]


def _arrivals(rng: random.Random, every_s: float, seconds: float) -> Iterator[float]:
    """Poisson arrival times in [0, seconds) with mean gap `every_s`."""
    t = rng.expovariate(1.0 / every_s)
    while t < seconds:
        yield t
        t += rng.expovariate(1.0 / every_s)


def _shape(rng: random.Random) -> dict[str, Any]:
    """A short job's tasks: CPU only, GPUs, NVMe, or a gang."""
    kind = rng.choice(("cpu", "gpu", "gpu", "nvme", "gang"))
    tasks: dict[str, Any] = {"count": 1, "cpus": 1.0, "memory_gb": 1.0}
    if kind == "gpu":
        tasks["gpu"] = rng.choice((1, 1, 2))
    elif kind == "nvme":
        tasks["nvme"] = rng.choice((1, 2))
    elif kind == "gang":
        tasks.update(count=rng.choice((2, 3)), gpu=rng.choice((0, 1)))
    return tasks


def _slo(rng: random.Random) -> float | None:
    """A submission's SLO (`SLO_SHARE` of them), or None. `rng` is a stream of its own, so that adding
    SLOs left every other action a seed draws as it was."""
    if rng.random() >= SLO_SHARE:
        return None
    from disagg.api.schemas import SLO_MIN_S
    from disagg.profiles import lookup

    factor = rng.choice(SLO_FACTORS)
    return SLO_MIN_S if factor is None else round(factor * lookup(IMAGE).base_s, 3)


def _submission(rng: random.Random, at: float, i: int, tenants: Sequence[Mapping[str, Any]], events: Path,
                slo_s: float | None = None) -> Action:
    """The i-th submission: a tenant, a shape within its limit (or, now and then, just above it), and
    `slo_s` (None: no SLO)."""
    spec = rng.choice(tenants)
    limit = limits(spec)
    tasks = _shape(rng)
    over = bool(limit) and rng.random() < OVER_LIMIT_SHARE
    if over:
        kind = next(k for k in DEVICE_KINDS if k in limit)
        tasks = {"count": 1, "cpus": 1.0, "memory_gb": 1.0, kind: int(limit[kind]) + 1}
    elif above(ask(tasks), limit):
        tasks = {"count": 1, "cpus": 1.0, "memory_gb": 1.0}
    from disagg.bench.crash import marked_command

    body: dict[str, Any] = {"name": f"chaos-{i}", "image": IMAGE, "max_retries": 10, "tasks": tasks,
                            "command": marked_command(events, rng.choice((0.2, 0.5, 1.0)))}
    if slo_s is not None:
        body["slo_s"] = slo_s
    return Action(at, "submit", str(spec["name"]), body, f"chaos-{rng.getrandbits(96):024x}", over_limit=over)


def _background(tenants: Sequence[Mapping[str, Any]], events: Path, seconds: float) -> Action:
    """A CPU-only job that runs through the whole fault phase, from a tenant without limits (the last
    when none is): the cluster is never idle, so no round may place a job only because nothing else runs
    (the liveness rule's idle case), and a job that waits by its cost waits as it would on a busy cluster."""
    from disagg.bench.crash import marked_command

    spec = next((t for t in tenants if not limits(t)), tenants[-1])
    body = {"name": "chaos-background", "image": IMAGE, "max_retries": 10,
            "tasks": {"count": 1, "cpus": 1.0, "memory_gb": 1.0}, "command": marked_command(events, round(seconds, 3))}
    return Action(0.0, "submit", str(spec["name"]), body, "chaos-background")


def _faults(rng: random.Random, opts: ChaosOptions, what: str, targets: Sequence[str], every_s: float
            ) -> list[Action]:
    """Failures of `targets` (`what`: device or link) with their repairs; a part fails again only once
    it is repaired."""
    out: list[Action] = []
    busy: dict[str, float] = {}
    for t in _arrivals(rng, every_s, opts.seconds):
        target = rng.choice(targets)
        back = t + rng.uniform(*opts.repair_after_s)
        if busy.get(target, -1.0) >= t:
            continue
        busy[target] = back
        out += [Action(t, f"fail-{what}", target), Action(back, f"repair-{what}", target)]
    return out


def make_schedule(opts: ChaosOptions, devices: Sequence[str], links: Sequence[str], events: Path
                  ) -> list[Action]:
    """Every action of the soak, in time order, from `opts.seed` alone."""
    rng = random.Random(opts.seed)
    slos = random.Random(f"slo-{opts.seed}")
    tenants = tenant_specs(opts.tenants)
    actions = [_submission(rng, t, i, tenants, events, _slo(slos))
               for i, t in enumerate(_arrivals(rng, 1.0 / opts.rate, opts.seconds))]
    actions.append(_background(tenants, events, opts.seconds))
    actions += _faults(rng, opts, "device", devices, opts.device_fault_every_s)
    actions += _faults(rng, opts, "link", links, opts.link_fault_every_s)
    actions += [Action(t, "kill") for t in _arrivals(rng, opts.kill_every_s, opts.seconds)]
    actions += [Action(t, "cancel", pick=rng.random()) for t in _arrivals(rng, opts.cancel_every_s, opts.seconds)]
    return sorted(actions, key=lambda a: a.at)


@dataclass(frozen=True)
class Free:
    """What is free now, as the API and the store show it: devices free and reachable per kind, room
    (cpus, memory) per machine, the machines whose uplink is up, and each limited tenant's limit and use."""

    devices: Mapping[str, int]
    room: Mapping[str, tuple[float, float]]
    linked: frozenset[str]
    quotas: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    usage: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


def fits(job: Mapping[str, Any], free: Free) -> bool:
    """Whether a waiting job fits what is free and reachable now, within its tenant's own nominal quota
    (a job that needs to borrow may wait for its cohort; one within its quota never should)."""
    tasks = job["tasks"]
    need = ask(tasks)
    if any(free.devices.get(k, 0) < need.get(k, 0) for k in DEVICE_KINDS):
        return False
    used = free.usage.get(job["tenant"], {})
    if any(used.get(r, 0.0) + need.get(r, 0.0) > q + 1e-9 for r, q in free.quotas.get(job["tenant"], {}).items()):
        return False
    remote = any(tasks.get(k) for k in DEVICE_KINDS)  # every device sits in a pool: the task's uplink is crossed
    room = {m: list(r) for m, r in free.room.items() if not remote or m in free.linked}
    cpus, memory = float(tasks.get("cpus", 1.0)), float(tasks.get("memory_gb", 1.0))
    for _ in range(int(tasks.get("count", 1))):
        spot = next((r for r in room.values() if r[0] >= cpus - 1e-9 and r[1] >= memory - 1e-9), None)
        if spot is None:
            return False
        spot[0] -= cpus
        spot[1] -= memory
    return True


def _runs(text: str) -> dict[str, dict[str, dict[str, list[float]]]]:
    """job → slice → {"start": [times], "end": [times]} from the tasks' markers."""
    runs: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 5:
            what, job, slice_id, _task, at = parts
            runs[job][slice_id][what].append(float(at))
    return runs


def rerun_violations(text: str, tasks_of: Mapping[str, int], completed: Collection[str] = ()) -> list[str]:
    """What the tasks' markers show against "finished work is final": a job whose command ran to its end
    on every task of one slice and started again in another slice, before that run ended (twice at the
    same time) or after it (finished work ran again); and a `completed` job that never ran. A run cut
    short by a fault has no end markers: a re-queue may legitimately start the job again after it.
    `tasks_of`: each job's task count."""
    runs = _runs(text)
    bad = [f"job {job} completed and never ran" for job in sorted(set(completed) - set(runs))]
    for job, slices in runs.items():
        count = tasks_of.get(job)
        if count is None:
            continue
        finished = sorted((min(m["start"]), max(m["end"]), sid) for sid, m in slices.items()
                          if m["start"] and len(m["end"]) >= count)
        if not finished:
            continue
        start, end, first = finished[0]
        for sid, m in sorted(slices.items()):
            if sid == first or not m["start"]:
                continue
            began = min(m["start"])
            if start <= began <= end:
                bad.append(f"job {job} ran twice at the same time (slices {first} and {sid})")
            elif began > end:
                bad.append(f"job {job} finished in slice {first} and ran again in {sid}")
    return bad


__all__ = ["Action", "ChaosOptions", "Free", "above", "ask", "fits", "limits", "make_schedule", "rerun_violations",
           "tenant_specs"]

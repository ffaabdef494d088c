"""The shared loop of the one-job-at-a-time baselines (greedy, random-remote, fifo).

Each baseline is three small stages, Nomad/Kubernetes style: an order for the queue, a machine
choice per task (filter → score → select), and a device choice per kind. The loop reserves from
`FreeState` (so nothing is over-committed), and rolls a job back if any task of its gang fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from disagg.model import Cluster, Job
from disagg.placement.base import Clock, no_clock
from disagg.placement.commit import EPS, exceeds
from disagg.placement.cost import phi, profile_of, remote_gbps
from disagg.placement.decisions import Decisions, DeviceGrant, JobPlacement, Reason, TaskPlacement, Unplaced
from disagg.placement.state import FreeState, Journal


class Refused(Exception):
    """A stage could not serve a task; carries the reason for the job."""

    def __init__(self, reason: Reason, message: str, lasting: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        #: True when no machine passes the filter: free resources only shrink within a round, so
        #: the same request would fail again and need not be tried.
        self.lasting = lasting


@dataclass
class Ask:
    """The job being placed, with what the stages need to know about it."""

    job: Job
    gbps: float
    journal: Journal


Order = Callable[[Sequence[Job], float], list[Job]]
PickMachine = Callable[[FreeState, Ask, np.random.Generator], int]
PickDevices = Callable[[FreeState, Ask, int, str, int, np.random.Generator], list[DeviceGrant]]


def place_sequentially(name: str, snapshot: Cluster, queue: Sequence[Job], now: float, rng: np.random.Generator,
                       order: Order, pick_machine: PickMachine, pick_devices: PickDevices,
                       blocking: bool = False, clock: Clock = no_clock) -> Decisions:
    start = clock()
    state = FreeState(snapshot)
    placed: list[JobPlacement] = []
    unplaced: list[Unplaced] = []
    blocked_by: str | None = None
    failed: dict[tuple[object, ...], Refused] = {}
    # A refused job gives back all it took, so until the free state changes (`generation` moves: a job
    # is placed) a job asking for the same is refused the same way; `recent` remembers such refusals per
    # request. Only refusals that drew nothing from `rng`, took no device (a rollback may reorder a
    # location's free devices) and left cpus, memory and links bit for bit as they were are remembered
    # (a rollback's float arithmetic could move them by an ulp: then `generation` moves), so the
    # decisions, and the rng stream, are exactly those of trying every job.
    recent: dict[tuple[object, ...], tuple[int, Reason, str]] = {}
    requests: dict[int, tuple[object, ...]] = {}
    generation = 0
    for job in order(queue, now):
        if blocked_by is not None:
            unplaced.append(Unplaced(job.name, Reason.BLOCKED, f"waits behind {blocked_by} (first in, first out)"))
            continue
        t = job.tasks
        # Unsorted items: two equal requests written in another order only miss each other here.
        request = requests.get(id(t))  # by id(): jobs often share one request object
        if request is None:
            request = requests[id(t)] = (t.count, t.cpus, t.memory_gb, tuple(t.devices.items()),
                                         tuple(t.models.items()))
        ask_key = (request, job.image, job.network_gbps)
        seen = recent.get(ask_key)
        if seen is not None and seen[0] == generation:
            unplaced.append(Unplaced(job.name, seen[1], seen[2]))
            if blocking:
                blocked_by = job.name
            continue
        ask = Ask(job, remote_gbps(job, profile_of(job)), Journal())
        key = (t.count, t.cpus, t.memory_gb, tuple(sorted(t.devices.items())), tuple(sorted(t.models.items())),
               ask.gbps)
        short = _too_big_now(state, job)
        if short is not None:
            recent[ask_key] = (generation, short.reason, short.message)
            unplaced.append(Unplaced(job.name, short.reason, short.message))
            if blocking:
                blocked_by = job.name
            continue
        # A request no machine could pass the filter for fails again: resources only shrink.
        if key in failed:
            unplaced.append(Unplaced(job.name, failed[key].reason, failed[key].message))
            continue
        before = (state.cpu.copy(), state.mem.copy(), state.link_used.copy(), rng.bit_generator.state)
        try:
            placed.append(_place_job(state, ask, rng, pick_machine, pick_devices))
            generation += 1
        except Refused as exc:
            took_devices = bool(ask.journal.taken_devices)
            version = state.version if not took_devices and not ask.journal.taken_traffic else -1
            state.rollback(ask.journal)
            if version >= 0:
                # Nothing of devices or links was taken: what was cached about them still holds.
                state.version = version
            if exc.lasting:
                failed[key] = exc
            if not (np.array_equal(before[0], state.cpu) and np.array_equal(before[1], state.mem)
                    and np.array_equal(before[2], state.link_used)):
                generation += 1
            elif not took_devices and before[3] == rng.bit_generator.state:
                recent[ask_key] = (generation, exc.reason, exc.message)
            unplaced.append(Unplaced(job.name, exc.reason, exc.message))
            if blocking:
                blocked_by = job.name
    elapsed = clock() - start
    return Decisions(policy=name, placed=tuple(placed), unplaced=tuple(unplaced),
                     timings={"build_s": 0.0, "solve_s": 0.0, "decode_s": elapsed, "round_s": elapsed})


def _too_big_now(state: FreeState, job: Job) -> Refused | None:
    """A cheap first look: does the job exceed what the whole cluster has free right now? A long queue
    on a full cluster is mostly such jobs, and this keeps them off the per-machine stages."""
    t = job.tasks
    free_cpu, free_mem = float(state.cpu.sum()), float(state.mem.sum())
    if exceeds(t.count * t.cpus, free_cpu) or exceeds(t.count * t.memory_gb, free_mem):
        return Refused(Reason.NO_CAPACITY, f"needs {t.count * t.cpus:g} cpus and {t.count * t.memory_gb:g} GB; "
                                           f"{free_cpu:g} cpus and {free_mem:g} GB are free in the cluster")
    for kind, n in t.devices.items():
        need = n * t.count
        if need > 0 and need > int(state.free_count[kind].sum()):
            free = state.total_free(kind, t.models.get(kind))
            return Refused(Reason.NO_DEVICES, f"needs {need} {kind}; {free} free in the cluster")
    return None


class SequentialPolicy:
    """A baseline made of three stages: subclasses name them (as staticmethods) and the policy."""

    name = "sequential"
    order: Order
    pick_machine: PickMachine
    pick_devices: PickDevices
    blocking = False
    #: No stage reads a job's wait counter W, so a caller need not raise it for this policy (the
    #: simulator then skips rebuilding every queued job each round; tests/sim checks the results match).
    reads_wait_rounds = False

    def place(self, snapshot: Cluster, queue: Sequence[Job], now: float, rng: np.random.Generator,
              clock: Clock = no_clock) -> Decisions:
        return place_sequentially(self.name, snapshot, queue, now, rng, self.order, self.pick_machine,
                                  self.pick_devices, blocking=self.blocking, clock=clock)


def _place_job(state: FreeState, ask: Ask, rng: np.random.Generator, pick_machine: PickMachine,
               pick_devices: PickDevices) -> JobPlacement:
    job = ask.job
    t = job.tasks
    tasks = []
    machines = state.cluster.machines
    profile = profile_of(job)
    for ti in range(t.count):
        m = pick_machine(state, ask, rng)
        if not state.take_cpu(m, t.cpus, t.memory_gb, ask.journal):
            raise Refused(Reason.NO_CAPACITY, f"machine {machines[m].name} lost its cpus")  # stage bug guard
        grants: list[DeviceGrant] = []
        for kind in t.kinds:
            grants += pick_devices(state, ask, m, kind, t.wants(kind), rng)
        share = sum(g.remote for g in grants) / len(grants) if grants else 0.0
        tasks.append(TaskPlacement(f"{job.name}/{ti}", machines[m].name, t.cpus, t.memory_gb, tuple(grants),
                                   round(phi(job, profile, share, 0.0), 3)))
    return JobPlacement(job.name, tuple(tasks))


# -- stages shared by the baselines ---------------------------------------------------------------

def by_submit(queue: Sequence[Job], now: float) -> list[Job]:
    """First in, first out."""
    return sorted(queue, key=lambda j: (j.submit_s, j.name))


def cpu_fit_mask(state: FreeState, ask: Ask) -> np.ndarray:
    t = ask.job.tasks
    return (state.cpu + EPS >= t.cpus) & (state.mem + EPS >= t.memory_gb)


def local_fit_mask(state: FreeState, ask: Ask) -> np.ndarray:
    """Machines that hold all of one task's devices locally."""
    t = ask.job.tasks
    mask = np.ones(state.n_machines, dtype=bool)
    for kind in t.kinds:
        mask &= state.local_free(kind, t.models.get(kind)) >= t.wants(kind)
    return mask


#: How many machines with free cpus the first-fit stages try for reachable devices before giving up.
REACH_SCAN = 8


def first_reachable(state: FreeState, ask: Ask, fits: np.ndarray) -> int:
    """The first machine (in inventory order) among `fits` from which every device the task wants is
    free locally or reachable over links with bandwidth to spare; the first of `fits` if none is
    among the first REACH_SCAN that could be (the device stage then says what is missing)."""
    t = ask.job.tasks
    candidates = np.nonzero(fits)[0]
    # Cheap necessary condition first: devices held locally, or an uplink that can carry one more.
    local = np.ones(len(candidates), dtype=bool)
    for k in t.kinds:
        local &= state.local_free(k, t.models.get(k))[candidates] >= t.wants(k)
    can_send = state.link_cap[candidates] - state.link_used[candidates] + EPS >= ask.gbps
    for m in candidates[local | can_send][:REACH_SCAN]:
        if all(state.reachable(k, int(m), ask.gbps) >= t.wants(k) for k in t.kinds):
            return int(m)
    return int(candidates[0])


def no_machine(state: FreeState, ask: Ask) -> Refused:
    t = ask.job.tasks
    return Refused(Reason.NO_CAPACITY, f"no machine has {t.cpus:g} cpus and {t.memory_gb:g} GB free "
                                       f"(most free: {state.cpu.max(initial=0):g} cpus)", lasting=True)


def take_local(state: FreeState, ask: Ask, m: int, kind: str, n: int) -> list[DeviceGrant]:
    """Up to n devices from the machine itself."""
    model = ask.job.tasks.models.get(kind)
    out = []
    name = state.cluster.locations[m]
    for _ in range(n):
        dev = state.take_device(kind, m, model, ask.journal)
        if dev is None:
            break
        out.append(DeviceGrant(state.cluster.devices[dev].id, kind, False, name))
    return out


def take_remote_from(state: FreeState, ask: Ask, m: int, kind: str, loc: int) -> DeviceGrant | None:
    """One device at `loc` for a task on machine `m`, if the path has the bandwidth."""
    model = ask.job.tasks.models.get(kind)
    path = state.path(m, loc)
    if not state.take_traffic(path, ask.gbps, ask.journal):
        return None
    dev = state.take_device(kind, loc, model, ask.journal)
    if dev is None:
        state.undo_last_traffic(ask.journal)
        return None
    links = tuple(state.link_names[p] for p in path)
    return DeviceGrant(state.cluster.devices[dev].id, kind, True, state.cluster.locations[loc], links, ask.gbps)


def short_of_devices(state: FreeState, ask: Ask, m: int, kind: str, n: int, got: int) -> Refused:
    """Why a task on machine m could not get n devices of a kind: none free, or no bandwidth to them."""
    where = state.cluster.locations[m]
    reach = state.reachable(kind, m, ask.gbps) + got
    free = state.total_free(kind) + got
    if reach < free and free >= n:
        return Refused(Reason.NO_BANDWIDTH, f"needs {n} {kind} for a task on {where}; {free} free in the cluster "
                                            f"but only {reach} within {ask.gbps:g} Gb/s of headroom from {where}")
    return Refused(Reason.NO_DEVICES, f"needs {n} {kind} for a task on {where}, {reach} free within "
                                      f"{state.link_cap[m]:g} Gb/s of {where}")

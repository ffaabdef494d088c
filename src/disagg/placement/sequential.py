"""The shared loop of the one-job-at-a-time baselines (greedy, random-remote, fifo).

Each baseline is three small stages, Nomad/Kubernetes style: an order for the queue, the machines to
try for a task, best first (filter → score → select), and a device choice per kind. The loop reserves
from `FreeState` (so nothing is over-committed); a task that its machine cannot serve after all gives
back what it took there and tries the next machine (up to `MACHINE_TRIES`), and a job whose task no
machine serves is rolled back whole (gang). A gang that only partly fits is explained as a whole: how
many of its tasks the machines take now, and where.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from disagg.model import Cluster, Job
from disagg.placement.base import Clock, FairTerms, no_clock
from disagg.placement.commit import EPS, exceeds
from disagg.placement.cost import phi, profile_of, remote_gbps
from disagg.placement.decisions import Decisions, DeviceGrant, JobPlacement, Reason, TaskPlacement, Unplaced
from disagg.placement.jobstate import gang_shortfall
from disagg.placement.search import search
from disagg.placement.state import FreeState, IntArray, Journal


class Refused(Exception):
    """A stage could not serve a task; carries the reason for the job."""

    def __init__(self, reason: Reason, message: str, lasting: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        #: True when no machine passes the filter: free resources only shrink within a round, so
        #: the same request would fail again and need not be tried.
        self.lasting = lasting
        #: The task of the gang that failed (0: the first); set by the loop.
        self.task = 0


@dataclass
class Ask:
    """The job being placed, with what the stages need to know about it. `journal` is where the stages
    reserve (the current task's, while the loop tries a machine); `touched` says whether a machine
    tried and given back had taken devices or link bandwidth (a rollback may reorder free devices)."""

    job: Job
    gbps: float
    journal: Journal
    touched: bool = field(default=False)
    #: The gang's second try (`_place_gang`): machines that hold a task's devices first, and remote
    #: devices taken first where no task of the job could run (pools, machines without room).
    careful: bool = field(default=False)


Order = Callable[[Sequence[Job], float], list[Job]]
#: The machines to try for one task, best first (the loop stops after MACHINE_TRIES of them).
PickMachine = Callable[[FreeState, Ask, np.random.Generator], Iterator[int]]
PickDevices = Callable[[FreeState, Ask, int, str, int, np.random.Generator], list[DeviceGrant]]

#: How many machines the loop tries for one task before the job waits: a machine that passed the
#: stage's filter may still fail (a remote location's uplink fills up with the task's own devices).
MACHINE_TRIES = 8


def place_sequentially(name: str, snapshot: Cluster, queue: Sequence[Job], now: float, rng: np.random.Generator,
                       order: Order, pick_machine: PickMachine, pick_devices: PickDevices,
                       blocking: bool = False, clock: Clock = no_clock, server_centric: bool = False) -> Decisions:
    """The loop (module docstring). `server_centric`: the stages only use a task's own machine's devices
    (greedy), which is how a gang that partly fits is explained."""
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
            placed.append(_place_gang(state, ask, rng, pick_machine, pick_devices))
            generation += 1
        except Refused as exc:
            took_devices = bool(ask.journal.taken_devices) or ask.touched
            state.rollback(ask.journal)
            if exc.task > 0:
                exc = gang_refusal(state, job, exc, server_centric)
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
    if unplaced and not placed and not snapshot.allocations:
        # Nothing runs and nothing was placed: waiting cannot help the first job left waiting.
        found = _last_resort(state, {j.name: j for j in queue}[unplaced[0].job], server_centric)
        if found is not None:  # the others keep their reasons (fifo's still wait behind it)
            placed, unplaced = [found], unplaced[1:]
    elapsed = clock() - start
    return Decisions(policy=name, placed=tuple(placed), unplaced=tuple(unplaced),
                     timings={"build_s": 0.0, "solve_s": 0.0, "decode_s": elapsed, "round_s": elapsed})


def _last_resort(state: FreeState, job: Job, server_centric: bool) -> JobPlacement | None:
    """The liveness rule's last resort: a lone job on an idle cluster that the stages could not place is
    looked for exhaustively (`placement.search`, bounded)."""
    profile = profile_of(job)
    found = search(state, job, remote_gbps(job, profile), server_centric)
    if found is None:
        return None
    machines = state.cluster.machines
    t = job.tasks
    return JobPlacement(job.name, tuple(
        TaskPlacement(f"{job.name}/{ti}", machines[m].name, t.cpus, t.memory_gb, grants,
                      round(phi(job, profile, sum(g.remote for g in grants) / max(len(grants), 1), 0.0), 3))
        for ti, (m, grants) in enumerate(found)))


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
    #: The stages only give a task its own machine's devices (explains a partly-fitting gang that way).
    server_centric = False
    #: No stage reads a job's wait counter W, so a caller need not raise it for this policy (the
    #: simulator then skips rebuilding every queued job each round; tests/sim checks the results match).
    reads_wait_rounds = False

    def place(self, snapshot: Cluster, queue: Sequence[Job], now: float, rng: np.random.Generator,
              clock: Clock = no_clock, terms: FairTerms | None = None) -> Decisions:
        """`terms` is ignored: the baselines keep their own order and price nothing (`placement.fairness`)."""
        return place_sequentially(self.name, snapshot, queue, now, rng, self.order, self.pick_machine,
                                  self.pick_devices, blocking=self.blocking, clock=clock,
                                  server_centric=self.server_centric)


def _place_gang(state: FreeState, ask: Ask, rng: np.random.Generator, pick_machine: PickMachine,
                pick_devices: PickDevices) -> JobPlacement:
    """Place the job's tasks one after another. A gang whose first tasks took what a later one needed
    (remote devices at a machine the later task had to run on, say) gets a second, careful try
    (`Ask.careful`); if that fails too the first try's refusal stands (what it took is in `ask.journal`,
    the caller gives it back)."""
    try:
        return _place_job(state, ask, rng, pick_machine, pick_devices)
    except Refused as exc:
        if exc.task == 0 or exc.lasting:
            raise
        ask.touched |= bool(ask.journal.taken_devices or ask.journal.taken_traffic)
        state.rollback(ask.journal)
        ask.careful = True
        try:
            return _place_job(state, ask, rng, pick_machine, pick_devices)
        except Refused:
            raise exc from None


def _place_job(state: FreeState, ask: Ask, rng: np.random.Generator, pick_machine: PickMachine,
               pick_devices: PickDevices) -> JobPlacement:
    job = ask.job
    t = job.tasks
    tasks = []
    machines = state.cluster.machines
    profile = profile_of(job)
    for ti in range(t.count):
        try:
            m, grants = _place_task(state, ask, rng, pick_machine, pick_devices)
        except Refused as exc:
            exc.task = ti
            raise
        share = sum(g.remote for g in grants) / len(grants) if grants else 0.0
        tasks.append(TaskPlacement(f"{job.name}/{ti}", machines[m].name, t.cpus, t.memory_gb, tuple(grants),
                                   round(phi(job, profile, share, 0.0), 3)))
    return JobPlacement(job.name, tuple(tasks))


def _place_task(state: FreeState, ask: Ask, rng: np.random.Generator, pick_machine: PickMachine,
                pick_devices: PickDevices) -> tuple[int, list[DeviceGrant]]:
    """One task on the first machine (of those the stage offers, at most MACHINE_TRIES) that serves its
    whole ask; a machine that cannot gives back what it took. Raises the first machine's refusal when
    none serves it (the one that says what the best candidate lacks)."""
    t = ask.job.tasks
    job_journal = ask.journal
    first: Refused | None = None
    for tried, m in enumerate(pick_machine(state, ask, rng)):
        if tried == MACHINE_TRIES:
            break
        task = ask.journal = Journal()
        try:
            if not state.take_cpu(m, t.cpus, t.memory_gb, task):
                raise Refused(Reason.NO_CAPACITY, f"machine {state.cluster.machines[m].name} lost its cpus")
            grants: list[DeviceGrant] = []
            for kind in t.kinds:
                grants += pick_devices(state, ask, m, kind, t.wants(kind), rng)
        except Refused as exc:
            ask.touched |= bool(task.taken_devices or task.taken_traffic)
            state.rollback(task)
            first = first or exc
            if exc.lasting:
                break
            continue
        finally:
            ask.journal = job_journal
        job_journal.taken_cpu += task.taken_cpu
        job_journal.taken_devices += task.taken_devices
        job_journal.taken_traffic += task.taken_traffic
        return m, grants
    raise first or Refused(Reason.NO_CAPACITY, "no machine to try")  # a stage offers at least one


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


def reachable_counts(state: FreeState, kind: str, model: str | None, gbps: float) -> IntArray:
    """Per machine, the free devices of `kind` (of `model`, if given) a task there could use: its own,
    plus those at other locations whose path has `gbps` of headroom on every link (`FreeState.reachable`
    for every machine at once: per rack, what its locations with headroom hold, and what the racks
    with rack-uplink headroom hold together)."""
    n_loc, n = len(state.loc_rack), state.n_machines
    if model is None:
        free = state.free_count[kind] if kind in state.free_count else np.zeros(n_loc, dtype=np.int64)
    else:
        models, counts = state.free_by_model(kind)
        free = counts[:, models.index(model)] if model in models else np.zeros(n_loc, dtype=np.int64)
    headroom = state.link_cap - state.link_used
    loc_ok = headroom[:n_loc] + EPS >= gbps
    rack_ok = headroom[n_loc:] + EPS >= gbps
    usable = np.where(loc_ok, free, 0)
    in_rack = np.bincount(state.loc_rack, weights=usable, minlength=state.n_racks)
    across = float(in_rack[rack_ok].sum())
    rack = state.loc_rack[:n]
    others = in_rack[rack] - usable[:n] + np.where(rack_ok[rack], across - in_rack[rack], 0.0)
    out: IntArray = free[:n] + np.where(loc_ok[:n], others, 0.0).astype(np.int64)
    return out


def whole_ask_mask(state: FreeState, ask: Ask) -> NDArray[np.bool_]:
    """Machines that could serve one task's whole ask: every device kind it wants free there or within
    reach, and an uplink with the headroom for all of its remote devices at once (their summed
    bandwidth), not only for one. Necessary, not sufficient: a remote location's own uplink may fill up
    with the task's devices (the loop then tries the next machine)."""
    t = ask.job.tasks
    n = state.n_machines
    remote = np.zeros(n)
    ok = np.ones(n, dtype=bool)
    for k in t.kinds:
        model, want = t.models.get(k), t.wants(k)
        remote += np.maximum(want - state.local_free(k, model), 0)
        ok &= reachable_counts(state, k, model, ask.gbps) >= want
    headroom = state.link_cap[:n] - state.link_used[:n]
    mask: NDArray[np.bool_] = ok & ((remote == 0) | (headroom + EPS >= remote * ask.gbps))
    return mask


def first_fits(state: FreeState, ask: Ask, fits: NDArray[np.bool_]) -> Iterator[int]:
    """The machines among `fits` (inventory order) that could serve the task's whole ask; when none
    could, the first of `fits` alone (the device stage then says what is missing)."""
    served = np.nonzero(fits & whole_ask_mask(state, ask))[0]
    if len(served) == 0:
        yield int(np.argmax(fits))
        return
    if ask.careful:  # machines that hold the task's devices first
        served = served[np.argsort(~local_fit_mask(state, ask)[served], kind="stable")]
    yield from served[:MACHINE_TRIES].tolist()


def spare_first(state: FreeState, ask: Ask, kind: str, locations: IntArray) -> IntArray:
    """`locations` (in their order), on the gang's careful try reordered so that a remote device of
    `kind` is taken first where it is least missed: not at a machine that could run a task of the job
    with all of that kind local (it has the room and enough of them), and then where fewest are free
    (pools and machines alike). A remote device taken from a machine is one a later task of the gang
    can no longer have locally."""
    if not ask.careful:
        return locations
    t = ask.job.tasks
    n = state.n_machines
    free = state.free_count[kind][locations]
    host = np.zeros(len(state.loc_rack), dtype=bool)
    host[:n] = ((state.cpu + EPS >= t.cpus) & (state.mem + EPS >= t.memory_gb)
                & (state.local_free(kind, t.models.get(kind)) >= t.wants(kind)))
    out: IntArray = locations[np.lexsort((free, host[locations]))]
    return out


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


def gang_refusal(state: FreeState, job: Job, exc: Refused, server_centric: bool) -> Refused:
    """Why a gang that only partly fits waits, said of the whole gang: how many of its tasks the machines
    take now and where (`state`: as before the job took anything). A task-level refusal ("no machine
    has 2 cpus free", "most on any one: 0 gpu") reads as if the first tasks had not been there; kept
    when the machines could take every task (then that task's own reason is the shortfall)."""
    t = job.tasks
    with np.errstate(divide="ignore", invalid="ignore"):
        takes = np.minimum(np.floor((state.cpu + EPS) / t.cpus), np.floor((state.mem + EPS) / t.memory_gb))
    takes = np.maximum(takes, 0)
    by_devices = np.full(state.n_machines, np.inf)
    if server_centric:
        for k in t.kinds:
            by_devices = np.minimum(by_devices, state.local_free(k, t.models.get(k)) // t.wants(k))
        takes = np.minimum(takes, by_devices)
    total = int(takes.sum())
    if total >= t.count:
        return exc
    # Device-limited when the machines with the devices do not hold enough of them even with cpus to spare.
    reason = Reason.NO_DEVICES if server_centric and t.kinds and by_devices.sum() < t.count else Reason.NO_CAPACITY
    return Refused(reason, gang_shortfall(state, job, takes, server_centric))

"""What a flow round keeps per job, and the vectorised φ both phases price with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from functools import lru_cache
from itertools import repeat
from operator import attrgetter

import numpy as np
from numpy.typing import NDArray

from disagg.model import Job, TaskRequest
from disagg.placement.cost import SCALE
from disagg.placement.decisions import DeviceGrant, Reason
from disagg.placement.state import FreeState, column
from disagg.profiles import Profile

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


class SloGuard(IntEnum):
    """What a cost model holds a job back for this round to keep its SLO (the network-aware model only)."""

    NONE = 0     # nothing: placements that miss the SLO cost what Eq. 7 says (the job is then `slo_at_risk`)
    TRAFFIC = 1  # a miss that others' traffic on the links causes (their end would lower it) pays the hold
    ALL = 2      # any miss pays the hold: a placement with local devices comes once running jobs end


@dataclass(frozen=True)
class FlowOptions:
    """How the flow placer runs for one policy: the policy's name, its cost model by name (`COST_MODELS`
    in cost_models.py: everything that tells the flow policies apart), and the placer's limits."""

    name: str
    cost_model: str
    max_iterations: int = 3
    min_candidates: int = 32


@dataclass(slots=True)
class RoundJob:
    """One job during one round (named apart from `model.states.JobState`, the job's lifecycle state)."""

    job: Job
    order: int
    profile: Profile
    tau: float
    z: float
    gbps: float
    phi_local: float
    shape: tuple[object, ...]
    wants: dict[str, int]
    #: The request's task count and per-task cpus and memory, read here rather than through the job
    #: (the decoders read them per task).
    count: int
    cpus: float
    memory_gb: float
    #: Its W this round: the job's, or what the round's `WaitingQueue` says (placement/base.py).
    wait_rounds: int
    index: int = field(default=0, init=False)
    remote: int = field(default=0, init=False)
    #: What the cost model holds the job back for this round (`SloGuard`).
    guard: int = field(default=0, init=False)
    #: Set when the decoder gave it a remote device that misses the SLO (waiting could not help, or no
    #: longer outweighed the miss): the placement is then `slo_at_risk`.
    slo_risk: bool = field(default=False, init=False)
    #: Of those, set when waiting could have helped: the job's W outgrew its postponement.
    slo_held: bool = field(default=False, init=False)
    #: Waiting cannot help it (the liveness rule): its unscheduled arcs outbid any placement.
    must_place: bool = field(default=False, init=False)
    #: A device phase could not serve it; it is on its second try this round (once): with local devices
    #: only (`local_first`), or with one task fewer on the machine that failed it (`avoid`).
    second_try: bool = field(default=False, init=False)
    local_first: bool = field(default=False, init=False)
    avoid: tuple[int, ...] = field(default=(), init=False)
    #: Where it failed: the machines phase 1 had given it, or the machine whose task a device phase could
    #: not serve.
    failed_on: tuple[int, ...] = field(default=(), init=False)
    #: What the job took this round (`state.Reservations`): kept here rather than in a `Journal` of
    #: its own, one object fewer per job.
    taken_cpu: list[tuple[int, float, float]] = field(default_factory=list, init=False)
    taken_devices: list[int] = field(default_factory=list, init=False)
    taken_traffic: list[tuple[tuple[int, ...], float]] = field(default_factory=list, init=False)
    machines: list[int] = field(default_factory=list, init=False)
    #: Per task, as they will be output.
    grants: list[tuple[DeviceGrant, ...]] = field(default_factory=list, init=False)
    failure: tuple[Reason, str] | None = field(default=None, init=False)
    #: Why its first try failed when that was its SLO (NA's hold): a second try that then finds no machine
    #: at all (its shape is narrowed) does not say why the job waits; this does.
    held_failure: tuple[Reason, str] | None = field(default=None, init=False)

    def __init__(self, job: Job, order: int, profile: Profile, tau: float, z: float, gbps: float, phi_local: float,
                 shape: tuple[object, ...], wants: dict[str, int], count: int, cpus: float, memory_gb: float,
                 wait_rounds: int) -> None:
        """The fields after `wait_rounds` start as declared. (Written out: the generated `__init__` made
        each of the five lists through a call of its factory, a fifth of making a job state, and a
        round makes 10,000 at 12,500 machines.)"""
        self.job = job
        self.order = order
        self.profile = profile
        self.tau = tau
        self.z = z
        self.gbps = gbps
        self.phi_local = phi_local
        self.shape = shape
        self.wants = wants
        self.count = count
        self.cpus = cpus
        self.memory_gb = memory_gb
        self.wait_rounds = wait_rounds
        self.index = 0
        self.remote = 0
        self.guard = 0
        self.slo_risk = False
        self.slo_held = False
        self.must_place = False
        self.second_try = False
        self.local_first = False
        self.avoid = ()
        self.failed_on = ()
        self.taken_cpu = []
        self.taken_devices = []
        self.taken_traffic = []
        self.machines = []
        self.grants = []
        self.failure = None
        self.held_failure = None

    def goal(self) -> str:
        """τ as a reason says it: where the job's SLO is below its local time (`cost.goal_s` then reads
        it as that time), both, so that "over its SLO" does not name a number the tenant never wrote."""
        slo = self.job.slo_s
        if self.profile.known and slo is not None and slo < self.tau:
            return f"{slo:g} s, below its local time: read as {self.tau:g} s"
        return f"{self.tau:g} s"

    def fail(self, state: FreeState, reason: Reason, message: str) -> None:
        self.fail_as(state, (reason, message))

    def fail_as(self, state: FreeState, failure: tuple[Reason, str]) -> None:
        """`fail`, with the failure as one tuple: a phase that fails many jobs alike shares one (a
        server-centric round fails hundreds of jobs each iteration, most of them holding nothing: what
        they would give back and drop is looked at before anything is called or made)."""
        if self.taken_cpu or self.taken_devices or self.taken_traffic:
            state.rollback(self)
        if self.machines:
            self.failed_on = tuple(self.machines)
            self.machines = []
        else:
            self.failed_on = ()
        if self.grants:
            self.grants = []
        self.remote = 0
        self.slo_risk = False
        self.slo_held = False
        self.failure = failure


@dataclass
class Timings:
    build_s: float = 0.0
    solve_s: float = 0.0
    decode_s: float = 0.0

    def as_dict(self, round_s: float) -> dict[str, float]:
        return {"build_s": self.build_s, "solve_s": self.solve_s, "decode_s": self.decode_s, "round_s": round_s}


#: The unscheduled arc of a job that must be placed: more than any placement costs (a placement's cost
#: is `(1 − Ut)·P` in SCALE units: beyond this only for a φ some ten thousand times its SLO), and small
#: enough that a round's total stays far inside int64.
MUST_PLACE_COST = 10**10


def unscheduled(costs: IntArray, table: JobTable, rows: IntArray) -> IntArray:
    """The cost model's unscheduled arcs, with those of jobs that must be placed raised to MUST_PLACE_COST."""
    must = table.must_place[rows]
    if not must.any():
        return costs
    out: IntArray = np.where(must, np.maximum(costs, MUST_PLACE_COST), costs)
    return out


def expected_vec(profile: Profile, remote_share: FloatArray, load: FloatArray, tau: float) -> FloatArray:
    """`profiles.expected_s` over arrays, for one profile (kept in step with it by a test). The profile's
    numbers go in as floats (the same products as one-element arrays, without making four of them)."""
    return expected_arrays(profile_params(profile, tau), remote_share, load)


def profile_params(profile: Profile, tau: float) -> tuple[float, float, float, float]:
    """`expected_vec`'s parameters of one profile (`tau`: the goal an unknown image's local time is
    taken at), as floats: for a caller that prices many arrays for the same job."""
    return (float(profile.base_s if profile.known else tau), float(profile.transfer_share),
            float(profile.remote_factor), float(profile.load_sensitivity))


def request(job: Job) -> str:
    """A job's request in words, for reasons: `2 task(s) of 4 cpus, 16 GB, 2 gpu`."""
    t = job.tasks
    return _request_words(t.count, t.cpus, t.memory_gb, tuple(t.devices.items()))


@lru_cache(maxsize=1024)
def _request_words(count: int, cpus: float, memory_gb: float, devices: tuple[tuple[str, int], ...]) -> str:
    """`request`'s words per distinct request (a full cluster's round says them for thousands of jobs
    asking the same few things). Bounded: requests are the tenants' to choose."""
    t = TaskRequest(count, cpus, memory_gb, dict(devices))
    wants = "".join(f", {t.wants(k)} {k}" for k in t.kinds)
    return f"{t.count} task(s) of {t.cpus:g} cpus, {t.memory_gb:g} GB{wants}"


def gang_shortfall(state: FreeState, job: Job, takes: NDArray[np.float64] | IntArray, server_centric: bool) -> str:
    """A gang that only partly fits, said of the whole gang: how many of its tasks the machines take now
    (`takes`, per machine) and the machines that take the most, with what they have free."""
    t = job.tasks
    wants = "".join(f", {t.wants(k)} {k}" for k in t.kinds)
    where = " with its devices on its own machine" if server_centric and t.kinds else ""
    best = [int(m) for m in np.argsort(-np.asarray(takes), kind="stable")[:3] if takes[m] > 0]
    names = state.cluster.locations

    def free_at(m: int) -> str:
        devices = "".join(f", {int(state.local_free(k)[m])} {k}" for k in t.kinds)
        return f"{state.cpu[m]:g} cpus{devices} free"

    shown = "; ".join(f"{names[m]} takes {int(takes[m])} ({free_at(m)})" for m in best) or "none takes one"
    return (f"needs {t.count} tasks × ({t.cpus:g} cpus, {t.memory_gb:g} GB{wants}){where}; the machines take "
            f"{int(np.sum(takes))} of them now: {shown}")


def flow_lists(tails: IntArray, heads: IntArray, costs: IntArray, flows: IntArray) -> dict[int, list[list[int]]]:
    """For each tail node, [head, flow] pairs with flow, cheapest first. The inner lists are shared and
    mutable: the decoder counts the flow down as it hands machines out."""
    nz = np.nonzero(flows)[0]
    if len(nz) == 0:
        return {}
    order = nz[np.lexsort((costs[nz], tails[nz]))]
    t = tails[order]
    h = heads[order].tolist()
    f = flows[order].tolist()
    starts = np.nonzero(np.r_[True, t[1:] != t[:-1]])[0].tolist()
    ends = [*starts[1:], len(order)]
    owner = t[starts].tolist()
    return {owner[k]: [[h[i], f[i]] for i in range(b, e)] for k, (b, e) in enumerate(zip(starts, ends, strict=True))}


def profile_arrays(jobs: Sequence[RoundJob], tau: FloatArray | None = None
                   ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per job: local time (τ for an unknown image), transfer share, remote factor, load sensitivity.
    `tau`: the jobs' τ, when the caller has read it already."""
    profiles = list(map(attrgetter("profile"), jobs))
    base = np.where(column(profiles, "known", np.bool_), column(profiles, "base_s"),
                    column(jobs, "tau") if tau is None else tau)
    return (base, column(profiles, "transfer_share"), column(profiles, "remote_factor"),
            column(profiles, "load_sensitivity"))


def expected_arrays(params: tuple[FloatArray | float, ...], remote_share: FloatArray,
                    load: FloatArray) -> FloatArray:
    """`profiles.expected_s` for many jobs at once."""
    base, ts, rf, sens = params
    # `np.clip(load, 0, 1)` as two ufuncs (clip's Python wrapper costs more than both on the few
    # elements a round prices at a time); only a zero's sign may differ, which 1 + sens·load erases.
    stretch = rf * (1.0 + sens * np.minimum(np.maximum(load, 0.0), 1.0))
    out: FloatArray = base * ((1.0 - ts) + ts * ((1.0 - remote_share) + remote_share * stretch))
    return out


def _numbers(jobs: Sequence[RoundJob]) -> FloatArray:
    """The float columns of `JobTable.of` as the rows of one C-ordered array: τ, z, gbps, local time,
    place in the queue, W, then `profile_arrays`' four (local time, τ for an unknown image; transfer
    share; remote factor; load sensitivity). One pass over the jobs and one conversion, the same floats
    as a pass per column (sixteen numpy calls, most of making a table of the few jobs a round re-admits)."""
    if not jobs:
        return np.zeros((10, 0), dtype=np.float64)
    rows = [(js.tau, js.z, js.gbps, js.phi_local, js.order, js.wait_rounds, p.base_s if p.known else js.tau,
             p.transfer_share, p.remote_factor, p.load_sensitivity) for js in jobs for p in (js.profile,)]
    out: FloatArray = np.array(rows, dtype=np.float64).T.copy()
    return out


@dataclass
class JobTable:
    """The numbers of every job of a round as arrays, indexed by `RoundJob.index`, so that phases
    gather them with one fancy index instead of one Python pass per number."""

    tau: FloatArray
    z: FloatArray
    gbps: FloatArray
    phi_local: FloatArray
    order: FloatArray
    waits: FloatArray
    params: tuple[FloatArray, FloatArray, FloatArray, FloatArray]
    guard: IntArray
    must_place: NDArray[np.bool_]
    #: Each job's fair-share term on its unscheduled arc (integer-scaled), or None in a round without
    #: one (no tenants, or one tenant only): `placement.fairness`.
    fair: IntArray | None = None
    #: The float columns as the rows of one array (`_numbers`: tau, z, gbps, phi_local, order, waits,
    #: then `params`), each of those fields a row of it; None in a table made field by field.
    numbers: FloatArray | None = None

    @classmethod
    def of(cls, jobs: Sequence[RoundJob], bonus: Mapping[str, float] | None = None) -> JobTable:
        """The jobs' numbers; `bonus`: the fair-share term of each tenant's jobs (utility units)."""
        for i, js in enumerate(jobs):
            js.index = i
        fair = None
        if bonus:
            terms = np.fromiter(map(bonus.get, map(attrgetter("job.tenant"), jobs), repeat(0.0)), dtype=np.float64,
                                count=len(jobs))
            fair = np.rint(terms * SCALE).astype(np.int64)
        return cls._of_numbers(_numbers(jobs), column(jobs, "guard", np.int64), column(jobs, "must_place", np.bool_),
                               fair)

    @classmethod
    def _of_numbers(cls, numbers: FloatArray, guard: IntArray, must_place: NDArray[np.bool_],
                    fair: IntArray | None) -> JobTable:
        """The table whose float columns are the rows of `numbers` (`_numbers`' order)."""
        tau, z, gbps, phi_local, order, waits, base, ts, rf, sens = numbers
        return cls(tau=tau, z=z, gbps=gbps, phi_local=phi_local, order=order, waits=waits, params=(base, ts, rf, sens),
                   guard=guard, must_place=must_place, fair=fair, numbers=numbers)

    def extended(self, jobs: Sequence[RoundJob], fresh: Sequence[RoundJob], bonus: Mapping[str, float] | None = None
                 ) -> JobTable:
        """`JobTable.of(jobs, bonus)` where `jobs` is this table's jobs followed by `fresh` (re-admission
        only appends) and no number of this table's jobs changed but `must_place` (the liveness rule's
        forced jobs): the new jobs' rows appended to these, the float columns in one call. A full
        cluster re-admits a few jobs to a round of hundreds, several times a round.

        No new jobs (an iteration that forced some, or gave second tries, which no number of the table
        reads): this table itself where `must_place` is as it was, else this table with that column
        replaced. (Half the calls of a simulated run: two dozen numpy calls to copy the same numbers,
        and a new table that made the cost model price its unscheduled arcs again, `task_to_unscheduled`.)"""
        if not fresh:
            must_place = column(jobs, "must_place", np.bool_)
            return self if np.array_equal(must_place, self.must_place) else replace(self, must_place=must_place)
        old = len(jobs) - len(fresh)
        new = JobTable.of(fresh, bonus)
        for i, js in enumerate(fresh, old):
            js.index = i
        fair = None if self.fair is None or new.fair is None else np.concatenate((self.fair, new.fair))
        mine = self.numbers
        if mine is None:  # (a table made field by field: its columns stacked as `_numbers` orders them)
            mine = np.stack((self.tau, self.z, self.gbps, self.phi_local, self.order, self.waits, *self.params))
        assert new.numbers is not None
        return JobTable._of_numbers(np.concatenate((mine, new.numbers), axis=1),
                                    np.concatenate((self.guard, new.guard)), column(jobs, "must_place", np.bool_),
                                    fair)

    @staticmethod
    def indices(jobs: Sequence[RoundJob]) -> IntArray:
        return column(jobs, "index", np.int64)

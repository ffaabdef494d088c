"""Cost models: what each flow policy answers for each arc type of its networks (`COST_MODELS` by name).

    phase 1 (cpu, memory):   job → U                 task_to_unscheduled
                             class → machine         task_to_machine, task_to_machine_capacity
                             X_shape → machine       shape_to_machine
                             machine → sink (spill)  remote_surcharge
    phase k (one kind):      task → U                task_to_unscheduled
                             task → own location     subtask_to_local
                             task → R_rack | C       subtask_to_remote
                             R_rack | C → location   remote_to_location

A cost model prices arcs, says which exist and bounds their capacity; it never builds a network (the
phase modules do: graph lifecycle stays out of it). The three flow policies differ only here:

- `drmaestro`: devices may be remote; blind to network load (it prices φ at zero load and never
  refuses a placement for its SLO);
- `drmaestro-na`: the same, pricing the links' current load into φ and adding a postponement to the
  arcs that would miss the SLO while waiting can help (`cost.postponement`), which the unscheduled
  arc's W term outgrows (and, once this round's traffic is on the links, re-checking the grants);
- `firmament`: server-centric: a task's devices come from its own machine, so no remote arc exists.

The formulas (Eq. 6–8, preferences, integer scaling) are `cost.py`'s; the models only apply them.
Fair share between tenants (issue 15) is a term on the unscheduled arc: `task_to_unscheduled` adds
each job's `JobTable.fair` (its tenant's term, from `placement.fairness`; absent without tenants).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from disagg.model import DEVICE_KINDS, TaskRequest
from disagg.placement.commit import EPS
from disagg.placement.cost import (
    P_CROSS,
    P_LOCAL,
    P_RACK,
    P_SPARE_DEVICES,
    SCALE,
    SPREAD,
    WAIT_STEP,
    _utility1,
    age_bonus,
    goal_s,
    outwaits,
    placing_cost,
    postponement,
    unscheduled_cost,
    utility,
)
from disagg.placement.decisions import DeviceGrant, Reason
from disagg.placement.jobstate import (
    FloatArray,
    IntArray,
    JobTable,
    RoundJob,
    SloGuard,
    expected_arrays,
    profile_params,
    request,
)
from disagg.placement.queue import task_fit_counts
from disagg.placement.state import FreeState
from disagg.profiles import expected_s

BoolArray = NDArray[np.bool_]

#: The remote share of a device's path priced alone (all of it remote), as `expected_arrays` takes it.
_ONE = np.ones(1)
_ONE.flags.writeable = False
_GUARD_NONE, _GUARD_TRAFFIC = int(SloGuard.NONE), int(SloGuard.TRAFFIC)
#: The preferences of a remote device in the task's rack and across racks, as a column (rows of a pass).
_REMOTE_PREFERENCES = np.array([[P_RACK], [P_CROSS]])
_REMOTE_PREFERENCES.flags.writeable = False

#: NA only: cost per unit of load on a remote location's uplink (steers remote devices to quiet links).
LOAD_COST = 0.2
#: The largest preference P an arc to a machine or a remote device carries (phase 1: P_LOCAL plus the
#: spread and the spare-devices terms; phase k: P_CROSS): what `hold_bound` prices a placement at.
P_MAX = max(P_CROSS, P_LOCAL + SPREAD + P_SPARE_DEVICES * (len(DEVICE_KINDS) - 1))


# -- what the models are asked about ---------------------------------------------------------------


class RemoteCheck(Protocol):
    """A cost model's check of one job's remote paths (`CostModel.remote_check`), for the decoder: asked
    before the device's traffic is taken, whether the placement holds once it is on the path."""

    def __call__(self, path: tuple[int, ...]) -> bool:
        """Whether the path (link indices) holds; may note on the job that it was let through missing
        its SLO (the decoder then takes it)."""
        ...

    def first_kept(self, own: int, locs: list[int], fits: list[bool], loads: FloatArray) -> int:
        """The first of `locs` (devices for a task on `own`) whose path `fits` and that the check would
        not reject, with each path's busiest-link load with the device's traffic on it in `loads`;
        `len(locs)` if none. Notes nothing on the job (the decoder asks `__call__` of that one)."""
        ...

    def from_machine(self, own: int) -> RemoteCheck:
        """The check for the next device of a task on `own`, as the links stand: itself, or `REFUSE_ALL`
        where it can tell at once that it rejects every path from there (the decoder then walks past
        each without pricing it). Valid until traffic is taken (rejected tries may be retraced)."""
        ...


class RefuseAll:
    """A `RemoteCheck` that rejects every path and notes nothing: what a check answers for a task whose
    every path misses (`SloCheck.from_machine`), without pricing each."""

    __slots__ = ()

    def __call__(self, path: tuple[int, ...]) -> bool:
        return False

    def first_kept(self, own: int, locs: list[int], fits: list[bool], loads: FloatArray) -> int:
        return len(locs)

    def from_machine(self, own: int) -> RemoteCheck:
        return self


REFUSE_ALL = RefuseAll()
#: How far below the task's uplink load `SloCheck.from_machine` prices it (relative): more than the
#: ulps the decoder's retraced rejections (x + g − g, at most some hundred a task) can move it down.
_LOAD_MARGIN = 1e-9


@dataclass(frozen=True, slots=True)
class MachineColumns:
    """The machines a request shape may go to (the columns of its arcs), with what prices them."""

    #: Per machine, the share of a task's devices that would have to be remote there.
    share: FloatArray
    #: Per machine, its uplink's current load (0..1+); a model blind to the network ignores it.
    load: FloatArray
    #: Per machine, the preference P (Firmament's load spreading, spare devices).
    pref: FloatArray


@dataclass(frozen=True, slots=True)
class ClassRows:
    """The classes of one shape (the rows of its arcs), each as a column vector of shape (classes, 1)."""

    #: The profile's local time, transfer share, remote factor and load sensitivity (`profile_arrays`).
    params: tuple[FloatArray, ...]
    tau: FloatArray
    z: FloatArray
    phi_local: FloatArray
    #: What the cost model holds each class back for (`jobstate.SloGuard`; a class's jobs share it).
    guard: IntArray

    @classmethod
    def of(cls, params: tuple[FloatArray, ...], reps: Sequence[RoundJob]) -> ClassRows:
        def col(values: list[float]) -> FloatArray:
            return np.array(values)[:, None]

        return cls(tuple(a[:, None] for a in params), col([js.tau for js in reps]), col([js.z for js in reps]),
                   col([js.phi_local for js in reps]),
                   np.array([js.guard for js in reps], dtype=np.int64)[:, None])


class SubtaskColumns(Protocol):
    """Per task of a device phase (its sub-tasks share its arcs): what its sub-task arcs are priced with."""

    own: IntArray
    tau: FloatArray
    z: FloatArray
    gbps: FloatArray
    phi_local: FloatArray
    params: tuple[FloatArray, ...]
    guard: IntArray
    #: Per task, its job's own traffic of this round (Gb/s) on the task's uplink and on its rack's uplink.
    own_up: FloatArray
    own_rack: FloatArray


@dataclass(frozen=True, slots=True)
class MachineArcs:
    """Costs of arcs to machines (every machine given is offered one); `hold`: the part of each cost that
    is the SLO's postponement (None: none), for the explanation."""

    cost: IntArray
    hold: IntArray | None = None


@dataclass(frozen=True, slots=True)
class RemoteArcs:
    """Per task: whether a remote arc in its rack (`rack_ok`) or across racks exists, at what cost, and
    whether that cost carries a hold for the SLO (`slo_blocked`, for the explanation)."""

    rack_ok: BoolArray
    cross_ok: BoolArray
    rack_cost: IntArray
    cross_cost: IntArray
    slo_blocked: BoolArray


# -- the interface ---------------------------------------------------------------------------------


class CostModel(Protocol):
    """One policy's answer to one question per arc type (see the module docstring). Pure: the models
    read the round's `FreeState` and job numbers and change nothing."""

    name: str
    #: Whether a task's devices must all sit in its own machine (server-centric): phase 1 then bounds
    #: a machine's tasks by the local devices they claim.
    local_only: bool
    #: Whether `slo_guard` may hold a job back at all (a model blind to the SLO holds none: the placer
    #: then does not ask it job by job).
    guards_slo: bool

    def task_to_unscheduled(self, table: JobTable, rows: IntArray, queue_len: int) -> IntArray:
        """The cost of leaving each of `rows` (a job, or a task of it, by its row in `table`) unscheduled."""
        ...

    def task_to_machine(self, rows: ClassRows, machines: MachineColumns) -> MachineArcs:
        """Class → machine arcs: a (classes × machines) cost matrix and which arcs exist. Element by
        element (no arc's cost reads another's): `phase_one.class_costs` also hands it flat pairs, each
        class's numbers and each machine's as 1-D arrays of one element per arc."""
        ...

    def shape_to_machine(self, rows: ClassRows, machines: MachineColumns) -> MachineArcs:
        """Aggregator → machine arcs of a shape, priced as its first class (`rows`: one row) would be: a
        (1 × machines) matrix. Element by element, as `task_to_machine`: `phase_one.shape_costs` also hands
        it several shapes' first classes and machines as flat pairs."""
        ...

    def machine_arcs(self, rows: ClassRows, machines: MachineColumns, as_shape: BoolArray) -> MachineArcs:
        """`shape_to_machine` and `task_to_machine` in one call, element by element (every array broadcast
        against the others): the pairs where `as_shape` is set priced as a shape's aggregator arcs, the
        others as class arcs (`hold`: the class arcs' postponements, None where there is none at all).
        `phase_one.machine_costs` prices a round's aggregators and classes at once with it."""
        ...

    def task_to_machine_capacity(self, state: FreeState, js: RoundJob, local_free: dict[str, IntArray],
                                 min_gbps: float) -> IntArray:
        """How many tasks of this request each machine can take (`min_gbps`: the least any class of the
        shape draws per remote device)."""
        ...

    def machines_allowed(self, state: FreeState, js: RoundJob) -> tuple[BoolArray | None, IntArray]:
        """The machines a task may go to whatever the price (the decoder's repair): a mask (None: every
        machine) and those machines, ascending."""
        ...

    def why_no_machine(self, state: FreeState, js: RoundJob) -> tuple[Reason, str]:
        """Why a job that the model offers no machine at all waits."""
        ...

    def remote_surcharge(self, rows: ClassRows) -> IntArray | None:
        """Per class, what all-remote devices cost over all-local ones: the price of the machine → sink
        spill arc. None: the model never puts devices remote (no spill arc)."""
        ...

    def subtask_to_local(self, tasks: SubtaskColumns) -> IntArray:
        """Per task, the cost of a device on its own machine."""
        ...

    def subtask_to_remote(self, state: FreeState, tasks: SubtaskColumns) -> RemoteArcs | None:
        """Per task, the remote arcs (in its rack, across racks); None: there are no remote arcs at all."""
        ...

    def remote_to_location(self, uplink_load: FloatArray, rack_load: FloatArray) -> tuple[IntArray, IntArray]:
        """Rack and cross-rack aggregators → locations: the cost of a device at each location, given the
        load on its uplink (and on its rack's uplink, across racks)."""
        ...

    def remote_check(self, state: FreeState, js: RoundJob) -> RemoteCheck | None:
        """For the job's next remote devices: whether a path, once the device's traffic is on it, keeps
        the remote arc cheaper than waiting (asked before the traffic is taken). None: every path does.
        The decoder asks it of every path it tries for a task (tens of them), so what does not depend
        on the path is worked out once here."""
        ...

    def remote_load(self, state: FreeState, grants: tuple[DeviceGrant, ...]) -> float:
        """The link load a task's remote devices are priced at, for the expected time its placement reports."""
        ...

    def slo_guard(self, state: FreeState, js: RoundJob) -> SloGuard:
        """What the model holds this job back for this round, to keep its SLO (the liveness rule:
        docs/design-decisions.md, "No job waits forever"). A function of the free state and the job's
        request (its shape and task count) only: the placer asks once per distinct request."""
        ...

    def at_risk(self, js: RoundJob, expected_s: float) -> bool:
        """Whether a placement expected to take `expected_s` is one the model places knowing it misses the SLO."""
        ...


def unscheduled_arcs(table: JobTable, rows: IntArray, queue_len: int) -> IntArray:
    """The unscheduled arc of each of `rows` (a job, or a task of it, by its row in `table`): Eq. 8 (with
    W) and the age tie-break, plus the fair-share term of the job's tenant (a round with tenants:
    `placement.fairness`), so that the flow prefers tenants below their share. Each row's from its own
    numbers alone."""
    cost: IntArray = (unscheduled_cost(table.tau[rows], table.z[rows], table.waits[rows])
                      + age_bonus(table.order[rows], queue_len))
    if table.fair is not None:
        cost = cost + table.fair[rows]
    return cost


# -- the models ------------------------------------------------------------------------------------


class DRMaestroCostModel:
    """DRMaestro (seed 001): devices may be remote (P = 1 local, 1.05 in the rack, 1.1 across racks),
    priced at an idle network; every placement is offered, whatever its SLO."""

    name = "drmaestro"
    local_only = False
    guards_slo = False

    def __init__(self) -> None:
        #: What an uplink carries of a shape's remote devices (`_carried`) by (kinds, models, gbps), for one
        #: free state at one `version` (free devices and link usage, all it reads): a round's phase 1 asks
        #: it for each shape, most of them alike, and again in the next iteration when no device phase
        #: took anything in between.
        self._supply: dict[tuple[object, ...], FloatArray] = {}
        self._supply_of: tuple[FreeState | None, int] = (None, -1)
        #: Per link, its capacity less its use (and EPS), for the same state and version (None: not yet).
        self._free_link: FloatArray | None = None

    # What the model sees of the network: DRMaestro prices φ at zero load and never looks at the SLO.
    # (`drmaestro-na` overrides these two; every arc answer below goes through them.)

    def priced_load(self, load: FloatArray) -> FloatArray:
        """The link load φ is priced at: none."""
        return np.zeros(np.shape(load))

    def postponement(self, phi_s: FloatArray, tau: FloatArray | float, guard: IntArray | int,
                     quiet: Callable[[], FloatArray], others: Callable[[], FloatArray] | None = None) -> IntArray:
        """What each placement costs on top of Eq. 7 because it would miss the SLO (φ > τ) while the job
        is held back for it (`guard`; `quiet()`: φ of the same placements with no traffic of others on
        the links; `others()`: with only others' traffic, when `phi_s` also counts the job's own): nothing."""
        return np.zeros(np.shape(phi_s), dtype=np.int64)

    def slo_guard(self, state: FreeState, js: RoundJob) -> SloGuard:
        """Blind to the SLO: holds no job back."""
        return SloGuard.NONE

    def at_risk(self, js: RoundJob, expected_s: float) -> bool:
        return False

    # -- phase 1 --

    #: The unscheduled arcs priced on the last table (`task_to_unscheduled`): the table, the queue
    #: length, each row's cost and which rows have one.
    _unscheduled_kept: tuple[JobTable, int, IntArray, NDArray[np.bool_]] | None = None

    def task_to_unscheduled(self, table: JobTable, rows: IntArray, queue_len: int) -> IntArray:
        """`unscheduled_arcs`, kept per row of `table` (for the same queue length): a job's arc reads only
        its row's numbers, which a table never changes, and a round's phase 1 and device phases ask
        it for the same jobs of the same table (two dozen numpy calls each time otherwise)."""
        kept = self._unscheduled_kept
        if kept is not None and kept[0] is table and kept[1] == queue_len:
            _, _, cost, known = kept
            if known[rows].all():
                out: IntArray = cost[rows]
                return out
        else:
            n = len(table.tau)
            cost, known = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
            self._unscheduled_kept = (table, queue_len, cost, known)
        fresh = unscheduled_arcs(table, rows, queue_len)
        cost[rows] = fresh
        known[rows] = True
        return fresh

    def task_to_machine(self, rows: ClassRows, machines: MachineColumns) -> MachineArcs:
        share = machines.share[None, :]
        ph = expected_arrays(rows.params, share, self.priced_load(machines.load)[None, :])
        cost = placing_cost(ph, rows.tau, rows.z, machines.pref[None, :])
        # Remote devices that would miss the SLO, and do worse than the job's local time, pay the hold.
        hold = self.postponement(ph, rows.tau, rows.guard,
                                 lambda: expected_arrays(rows.params, share, np.zeros((1, len(machines.load)))))
        hold = np.where((share > 0) & (ph > rows.phi_local), hold, 0)
        return MachineArcs(cost + hold, hold if hold.any() else None)

    def shape_to_machine(self, rows: ClassRows, machines: MachineColumns) -> MachineArcs:
        ph = expected_arrays(rows.params, machines.share, self.priced_load(machines.load))
        cost = placing_cost(ph, rows.tau, rows.z, machines.pref)
        # Machines where the shape's first class would miss its SLO remotely pay its hold.
        idle = np.zeros(len(machines.load))
        hold = self.postponement(ph, rows.tau, rows.guard,
                                 lambda: expected_arrays(rows.params, machines.share, idle))
        cost = cost + np.where(machines.share > 0, hold, 0)
        return MachineArcs(cost)

    def machine_arcs(self, rows: ClassRows, machines: MachineColumns, as_shape: BoolArray) -> MachineArcs:
        # The steps of both, once: the same φ, Eq. 7 and hold for every pair; only which pairs pay the hold
        # differs (a class's where φ also exceeds its local time, an aggregator's wherever it goes remote).
        share = machines.share
        ph = expected_arrays(rows.params, share, self.priced_load(machines.load))
        cost = placing_cost(ph, rows.tau, rows.z, machines.pref)
        hold = self.postponement(ph, rows.tau, rows.guard,
                                 lambda: expected_arrays(rows.params, share, np.zeros(np.shape(machines.load))))
        if not hold.any():  # (the usual pricing, and DRMaestro's every one: no pair held, nothing to mask)
            return MachineArcs(cost, None)
        hold = np.where((share > 0) & (as_shape | (ph > rows.phi_local)), hold, 0)
        return MachineArcs(cost + hold, np.where(as_shape, 0, hold) if hold.any() else None)

    def task_to_machine_capacity(self, state: FreeState, js: RoundJob, local_free: dict[str, IntArray],
                                 min_gbps: float) -> IntArray:
        """What cpus and memory fit, and no more than the machine's own free devices plus what its uplink
        carries at `min_gbps` can serve."""
        t = js.job.tasks
        out = task_fit_counts(state, t.cpus, t.memory_gb)
        if not t.kinds or min_gbps <= 0:
            return out
        n = state.n_machines
        carried = self._carried(state, t.kinds, t.models, min_gbps)
        local = [(_own_free(state, js, k, local_free), t.wants(k)) for k in t.kinds]
        if len(local) == 1:  # one kind (the usual case): a closed form
            (own, want), = local
            one: IntArray = np.minimum(out, np.floor((carried + own) / want).astype(np.int64))
            return one
        # Several kinds: each kind's local devices serve only that kind, the uplink carries the rest
        # of all of them; the most tasks whose remote devices together fit what it carries.
        served = np.zeros(n, dtype=np.int64)
        for tasks in range(1, int(out.max(initial=0)) + 1):
            ok = sum(np.maximum(tasks * want - own, 0) for own, want in local) <= carried
            if not ok.any():
                break
            served[ok] = tasks
        return np.minimum(out, served)

    def _carried(self, state: FreeState, kinds: tuple[str, ...], models: Mapping[str, str], gbps: float
                 ) -> FloatArray:
        """Per machine, how many remote devices of `kinds` (`models` pinned) at `gbps` each its uplink carries
        (none below zero), nor more than the other locations' uplinks (and, across racks, the racks'
        uplinks) can serve at all (`_reachable_supply`). Kept while `state` stays at its `version`
        (read-only: shared), with the links' headroom that every key reads."""
        if self._supply_of[0] is not state or self._supply_of[1] != state.version:
            self._supply.clear()
            self._supply_of = (state, state.version)
            self._free_link = None
        key = (kinds, tuple(models.items()), gbps)
        found = self._supply.get(key)
        if found is None:
            if self._free_link is None:
                self._free_link = state.link_cap - state.link_used + EPS
            free_link = self._free_link
            own = np.floor(free_link[:state.n_machines] / gbps)
            reach = _reachable_supply(state, kinds, models, gbps, np.maximum(free_link, 0))
            found = self._supply[key] = np.maximum(np.minimum(own, reach), 0)
        return found

    def machines_allowed(self, state: FreeState, js: RoundJob) -> tuple[BoolArray | None, IntArray]:
        return None, state.all_machines

    def why_no_machine(self, state: FreeState, js: RoundJob) -> tuple[Reason, str]:
        """No machine has the cpus and memory; or those that have cannot reach the devices: too few
        free (NO_DEVICES) or too little bandwidth to them (NO_BANDWIDTH), said of the best of them."""
        t = js.job.tasks
        fits = task_fit_counts(state, t.cpus, t.memory_gb) > 0
        if not t.kinds or not fits.any():
            return Reason.NO_CAPACITY, f"no machine has {t.cpus:g} cpus and {t.memory_gb:g} GB free"
        for kind in t.kinds:
            model = t.models.get(kind)
            reach = state.reachable_from(kind, np.nonzero(fits)[0][:64], js.gbps, model)
            if reach.max() < t.wants(kind):
                m = int(np.nonzero(fits)[0][int(np.argmax(reach))])
                free = state.total_free(kind, model)
                reason = Reason.NO_DEVICES if free < t.wants(kind) else Reason.NO_BANDWIDTH
                return reason, (f"needs {t.wants(kind)} {kind}, {int(reach.max())} free within "
                                f"{state.link_cap[m]:g} Gb/s of {state.cluster.locations[m]}")
        return Reason.NO_BANDWIDTH, (f"needs {request(js.job)}; no machine with the cpus free can reach all "
                                     f"its devices at {js.gbps:g} Gb/s each (uplinks full)")

    def remote_surcharge(self, rows: ClassRows) -> IntArray | None:
        """A class that would rather wait than go remote (its surcharge is more than its own cost of
        waiting: a goal no remote device meets) prices nothing: it must not set the price of going
        remote for the classes that do (one tenant's impossible SLO would hold every job of its shape).
        A few classes (a simulated round's phase 1: a handful, thousands of times a run) are priced one by
        one in Python floats (`surcharge1`), where the arrays' some twenty numpy calls cost more."""
        if len(rows.tau) <= SURCHARGE_LIST_MAX:
            columns = [a[:, 0].tolist() for a in (*rows.params, rows.tau, rows.z)]
            found = list(itertools.starmap(surcharge1, zip(*columns, strict=True)))
            if None not in found:
                return np.array(found, dtype=np.int64)
        return remote_surcharges(rows)

    # -- phase k --

    def subtask_to_local(self, tasks: SubtaskColumns) -> IntArray:
        return placing_cost(tasks.phi_local, tasks.tau, tasks.z, P_LOCAL)

    def subtask_to_remote(self, state: FreeState, tasks: SubtaskColumns) -> RemoteArcs | None:
        """A remote arc exists where the task's uplink (and, across racks, its rack's) has the headroom
        for its traffic; it costs `(1 − Ut(φ))·P` with φ all-remote, plus the hold where it misses the SLO
        while waiting can help (`slo_blocked`)."""
        own, gbps = tasks.own, tasks.gbps
        n = len(own)
        load = state.link_load()
        headroom = state.link_cap - state.link_used
        own_rack_link = len(state.loc_rack) + state.loc_rack[own]
        can_send = headroom[own] + EPS >= gbps
        # In the rack (row 0) and across racks (row 1) in one (2 × tasks) pass: every formula below works
        # element by element, so each row is what pricing it alone gives, in half the numpy calls.
        up = load[own]
        phi = expected_arrays(tasks.params, _ONE, self.priced_load(_in_rack_and_across(up, load[own_rack_link])))
        rack_ok = can_send  # (its own array: nothing else holds it)
        cross_ok = can_send & (headroom[own_rack_link] + EPS >= gbps) if state.n_racks > 1 else np.zeros(n, dtype=bool)
        quiet: list[FloatArray] = []

        def phi_quiet() -> FloatArray:  # all-remote φ with no traffic of others: the same in and across racks
            if not quiet:
                quiet.append(expected_arrays(tasks.params, _ONE, np.zeros(n)))
            return quiet[0]

        def phi_others() -> FloatArray:
            # The link load without the job's own traffic of this round (its devices of an earlier kind).
            cap = state.link_cap
            others_up = np.maximum(state.link_used[own] - tasks.own_up, 0) / cap[own]
            others_rack = np.maximum(state.link_used[own_rack_link] - tasks.own_rack, 0) / cap[own_rack_link]
            return expected_arrays(tasks.params, _ONE, self.priced_load(_in_rack_and_across(others_up, others_rack)))

        hold = np.where(phi > tasks.phi_local, self.postponement(phi, tasks.tau, tasks.guard, phi_quiet, phi_others), 0)
        held = hold > 0  # (both rows at once)
        slo_blocked = (rack_ok & held[0]) | (cross_ok & held[1])
        cost = placing_cost(phi, tasks.tau, tasks.z, _REMOTE_PREFERENCES) + hold
        return RemoteArcs(rack_ok, cross_ok, cost[0], cost[1], slo_blocked)

    def remote_to_location(self, uplink_load: FloatArray, rack_load: FloatArray) -> tuple[IntArray, IntArray]:
        """Each unit of priced load on the location's uplink costs `LOAD_COST` (and across racks, its
        rack's uplink too), steering remote devices to quiet links; zero when the load is not priced."""
        # (np.clip(x, 0, 1) as two ufuncs: its Python wrapper costs more than both on a round's few locations.)
        rack: IntArray = np.rint(LOAD_COST * SCALE * np.minimum(np.maximum(self.priced_load(uplink_load), 0), 1)
                                 ).astype(np.int64)
        across = np.minimum(np.maximum(self.priced_load(rack_load), 0), 1)
        cross: IntArray = rack + np.rint(LOAD_COST * SCALE * across).astype(np.int64)
        return rack, cross

    def remote_check(self, state: FreeState, js: RoundJob) -> RemoteCheck | None:
        return None

    def remote_load(self, state: FreeState, grants: tuple[DeviceGrant, ...]) -> float:
        return 0.0


#: Up to how many classes `remote_surcharge` prices one by one (`surcharge1`) rather than as arrays (the
#: arrays' fixed cost is some forty microseconds, a class's in floats two or three).
SURCHARGE_LIST_MAX = 16
#: How many classes' numbers `surcharge1` remembers (a few hundred bytes each).
SURCHARGE_MEMO = 4096


def remote_surcharges(rows: ClassRows) -> IntArray:
    """`DRMaestroCostModel.remote_surcharge` as arrays: each class's placing cost with every device remote
    less with every device local (at zero load), kept where it is below the class's cost of waiting."""
    ends = placing_cost(expected_arrays(rows.params, np.array([[0.0, 1.0]]), np.zeros((1, 2))), rows.tau, rows.z,
                        P_LOCAL)
    surcharge = ends[:, 1] - ends[:, 0]
    out: IntArray = np.where(surcharge < unscheduled_cost(rows.tau[:, 0], rows.z[:, 0], 0), surcharge, 0)
    return out


@lru_cache(maxsize=SURCHARGE_MEMO)
def surcharge1(base: float, transfer: float, factor: float, sensitivity: float, tau: float, z: float) -> int | None:
    """`remote_surcharges` of one class (its profile numbers, τ and z) in plain floats: the same
    operations in the same order as `expected_arrays`, `placing_cost` and `unscheduled_cost` (each IEEE
    operation rounds alike in numpy and Python, `round` halves to even as `np.rint` does), so the same
    integer. None outside the ordinary range (τ ≤ 0 or a non-finite number): the arrays decide those.
    Memoised by its six floats (a pure function of them; 0.0 and -0.0, equal keys, give the same integer
    here): a waiting job's class is priced every phase 1 of every round it is admitted to."""
    # (Their sum is finite only where each is: one test for six; an overflowing sum just goes the arrays' way.)
    if not (tau > 0 and math.isfinite(base + transfer + factor + sensitivity + tau + z)):
        return None
    stretch = factor * (1.0 + sensitivity * 0.0)  # (zero load: `expected_arrays`'s clip of it is itself)
    local = base * ((1.0 - transfer) + transfer * ((1.0 - 0.0) + 0.0 * stretch))  # every device local
    remote = base * ((1.0 - transfer) + transfer * ((1.0 - 1.0) + 1.0 * stretch))  # every device remote
    surcharge = (round(max((1.0 - _utility1(remote, tau, z)) * P_LOCAL, 0.0) * SCALE)
                 - round(max((1.0 - _utility1(local, tau, z)) * P_LOCAL, 0.0) * SCALE))
    wait = round(((1.0 - _utility1(2.0 * tau, tau, z)) * P_LOCAL + WAIT_STEP * 0.0) * SCALE) + 1
    return surcharge if surcharge < wait else 0


class DRMaestroNACostModel(DRMaestroCostModel):
    """DRMaestro NA: φ includes the slowdown the profile predicts under the current link load (the
    seed's sensitivity factor), and a remote device that would then miss the SLO (and do worse than
    local) while waiting can help costs a postponement on top (`cost.postponement`): the flow waits
    while the expected miss is large against the job's W, and places it once waiting costs more."""

    name = "drmaestro-na"
    guards_slo = True

    def priced_load(self, load: FloatArray) -> FloatArray:
        return load

    def postponement(self, phi_s: FloatArray, tau: FloatArray | float, guard: IntArray | int,
                     quiet: Callable[[], FloatArray], others: Callable[[], FloatArray] | None = None) -> IntArray:
        """`cost.postponement(φ, τ)` where φ > τ and the job is held back for it: for any miss
        (`SloGuard.ALL`), or only where the traffic of others makes the miss, i.e. where φ with no such
        traffic would meet τ (`SloGuard.TRAFFIC`); nothing elsewhere (waiting cannot help there)."""
        # (Against the guards' plain ints: numpy compares an array with an IntEnum member several times slower.)
        held: BoolArray = (phi_s > tau) & (np.asarray(guard) != _GUARD_NONE)
        traffic = np.asarray(guard) == _GUARD_TRAFFIC
        if (held & traffic).any():
            by_others = phi_s if others is None else others()
            held &= ~traffic | ((quiet() <= tau) & (by_others > tau))
        if not held.any():  # the usual case: no arc misses, so none needs the miss priced
            return np.zeros(held.shape, dtype=np.int64)
        out: IntArray = np.where(held, postponement(phi_s, tau), 0)
        return out

    def slo_guard(self, state: FreeState, js: RoundJob) -> SloGuard:
        """What waiting can help with: ALL while the machines, were nothing running, could hold every
        task with its devices local (a placement that meets the SLO then comes once running jobs end);
        TRAFFIC when some devices must be remote anyway (only a miss that others' traffic causes is
        waited out). How long it is held is the postponement's business, not the guard's."""
        return SloGuard.ALL if state.idle_local_fit(js.shape) >= js.count else SloGuard.TRAFFIC

    def at_risk(self, js: RoundJob, expected_s: float) -> bool:
        """Placed knowing it misses the SLO: φ over τ and over its local time."""
        return expected_s > js.tau and expected_s > js.phi_local

    def remote_check(self, state: FreeState, js: RoundJob) -> SloCheck:
        return SloCheck(self, state, js)

    def remote_load(self, state: FreeState, grants: tuple[DeviceGrant, ...]) -> float:
        """The busiest link any of the task's devices crosses."""
        return state.load(sorted({state.link_index[x] for g in grants for x in g.path}))


def outwaited(js: RoundJob, expected_s: float) -> bool:
    """Whether waiting costs the job more than a remote placement expected to take `expected_s` with
    its postponement, priced as its dearest remote arc (P_CROSS, two loaded uplinks): the decoder's
    re-check once this round's traffic is on the links. A job that must be placed always is."""
    if js.must_place:
        return True
    return outwaits(expected_s, js.tau, js.z, js.wait_rounds, P_CROSS, round(2 * LOAD_COST * SCALE))


class SloCheck:
    """`DRMaestroNACostModel.remote_check`: with this round's traffic and the device's own on the path,
    the placement meets the SLO; or waiting cannot help (TRAFFIC: its own traffic alone already makes it
    miss); or it still costs less than waiting (`outwaited`). A miss it lets through is noted on the job
    (`slo_risk`; `slo_held` when the job had been held for it): the placement is then `slo_at_risk`.

    Made once per task the decoder serves: the job's goal is worked out once for all the paths tried,
    whether waiting outweighs a placement is asked of `outwaited` only where the answers known for the
    task do not settle it (`_outwaits`), and `first_kept` prices a whole list of paths in one pass (a
    held task's decoder tries tens of paths and rejects nearly all of them)."""

    __slots__ = ("_at_risk", "_goal", "_held_from", "_js", "_kept_to", "_monotone", "_params", "_state")

    def __init__(self, model: DRMaestroNACostModel, state: FreeState, js: RoundJob) -> None:
        self._at_risk = model.at_risk
        self._state = state
        self._js = js
        self._goal = goal_s(js.job, js.profile)
        self._params = profile_params(js.profile, self._goal)
        #: Whether φ never falls as the load grows: every number of the product not negative, and finite
        #: (their sum is not finite where one is NaN or infinite; a NaN also fails its comparison).
        base, share, factor, sensitivity = self._params
        self._monotone = (base >= 0.0 and share >= 0.0 and factor >= 0.0 and sensitivity >= 0.0
                          and math.isfinite(base + share + factor + sensitivity))
        #: `_outwaits`'s bracket: the largest φ known to outwait waiting, the least known not to.
        self._kept_to = -math.inf
        self._held_from = math.inf

    def __call__(self, path: tuple[int, ...]) -> bool:
        js = self._js
        after = expected_s(js.profile, 1.0, self._state.load_with(path, js.gbps), self._goal)
        if not self._at_risk(js, after):
            return True
        helps = self._helps(path[0], path[-1])
        if helps and not self._outwaits(after):
            return False
        js.slo_risk = True
        js.slo_held |= helps
        return True

    def first_kept(self, own: int, locs: list[int], fits: list[bool], loads: FloatArray) -> int:
        js, at_risk = self._js, self._at_risk
        every_path_helps = js.guard == SloGuard.ALL
        held_from, kept_to = self._held_from, self._kept_to
        # φ of every path at once (`expected_s` over the array, the same floats); the rest per path, in
        # order. A held task rejects nearly every path: where waiting helps every path (ALL), `_outwaits`'s
        # bracket is inlined for it (the same comparisons, in the same order; re-read once it may move).
        after = expected_arrays(self._params, _ONE, loads).tolist()
        for i, (fit, phi_s) in enumerate(zip(fits, after, strict=True)):
            if not fit:
                continue
            if not at_risk(js, phi_s):
                return i
            if every_path_helps and not phi_s <= kept_to and phi_s >= held_from:
                continue  # (`_outwaits` answers no from its bracket)
            if not self._helps(own, locs[i]) or self._outwaits(phi_s):
                return i
            held_from, kept_to = self._held_from, self._kept_to
        return len(locs)

    def from_machine(self, own: int) -> RemoteCheck:
        """`REFUSE_ALL` where every path from `own` misses and waiting outweighs it: waiting helps every
        path (ALL), and φ at the least load any path has (its first link, the task's uplink, with the
        device's traffic on it; a margin below) is at risk and does not outwait waiting. φ only grows
        with the load (a product of numbers not negative, the load clipped), and so `at_risk` holds
        and `outwaited` stays no on every path (the bracket's premise, `_outwaits`). Else itself."""
        js = self._js
        gbps, cap = js.gbps, float(self._state.link_cap[own])
        if js.guard != SloGuard.ALL or not self._monotone or not gbps > 0 or not cap > 0:
            return self
        least = (float(self._state.link_used[own]) + gbps) / cap * (1.0 - _LOAD_MARGIN)
        phi_s = expected_s(js.profile, 1.0, least, self._goal)
        if math.isfinite(phi_s) and self._at_risk(js, phi_s) and not self._outwaits(phi_s):
            return REFUSE_ALL
        return self

    def _helps(self, own: int, loc: int) -> bool:
        """Whether waiting can help the path from `own` to `loc` where it misses: ALL, or TRAFFIC where
        the job's own traffic alone (the device's included) would not make it miss."""
        js = self._js
        if js.guard == SloGuard.ALL:
            return True
        return js.guard == SloGuard.TRAFFIC and not self._at_risk(js, expected_s(
            js.profile, 1.0, own_load(self._state, js, self._state.path(own, loc), js.gbps), self._goal))

    def _outwaits(self, after: float) -> bool:
        """`outwaited`, bracketed by the answers known for this job: a placement expected to take
        longer never costs less (Eq. 7 and the postponement grow with φ, and so do their roundings),
        so it outwaits waiting up to some φ and not beyond. (A φ that is not finite is priced as it is.)"""
        if after <= self._kept_to:
            return True
        if after >= self._held_from:
            return False
        out = outwaited(self._js, after)
        if math.isfinite(after):
            if out:
                self._kept_to = after
            else:
                self._held_from = after
        return out


def hold_bound(expected_s: float, tau: float, z: float, phi_local: float, phi_idle: float) -> int:
    """The most rounds of W a job waits for its SLO under `drmaestro-na` when its placement, expected to
    take `expected_s`, is free for it every round: from this W on, the placement with its postponement
    costs less than the unscheduled arc however it is priced (preference up to P_MAX, two loaded uplinks
    at LOAD_COST, the phase-1 spill arc at what going remote on idle links costs it: `phi_idle` against
    `phi_local`). With m the relative miss and k = (10 − z)/9 (Eq. 6 past the goal):

        W ≥ SLO_PATIENCE·min(m, 1) + ((1 + k·m)·P_MAX + 2·LOAD_COST + spill − (1 + k)) / WAIT_STEP

    i.e. about SLO_PATIENCE·min(m, 1) rounds plus a few (docs/design-decisions.md, "No job waits
    forever"). Monotone in `expected_s`: a larger miss is held at least as long."""
    ut = utility([expected_s, 2.0 * tau, phi_local, phi_idle], tau, z)
    spill = max(0.0, float(ut[2] - ut[3]))
    hold = float(postponement(expected_s, tau)) / SCALE
    over = (1.0 - ut[0]) * P_MAX + 2 * LOAD_COST + spill + hold - (1.0 - ut[1])
    return max(0, int(np.floor(over / WAIT_STEP + 1e-6)) + 1)


class FirmamentCostModel(DRMaestroCostModel):
    """Firmament: server-centric; a task's devices come from its own machine, so a machine's capacity
    counts its own free devices and there is no remote arc (nor the spill arc that prices one)."""

    name = "firmament"
    local_only = True

    def task_to_machine_capacity(self, state: FreeState, js: RoundJob, local_free: dict[str, IntArray],
                                 min_gbps: float) -> IntArray:
        return local_capacity(state, js, local_free)

    def machines_allowed(self, state: FreeState, js: RoundJob) -> tuple[BoolArray | None, IntArray]:
        """Only machines whose own free devices cover the task (ascending, so that argmax still takes
        the first of equals)."""
        return state.machines_with_local(js.shape)

    def why_no_machine(self, state: FreeState, js: RoundJob) -> tuple[Reason, str]:
        t = js.job.tasks
        if not t.kinds:
            return super().why_no_machine(state, js)
        return Reason.NO_DEVICES, _no_local_machine(t.count, t.cpus, t.memory_gb, tuple(t.devices.items()),
                                                    tuple(t.models.items()))

    def remote_surcharge(self, rows: ClassRows) -> IntArray | None:
        return None

    def subtask_to_remote(self, state: FreeState, tasks: SubtaskColumns) -> RemoteArcs | None:
        return None


def _remote_supply(state: FreeState, kinds: tuple[str, ...], models: Mapping[str, str], gbps: float,
                   headroom: FloatArray | None = None) -> FloatArray:
    """Per location, how many devices of `kinds` (of the pinned `models`) it could serve remotely at `gbps`
    each: its free devices, but no more than its uplink's headroom carries. `headroom`: per link, its
    capacity less its use and EPS, at least 0, when the caller has it."""
    n_loc = len(state.loc_rack)
    if headroom is None:
        headroom = np.maximum(state.link_cap - state.link_used + EPS, 0)
    free = np.zeros(n_loc)
    for k in kinds:
        if k not in models:
            free += state.free_count.get(k, 0)
            continue
        names, counts = state.free_by_model(k)
        free += counts[:, names.index(models[k])] if models[k] in names else 0
    carried = np.floor(headroom[:n_loc] / gbps)
    out: FloatArray = np.minimum(free, carried)
    return out


def _reachable_supply(state: FreeState, kinds: tuple[str, ...], models: Mapping[str, str], gbps: float,
                      headroom: FloatArray | None = None) -> FloatArray:
    """Per machine, how many remote devices of `kinds` the other locations could serve it at `gbps`
    each: those of its own rack, and from the other racks no more than its rack's uplink carries.
    `headroom`: as `_remote_supply` takes it (the same array for the locations' and the racks' links)."""
    if headroom is None:
        headroom = np.maximum(state.link_cap - state.link_used + EPS, 0)
    supply = _remote_supply(state, kinds, models, gbps, headroom)
    n, n_loc = state.n_machines, len(state.loc_rack)
    by_rack = np.bincount(state.loc_rack, weights=supply, minlength=state.n_racks)
    rack = state.loc_rack[:n]
    rack_carries = np.floor(headroom[n_loc:] / gbps)
    across = np.minimum(by_rack.sum() - by_rack[rack], rack_carries[rack])
    out: FloatArray = by_rack[rack] - supply[:n] + across
    return out


def _in_rack_and_across(up: FloatArray, rack: FloatArray) -> FloatArray:
    """Per task, the busiest link of a path in its rack (its uplink: `up`) and across racks (its rack's
    uplink too), as the two rows of a (2 × tasks) array (`np.stack` costs three times as much)."""
    out = np.empty((2, len(up)))
    out[0] = up
    np.maximum(up, rack, out=out[1])
    return out


def own_load(state: FreeState, js: RoundJob, path: tuple[int, ...], trial: float = 0.0) -> float:
    """The load (0..1+) of the busiest link of `path` counting only the job's own traffic this round,
    and `trial` more (the device being tried, its traffic not yet taken)."""
    own = dict.fromkeys(path, 0.0)
    for links, gbps in js.taken_traffic:
        for link in links:
            if link in own:
                own[link] += gbps
    if trial > 0:
        for link in path:
            own[link] += trial
    return max((used / state.link_cap[link] for link, used in own.items()), default=0.0)


def local_capacity(state: FreeState, js: RoundJob, local_free: dict[str, IntArray]) -> IntArray:
    """Per machine, how many tasks its cpus, memory and own free devices serve (no remote device). Also
    the flow's capacity for a job on its second, local-first try."""
    t = js.job.tasks
    fit = task_fit_counts(state, t.cpus, t.memory_gb)
    for k in t.kinds:
        fit = np.minimum(fit, _own_free(state, js, k, local_free) // t.wants(k))
    return fit


def _own_free(state: FreeState, js: RoundJob, kind: str, local_free: dict[str, IntArray]) -> IntArray:
    """Per machine, its own free devices of `kind` (of the model the job pins, if it pins one)."""
    models = js.job.tasks.models
    return local_free[kind] if kind not in models else state.local_free(kind, models[kind])


# -- the registry ----------------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _no_local_machine(count: int, cpus: float, memory_gb: float, devices: tuple[tuple[str, int], ...],
                      models: tuple[tuple[str, str], ...]) -> str:
    """Firmament's reason for a request no machine serves with its own devices, per distinct request (a
    full cluster's round says it for thousands of jobs asking the same few things; bounded: requests are
    the tenants' to choose)."""
    t = TaskRequest(count, cpus, memory_gb, dict(devices), dict(models))
    wants = ", ".join(f"{t.wants(k)} {k}" + (f" ({t.models[k]})" if k in t.models else "") for k in t.kinds)
    return (f"needs {t.count} task(s) of {t.cpus:g} cpus, {t.memory_gb:g} GB and {wants} on "
            f"the same machine (server-centric); no machine has that free now")


class UnknownCostModelError(ValueError):
    """A cost-model name that is not registered; the message lists the known ones."""


CostModelFactory = Callable[[], CostModel]
COST_MODELS: dict[str, CostModelFactory] = {}


def register_cost_model(name: str, factory: CostModelFactory) -> None:
    """Add a cost model under `name`; a name is registered once."""
    if name in COST_MODELS:
        raise ValueError(f"cost model {name!r} is already registered")
    COST_MODELS[name] = factory


for _factory in (DRMaestroCostModel, DRMaestroNACostModel, FirmamentCostModel):
    register_cost_model(_factory.name, _factory)


def get_cost_model(name: str) -> CostModel:
    """A fresh cost model by name."""
    try:
        return COST_MODELS[name]()
    except KeyError:
        raise UnknownCostModelError(
            f"unknown cost model {name!r}; known cost models: {', '.join(COST_MODELS)}") from None

"""The multi-phase min-cost-flow placer shared by `drmaestro`, `drmaestro-na` and `firmament`.

Pipeline of one round (see README.md in this folder):

    queue order → admit → phase 1 (cpu, memory) → phase k per device kind → gang check → decisions
                    ↑_________________ retry jobs that lost only to contention ________________|

Phase 1: job → class aggregator → machines → sink, and job → U → sink. Tasks of one job are one
node with supply = task count (they have identical arcs, so this is the same flow problem with
fewer nodes); jobs with the same request shape, profile, goal and importance share a class
aggregator (the seed's X), and each class links only to its cheapest machines that fit (enough
for twice its tasks), which keeps the graph linear in the queue.

Phase k: one node per task with supply = devices of the kind it wants (its sub-tasks), arcs to
its own machine (local), to its rack's aggregator and to a cross-rack aggregator (remote), and to
U. Aggregators link to every location (machine or pool) with free devices. Phase-1 decisions are
the preferences: the local arc costs P_LOCAL, the remote ones P_RACK / P_CROSS.

Flow solutions can over-commit what a flow cannot express (several classes on one machine's cpu
and memory, link bandwidth); the decoder checks each task against `FreeState` in queue order and
a task that does not fit fails its job (gang), which is retried in the next iteration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from disagg.model import DEVICE_KINDS, Cluster, Job
from disagg.placement.base import Clock, no_clock
from disagg.placement.cost import (
    P_CROSS,
    P_LOCAL,
    P_RACK,
    P_SPARE_DEVICES,
    SCALE,
    SPREAD,
    age_bonus,
    goal_s,
    phi,
    placing_cost,
    profile_of,
    remote_gbps,
    unscheduled_cost,
)
from disagg.placement.decisions import Decisions, DeviceGrant, JobPlacement, Reason, TaskPlacement, Unplaced
from disagg.placement.network import FlowNetwork
from disagg.placement.queue import Refusal, admit, order_queue
from disagg.placement.solver import solve
from disagg.placement.state import FreeState, Journal
from disagg.profiles import Profile

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

#: NA only: cost per unit of load on a remote location's uplink (steers remote devices to quiet links).
LOAD_COST = 0.2
#: How far the decoder looks along an aggregator's list for a device it can really use.
SCAN_LIMIT = 64
#: Direct arcs from a class to its own cheapest machines (the rest goes through the aggregator).
PREFERRED = 8
#: How many of its shape's cheapest machines a class prices itself.
CLASS_HEAD = 256
#: How many aggregator → machine arcs phase 1 may spend in all (shared among request shapes).
AGG_ARC_BUDGET = 200_000


@dataclass(frozen=True)
class FlowOptions:
    """What distinguishes the flow policies: may devices be remote, is the network load priced in."""

    name: str
    remote: bool = True
    network_aware: bool = False
    max_iterations: int = 3
    min_candidates: int = 32


@dataclass(slots=True)
class JobState:
    """One job during one round."""

    job: Job
    order: int
    profile: Profile
    tau: float
    z: float
    gbps: float
    phi_local: float
    shape: tuple[object, ...]
    wants: dict[str, int]
    remote: int = 0
    journal: Journal = field(default_factory=Journal)
    machines: list[int] = field(default_factory=list)
    grants: list[list[DeviceGrant]] = field(default_factory=list)
    failure: tuple[Reason, str] | None = None

    def fail(self, state: FreeState, reason: Reason, message: str) -> None:
        state.rollback(self.journal)
        self.machines = []
        self.grants = []
        self.remote = 0
        self.failure = (reason, message)


@dataclass
class Timings:
    build_s: float = 0.0
    solve_s: float = 0.0
    decode_s: float = 0.0

    def as_dict(self, round_s: float) -> dict[str, float]:
        return {"build_s": self.build_s, "solve_s": self.solve_s, "decode_s": self.decode_s, "round_s": round_s}


def expected_vec(profile: Profile, remote_share: FloatArray, load: FloatArray, tau: float) -> FloatArray:
    """`profiles.expected_s` over arrays (same formula, kept in step by a test)."""
    base = profile.base_s if profile.known else tau
    ts = profile.transfer_share
    stretch = profile.remote_factor * (1.0 + profile.load_sensitivity * np.clip(load, 0.0, 1.0))
    out: FloatArray = base * ((1.0 - ts) + ts * ((1.0 - remote_share) + remote_share * stretch))
    return out


def request(job: Job) -> str:
    """A job's request in words, for reasons: `2 task(s) of 4 cpus, 16 GB, 2 gpu`."""
    t = job.tasks
    devices = "".join(f", {t.wants(k)} {k}" for k in t.kinds)
    return f"{t.count} task(s) of {t.cpus:g} cpus, {t.memory_gb:g} GB{devices}"


def _flow_lists(tails: IntArray, heads: IntArray, costs: IntArray, flows: IntArray) -> dict[int, list[list[int]]]:
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


def profile_arrays(jobs: Sequence[JobState]) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per job: local time (τ for an unknown image), transfer share, remote factor, load sensitivity."""
    base = np.array([js.profile.base_s if js.profile.known else js.tau for js in jobs])
    ts = np.array([js.profile.transfer_share for js in jobs])
    rf = np.array([js.profile.remote_factor for js in jobs])
    sens = np.array([js.profile.load_sensitivity for js in jobs])
    return base, ts, rf, sens


def expected_arrays(params: tuple[FloatArray, ...], remote_share: FloatArray,
                    load: FloatArray) -> FloatArray:
    """`profiles.expected_s` for many jobs at once."""
    base, ts, rf, sens = params
    stretch = rf * (1.0 + sens * np.clip(load, 0.0, 1.0))
    out: FloatArray = base * ((1.0 - ts) + ts * ((1.0 - remote_share) + remote_share * stretch))
    return out


class FlowPlacer:
    """Runs the phases for a set of options. Stateless between rounds: all state is per call."""

    def __init__(self, options: FlowOptions) -> None:
        self.options = options
        self._queue_len = 0
        #: When a list, every solved network of a round is appended as (phase, network, flows), for
        #: debugging (`disagg place --dump-graphs`). None (the default) keeps nothing.
        self.graphs: list[tuple[str, FlowNetwork, IntArray]] | None = None

    def _keep(self, phase: str, net: FlowNetwork, flows: IntArray) -> None:
        if self.graphs is not None:
            self.graphs.append((phase, net, flows))

    # -- the round ---------------------------------------------------------------------------------

    def place(self, snapshot: Cluster, queue: Sequence[Job], now: float, clock: Clock = no_clock) -> Decisions:
        start = clock()
        timings = Timings()
        state = FreeState(snapshot)
        ordered = order_queue(queue, now)
        admitted, refused = admit(state, ordered)
        profiles: dict[tuple[str, float | None], tuple[Profile, float, float]] = {}
        jobs = [self._job_state(j, i, profiles) for i, j in enumerate(admitted)]
        self._queue_len = len(jobs)
        timings.build_s += clock() - start
        pending = jobs
        placed: list[JobState] = []
        iterations = 0
        for _ in range(self.options.max_iterations):
            if not pending:
                break
            iterations += 1
            survivors = self._phase_one(state, pending, timings, clock)
            for kind in DEVICE_KINDS:
                wanting = [js for js in survivors if kind in js.wants]
                if wanting:
                    self._phase_device(state, wanting, kind, timings, clock)
                    survivors = [js for js in survivors if js.failure is None]
            placed += survivors
            retry = [js for js in pending if js.failure is not None and js.failure[0] == Reason.CONTENTION]
            if not survivors:
                break
            for js in retry:
                js.failure = None
            pending = retry
        decode_start = clock()
        decisions = self._decisions(state, ordered, placed, jobs, refused)
        timings.decode_s += clock() - decode_start
        return Decisions(
            policy=self.options.name,
            placed=decisions[0],
            unplaced=decisions[1],
            timings=timings.as_dict(clock() - start),
            stats={"admitted": len(admitted), "iterations": iterations},
        )

    def _job_state(self, job: Job, order: int, cache: dict[tuple[str, float | None], tuple[Profile, float, float]]
                   ) -> JobState:
        key = (job.image, job.slo_s)
        if key not in cache:
            profile = profile_of(job)
            cache[key] = (profile, goal_s(job, profile), phi(job, profile, 0.0, 0.0))
        profile, tau, phi_local = cache[key]
        t = job.tasks
        wants = {k: int(v) for k, v in t.devices.items() if v > 0}
        shape = (t.cpus, t.memory_gb, tuple(sorted(wants.items())), tuple(sorted(t.models.items())))
        return JobState(job=job, order=order, profile=profile, tau=tau, z=job.importance,
                        gbps=remote_gbps(job, profile), phi_local=phi_local, shape=shape, wants=wants)

    # -- phase 1: cpu and memory -------------------------------------------------------------------

    def _phase_one(self, state: FreeState, jobs: list[JobState], timings: Timings, clock: Clock) -> list[JobState]:
        t0 = clock()
        opts = self.options
        n_machines = state.n_machines
        classes: dict[tuple[object, ...], int] = {}
        job_class = np.empty(len(jobs), dtype=np.int64)
        for i, js in enumerate(jobs):
            key = (js.shape, js.profile.name, js.tau, js.z, js.gbps)
            job_class[i] = classes.setdefault(key, len(classes))
        counts = np.array([js.job.tasks.count for js in jobs], dtype=np.int64)
        class_tasks = np.bincount(job_class, weights=counts, minlength=len(classes)).astype(np.int64)
        representative: dict[int, JobState] = {}
        for i, js in enumerate(jobs):
            representative.setdefault(int(job_class[i]), js)

        used_frac = 1.0 - state.cpu / np.maximum(state.cpu_total, 1e-9)
        up_load = state.link_load()[:n_machines] if opts.network_aware else np.zeros(n_machines)
        local_free: dict[str, IntArray] = {k: state.local_free(k) for k in state.kinds}
        any_local = {k: local_free[k] > 0 for k in state.kinds}

        class_min_cost = np.full(len(classes), np.iinfo(np.int64).max, dtype=np.int64)
        surcharges: list[int] = []
        # Classes with the same request shape form a group. The group's aggregator (the seed's X)
        # links to its cheapest machines, priced for the group's first class; each class links to
        # the aggregator (paying its own offset) and to its few preferred machines at its exact cost.
        groups: dict[tuple[object, ...], list[int]] = {}
        for c in range(len(classes)):
            groups.setdefault(representative[c].shape, []).append(c)
        n_groups = len(groups)
        pref_t: list[IntArray] = []
        pref_h: list[IntArray] = []
        pref_c: list[IntArray] = []
        pref_w: list[IntArray] = []
        agg_t: list[IntArray] = []
        agg_h: list[IntArray] = []
        agg_c: list[IntArray] = []
        agg_w: list[IntArray] = []
        to_agg_t: list[int] = []
        to_agg_g: list[int] = []
        to_agg_c: list[int] = []
        to_agg_w: list[int] = []
        for g, members in enumerate(groups.values()):
            rep = representative[members[0]]
            t = rep.job.tasks
            fit = self._fit(state, rep, local_free)
            cand = np.nonzero(fit > 0)[0]
            if len(cand) == 0:
                continue
            want_total = sum(t.wants(k) for k in t.kinds)
            share = np.zeros(len(cand))
            if want_total:
                local = np.zeros(len(cand))
                for k in t.kinds:
                    local += np.minimum(local_free[k][cand] if k in local_free else 0, t.wants(k))
                share = (want_total - local) / want_total
            load = up_load[cand]
            pref = P_LOCAL + SPREAD * used_frac[cand]
            for k in state.kinds:
                if t.wants(k) == 0:
                    pref = pref + P_SPARE_DEVICES * any_local[k][cand]
            proxy = placing_cost(expected_vec(rep.profile, share, load, rep.tau), rep.tau, rep.z, pref)
            if opts.network_aware:
                # Machines where even the group's first class would miss its SLO remotely are left out.
                ok = ~((share > 0) & (expected_vec(rep.profile, share, load, rep.tau) > rep.tau))
                cand, share, load, pref, proxy = cand[ok], share[ok], load[ok], pref[ok], proxy[ok]
            # Enough machines for twice the group's tasks, and more while the arc budget allows, so
            # that groups whose favourite machines overlap still find room elsewhere.
            group_limit = max(opts.min_candidates, 2 * int(class_tasks[members].sum()), AGG_ARC_BUDGET // n_groups)
            if len(cand) > group_limit:
                best = np.argpartition(proxy, group_limit - 1)[:group_limit]
                cand, share, load, pref, proxy = cand[best], share[best], load[best], pref[best], proxy[best]
            if len(cand) == 0:
                continue
            agg_t.append(np.full(len(cand), g, dtype=np.int64))
            agg_h.append(cand)
            agg_c.append(fit[cand])
            agg_w.append(proxy)
            # A class prices only the group's cheapest machines: its offset to X and its own
            # preferred machines come from there (the rest it reaches through X).
            head = np.arange(len(cand))
            if len(cand) > CLASS_HEAD:
                head = np.argpartition(proxy, CLASS_HEAD - 1)[:CLASS_HEAD]
            h_share, h_load, h_pref, h_proxy, h_cand = share[head], load[head], pref[head], proxy[head], cand[head]
            # All classes of the group at once: one row per class, one column per head machine.
            reps = [representative[c] for c in members]
            ids = np.array(members, dtype=np.int64)
            params = profile_arrays(reps)
            col = [a[:, None] for a in params]
            taus = np.array([js.tau for js in reps])[:, None]
            zs = np.array([js.z for js in reps])[:, None]
            ph = expected_arrays((col[0], col[1], col[2], col[3]), h_share[None, :], h_load[None, :])
            cost = placing_cost(ph, taus, zs, h_pref[None, :])
            if want_total and opts.remote:
                ends = placing_cost(expected_arrays((col[0], col[1], col[2], col[3]), np.array([[0.0, 1.0]]),
                                                    np.zeros((1, 2))), taus, zs, P_LOCAL)
                surcharges.extend((ends[:, 1] - ends[:, 0]).tolist())
            allowed = np.ones(cost.shape, dtype=bool)
            if opts.network_aware:
                phi_local = np.array([js.phi_local for js in reps])[:, None]
                allowed = ~((h_share[None, :] > 0) & (ph > taus) & (ph > phi_local))
            never = np.iinfo(np.int64).max
            masked = np.where(allowed, cost, never)
            has = allowed.any(axis=1)
            offsets = np.where(allowed, cost - h_proxy[None, :], np.iinfo(np.int64).min).max(axis=1)
            to_agg_t.extend(ids[has].tolist())
            to_agg_g.extend([g] * int(has.sum()))
            to_agg_c.extend(class_tasks[ids[has]].tolist())
            to_agg_w.extend(np.maximum(offsets[has], 0).tolist())
            n_pref = min(PREFERRED, masked.shape[1])
            top = np.argpartition(masked, n_pref - 1, axis=1)[:, :n_pref] if n_pref < masked.shape[1] else \
                np.broadcast_to(np.arange(masked.shape[1]), masked.shape)
            top_cost = np.take_along_axis(masked, top, axis=1)
            keep = top_cost < never
            rows = np.broadcast_to(ids[:, None], top.shape)[keep]
            heads_g = h_cand[top[keep]]
            pref_t.append(rows)
            pref_h.append(heads_g)
            pref_c.append(np.minimum(fit[heads_g], class_tasks[rows]))
            pref_w.append(top_cost[keep])
            class_min_cost[ids[has]] = masked[has].min(axis=1)

        def cat(xs: list[IntArray]) -> IntArray:
            return np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64)

        net = FlowNetwork()
        n_jobs, n_classes = len(jobs), len(classes)
        job0 = net.add_nodes(n_jobs)
        class0 = net.add_nodes(n_classes)
        group0 = net.add_nodes(n_groups)
        mach0 = net.add_nodes(n_machines)
        unsched = net.add_nodes(1)
        sink = net.add_nodes(1)
        total = int(counts.sum())
        net.supplies[job0:job0 + n_jobs] = counts
        net.supplies[sink] = -total
        taus = np.array([js.tau for js in jobs])
        zs = np.array([js.z for js in jobs])
        waits = np.array([js.job.wait_rounds for js in jobs])
        u_cost = unscheduled_cost(taus, zs, waits) + age_bonus([js.order for js in jobs], self._queue_len)
        jobs_idx = np.arange(n_jobs, dtype=np.int64)
        net.add_arcs("job->class", job0 + jobs_idx, class0 + job_class, counts, 0)
        net.add_arcs("job->U", job0 + jobs_idx, unsched, counts, u_cost)
        tails, heads, costs = cat(pref_t), cat(pref_h), cat(pref_w)
        net.add_arcs("class->machine", class0 + tails, mach0 + heads, cat(pref_c), costs)
        net.add_arcs("class->X", class0 + np.array(to_agg_t, dtype=np.int64),
                     group0 + np.array(to_agg_g, dtype=np.int64), to_agg_c, to_agg_w)
        g_tails, g_heads, g_costs = cat(agg_t), cat(agg_h), cat(agg_w)
        net.add_arcs("X->machine", group0 + g_tails, mach0 + g_heads, cat(agg_c), g_costs)
        # A machine's cpu and memory bound how many of the smallest tasks it takes; the decoder
        # checks the real fit of each task (several classes may share a machine).
        min_cpu = min(js.job.tasks.cpus for js in jobs)
        min_mem = min(js.job.tasks.memory_gb for js in jobs)
        with np.errstate(divide="ignore", invalid="ignore"):
            machine_cap = np.minimum(np.floor((state.cpu + 1e-9) / min_cpu), np.floor((state.mem + 1e-9) / min_mem))
        machine_cap = np.clip(machine_cap, 0, total).astype(np.int64)
        reached = np.zeros(n_machines, dtype=bool)
        reached[heads] = True
        reached[g_heads] = True
        used = np.nonzero(reached)[0]
        if surcharges:
            # Local devices are shared by every class that lands on a machine: the first tasks up to
            # the machine's free local devices go free, the rest pay what going remote costs a
            # typical job, so the flow spreads tasks to where devices are local.
            wants = [sum(js.wants.values()) for js in jobs]
            want_mean = max(1.0, float(np.average(wants, weights=counts)))
            local_total = sum(local_free[k] for k in state.kinds)
            slots = np.minimum(np.floor(local_total / want_mean).astype(np.int64), machine_cap)
            net.add_arcs("machine->sink", mach0 + used, sink, slots[used], 0)
            net.add_arcs("machine->sink:spill", mach0 + used, sink, machine_cap[used] - slots[used],
                         max(1, int(np.median(surcharges))))
        else:
            net.add_arcs("machine->sink", mach0 + used, sink, machine_cap[used], 0)
        net.add_arcs("U->sink", [unsched], sink, [total], 0)
        t1 = clock()
        flows = solve(net)
        t2 = clock()
        timings.build_s += t1 - t0
        timings.solve_s += t2 - t1
        self._keep("phase1", net, flows)

        to_class = flows[net.block("job->class")]
        # Per class its preferred machines with flow, then per group its machines, cheapest first.
        direct = _flow_lists(tails, heads, costs, flows[net.block("class->machine")])
        shared = _flow_lists(g_tails, g_heads, g_costs, flows[net.block("X->machine")])
        group_of = dict(zip(to_agg_t, to_agg_g, strict=True))
        survivors: list[JobState] = []
        for i, js in enumerate(jobs):
            count = int(counts[i])
            c = int(job_class[i])
            if int(to_class[i]) < count:
                self._explain_phase_one(state, js, class_min_cost[c], int(u_cost[i]))
                continue
            lists = [direct.get(c, []), shared.get(group_of.get(c, -1), [])]
            if self._assign_machines(state, js, lists):
                survivors.append(js)
        timings.decode_s += clock() - t2
        return survivors

    def _fit(self, state: FreeState, js: JobState, local_free: dict[str, IntArray]) -> IntArray:
        """How many tasks of this job each machine can take (server-centric policies: with its devices)."""
        t = js.job.tasks
        with np.errstate(divide="ignore", invalid="ignore"):
            fit = np.minimum(np.floor((state.cpu + 1e-9) / t.cpus), np.floor((state.mem + 1e-9) / t.memory_gb))
        fit = np.maximum(fit, 0).astype(np.int64)
        if not self.options.remote:
            for k in t.kinds:
                have = local_free.get(k, np.zeros(state.n_machines, dtype=np.int64))
                fit = np.minimum(fit, have // t.wants(k))
        return fit

    def _assign_machines(self, state: FreeState, js: JobState, sources: list[list[list[int]]]) -> bool:
        """Give each task a machine from the flow's lists (the class's own, then its group's),
        checking the real fit; repair when the flow over-filled a machine (gang: all or none)."""
        t = js.job.tasks
        for _ in range(t.count):
            chosen = -1
            for machines in sources:
                while machines and machines[0][1] == 0:
                    machines.pop(0)
                for entry in machines[:SCAN_LIMIT]:
                    if entry[1] == 0:
                        continue
                    if state.take_cpu(entry[0], t.cpus, t.memory_gb, js.journal):
                        entry[1] -= 1
                        chosen = entry[0]
                        break
                    # Machines only fill up within a round: no later task of this shape fits here.
                    entry[1] = 0
                if chosen >= 0:
                    break
            if chosen < 0:
                chosen = self._repair(state, js)
            if chosen < 0:
                js.fail(state, Reason.CONTENTION, f"needs {request(js.job)}; the cpus and memory that fit went "
                                                  f"to jobs ahead of it this round")
                return False
            js.machines.append(chosen)
        js.grants = [[] for _ in js.machines]
        return True

    def _repair(self, state: FreeState, js: JobState) -> int:
        """The flow's machines for this class are used up (several classes shared a machine): take the
        machine with the most free cpus that still fits the task (and its devices, server-centric)."""
        t = js.job.tasks
        ok = (state.cpu + 1e-9 >= t.cpus) & (state.mem + 1e-9 >= t.memory_gb)
        if not self.options.remote:
            for k in t.kinds:
                ok &= state.local_free(k) >= t.wants(k)
        if not ok.any():
            return -1
        m = int(np.argmax(np.where(ok, state.cpu, -np.inf)))
        return m if state.take_cpu(m, t.cpus, t.memory_gb, js.journal) else -1

    def _explain_phase_one(self, state: FreeState, js: JobState, best: int, u_cost: int) -> None:
        t = js.job.tasks
        if best == np.iinfo(np.int64).max:
            if not self.options.remote and t.kinds:
                wants = ", ".join(f"{t.wants(k)} {k}" for k in t.kinds)
                js.fail(state, Reason.NO_DEVICES, (
                    f"needs {t.count} task(s) of {t.cpus:g} cpus, {t.memory_gb:g} GB and {wants} on the same "
                    f"machine (server-centric); no machine has that free now"))
            elif self.options.network_aware:
                js.fail(state, Reason.SLO_AT_RISK, (
                    f"every machine with {t.cpus:g} cpus free would need remote devices that miss the SLO "
                    f"({js.tau:g} s) under the current network load; postponed"))
            else:
                js.fail(state, Reason.NO_CAPACITY, f"no machine has {t.cpus:g} cpus and {t.memory_gb:g} GB free")
        elif best >= u_cost:
            js.fail(state, Reason.POSTPONED, (
                f"waiting costs less than its best placement (cost {best / SCALE:.3f} ≥ {u_cost / SCALE:.3f}, "
                f"W={js.job.wait_rounds}); postponed"))
        else:
            js.fail(state, Reason.CONTENTION, f"needs {request(js.job)}; what fits went to jobs ahead of it "
                                              f"in the queue this round")

    # -- phase k: devices of one kind --------------------------------------------------------------

    def _phase_device(self, state: FreeState, jobs: list[JobState], kind: str, timings: Timings,
                      clock: Clock) -> None:
        """One phase for one device kind. Location nodes are (location, model) pairs so that a task
        pinned to a model only reaches devices of that model; with one model per kind (the usual
        case) this is one node per location."""
        t0 = clock()
        opts = self.options
        n_loc = len(state.loc_rack)
        owners: list[tuple[JobState, int]] = [(js, ti) for js in jobs for ti in range(len(js.machines))]
        n_tasks = len(owners)
        per_task = np.array([len(js.machines) for js in jobs], dtype=np.int64)

        def spread(values: list[float] | list[int]) -> NDArray[np.float64]:
            """A per-job value, once per task."""
            return np.repeat(np.asarray(values, dtype=np.float64), per_task)

        own = np.fromiter((m for js in jobs for m in js.machines), dtype=np.int64, count=n_tasks)
        want = spread([js.wants[kind] for js in jobs]).astype(np.int64)
        tau = spread([js.tau for js in jobs])
        z = spread([js.z for js in jobs])
        gbps = spread([js.gbps for js in jobs])
        waits = spread([js.job.wait_rounds for js in jobs])
        phi_local = spread([js.phi_local for js in jobs])
        orders = spread([js.order for js in jobs])
        models, free = state.free_by_model(kind)
        n_models = len(models)
        model_of = {m: i for i, m in enumerate(models)}
        # -1: any model; -2: a model that has no free device at all.
        pinned = spread([model_of.get(js.job.tasks.models[kind], -2) if kind in js.job.tasks.models else -1
                         for js in jobs]).astype(np.int64)
        load = state.link_load()
        headroom = state.link_cap - state.link_used

        net = FlowNetwork()
        task0 = net.add_nodes(n_tasks)
        rack0 = net.add_nodes(state.n_racks * n_models)
        cross0 = net.add_nodes(n_models)
        loc0 = net.add_nodes(n_loc * n_models)
        unsched = net.add_nodes(1)
        sink = net.add_nodes(1)
        total = int(want.sum())
        net.supplies[task0:task0 + n_tasks] = want
        net.supplies[sink] = -total
        idx = np.arange(n_tasks, dtype=np.int64)

        local_cost = placing_cost(phi_local, tau, z, P_LOCAL)
        u_cost = unscheduled_cost(tau, z, waits) + age_bonus(orders, self._queue_len)
        net.add_arcs("task->U", task0 + idx, unsched, want, u_cost)
        never = np.iinfo(np.int64).max
        best_cost = np.full(n_tasks, never, dtype=np.int64)
        rack_ok = cross_ok = slo_blocked = np.zeros(n_tasks, dtype=bool)
        rack_cost = cross_cost = np.zeros(n_tasks, dtype=np.int64)
        if opts.remote:
            own_rack_link = n_loc + state.loc_rack[own]
            can_send = headroom[own] + 1e-9 >= gbps
            load_rack = load[own] if opts.network_aware else np.zeros(n_tasks)
            load_cross = np.maximum(load[own], load[own_rack_link]) if opts.network_aware else np.zeros(n_tasks)
            params = tuple(np.repeat(a, per_task) for a in profile_arrays(jobs))
            phi_rack = expected_arrays(params, np.ones(n_tasks), load_rack)
            phi_cross = expected_arrays(params, np.ones(n_tasks), load_cross)
            rack_cost = placing_cost(phi_rack, tau, z, P_RACK)
            cross_cost = placing_cost(phi_cross, tau, z, P_CROSS)
            rack_ok = can_send.copy()
            cross_ok = can_send & (headroom[own_rack_link] + 1e-9 >= gbps) & (state.n_racks > 1)
            if opts.network_aware:
                miss_rack = (phi_rack > tau) & (phi_rack > phi_local)
                miss_cross = (phi_cross > tau) & (phi_cross > phi_local)
                slo_blocked = (rack_ok & miss_rack) | (cross_ok & miss_cross)
                rack_ok = rack_ok & ~miss_rack
                cross_ok = cross_ok & ~miss_cross
            best_cost = np.minimum(np.where(rack_ok, rack_cost, never), np.where(cross_ok, cross_cost, never))
        min_gbps = float(gbps.min()) if n_tasks else 0.0
        remote_lists: dict[tuple[str, int, int], list[list[int]]] = {}
        local_flow: list[tuple[int, IntArray, IntArray]] = []
        remote_flow: list[tuple[str, int, IntArray, IntArray]] = []
        loc_blocks: list[tuple[str, int, IntArray]] = []
        for mi in range(n_models):
            fm = free[:, mi]
            takes = (pinned == -1) | (pinned == mi)
            has_local = takes & (fm[own] > 0)
            sel = idx[has_local]
            net.add_arcs(f"local:{mi}", task0 + sel, loc0 + own[sel] * n_models + mi,
                         np.minimum(want[sel], fm[own[sel]]), local_cost[sel])
            local_flow.append((mi, sel, np.zeros(0, dtype=np.int64)))
            best_cost[sel] = np.minimum(best_cost[sel], local_cost[sel])
            if opts.remote:
                r_sel = idx[takes & rack_ok]
                net.add_arcs(f"rack:{mi}", task0 + r_sel, rack0 + state.loc_rack[own[r_sel]] * n_models + mi,
                             want[r_sel], rack_cost[r_sel])
                c_sel = idx[takes & cross_ok]
                net.add_arcs(f"cross:{mi}", task0 + c_sel, cross0 + mi, want[c_sel], cross_cost[c_sel])
                remote_flow.append(("rack", mi, r_sel, np.zeros(0, dtype=np.int64)))
                remote_flow.append(("cross", mi, c_sel, np.zeros(0, dtype=np.int64)))
                locs = np.nonzero((fm > 0) & (headroom[:n_loc] + 1e-9 >= min_gbps))[0]
                loc_cost = np.zeros(len(locs), dtype=np.int64)
                cross_loc_cost = np.zeros(len(locs), dtype=np.int64)
                if opts.network_aware:
                    loc_cost = np.rint(LOAD_COST * SCALE * np.clip(load[locs], 0, 1)).astype(np.int64)
                    rack_load = np.clip(load[n_loc + state.loc_rack[locs]], 0, 1)
                    cross_loc_cost = loc_cost + np.rint(LOAD_COST * SCALE * rack_load).astype(np.int64)
                net.add_arcs(f"rack->loc:{mi}", rack0 + state.loc_rack[locs] * n_models + mi,
                             loc0 + locs * n_models + mi, fm[locs], loc_cost)
                net.add_arcs(f"cross->loc:{mi}", np.full(len(locs), cross0 + mi), loc0 + locs * n_models + mi,
                             fm[locs], cross_loc_cost)
                loc_blocks.append(("rack", mi, locs))
            all_locs = np.nonzero(fm > 0)[0]
            net.add_arcs(f"loc->sink:{mi}", loc0 + all_locs * n_models + mi, sink, fm[all_locs], 0)
        net.add_arcs("U->sink", [unsched], sink, [total], 0)
        t1 = clock()
        flows = solve(net)
        t2 = clock()
        timings.build_s += t1 - t0
        timings.solve_s += t2 - t1
        self._keep(kind, net, flows)

        # What the flow gave each task: (where from, model, count); where: local, rack or cross.
        given: list[list[tuple[str, int, int]]] = [[] for _ in range(n_tasks)]
        for mi, sel, _ in local_flow:
            for i, f in zip(sel, flows[net.block(f"local:{mi}")], strict=True):
                if f:
                    given[int(i)].append(("local", mi, int(f)))
        for source, mi, sel, _ in remote_flow:
            for i, f in zip(sel, flows[net.block(f"{source}:{mi}")], strict=True):
                if f:
                    given[int(i)].append((source, mi, int(f)))
        for _, mi, locs in loc_blocks:
            rl = flows[net.block(f"rack->loc:{mi}")]
            for a in np.nonzero(rl)[0]:
                key = ("rack", int(state.loc_rack[locs[a]]), mi)
                remote_lists.setdefault(key, []).append([int(locs[a]), int(rl[a])])
            cl = flows[net.block(f"cross->loc:{mi}")]
            remote_lists[("cross", 0, mi)] = [[int(locs[a]), int(cl[a])] for a in np.nonzero(cl)[0]]
        f_unsched = flows[net.block("task->U")]

        # Tasks whose devices are all local come first, in one vectorised step: the flow never sends
        # more to a location than it has free, so they cannot fail; only models could say otherwise.
        done = np.zeros(n_tasks, dtype=bool)
        if n_models == 1:
            f_local = np.zeros(n_tasks, dtype=np.int64)
            local_sel = local_flow[0][1]
            f_local[local_sel] = flows[net.block("local:0")]
            done = (f_local == want) & (f_unsched == 0) & (want > 0)
            self._grant_local(state, kind, owners, own, want, done)

        # The rest in queue order; a task that cannot get all its devices fails its whole job.
        tasks_of: dict[int, list[int]] = {}
        for i, (js, _) in enumerate(owners):
            tasks_of.setdefault(id(js), []).append(i)
        for js in jobs:
            for i in tasks_of[id(js)]:
                if js.failure is not None:
                    break
                if done[i]:
                    continue
                if f_unsched[i] > 0:
                    self._explain_device(state, js, kind, int(own[i]), int(want[i]), int(best_cost[i]),
                                         int(u_cost[i]), bool(slo_blocked[i]))
                    break
                rack = int(state.loc_rack[own[i]])
                sources = [(models[mi] if n_models > 1 else None, count, None if src == "local" else
                            remote_lists.get((src, rack if src == "rack" else 0, mi), []))
                           for src, mi, count in given[i]]
                self._grant(state, js, owners[i][1], kind, int(own[i]), sources)
        timings.decode_s += clock() - t2

    def _grant_local(self, state: FreeState, kind: str, owners: list[tuple[JobState, int]], own: IntArray,
                     want: IntArray, chosen: NDArray[np.bool_]) -> None:
        """Hand the chosen tasks their local devices from the top of each location's stack."""
        idx = np.nonzero(chosen)[0]
        if len(idx) == 0:
            return
        locs, wants = own[idx], want[idx]
        order = np.lexsort((idx, locs))
        idx, locs, wants = idx[order], locs[order], wants[order]
        # Within a location, each task takes the next `want` devices down from the top.
        first_of_loc = np.r_[True, locs[1:] != locs[:-1]]
        cum = np.cumsum(wants)
        base = np.maximum.accumulate(np.where(first_of_loc, cum - wants, 0))
        before = cum - wants - base
        hi = state.start[kind][locs] + state.free_count[kind][locs] - before
        # Flat positions of every taken device, task after task, each task's from its top down.
        ends = np.cumsum(wants)
        step = np.arange(int(ends[-1])) - np.repeat(ends - wants, wants)
        taken = state.slots[kind][np.repeat(hi - 1, wants) - step].tolist()
        ids = state.device_ids
        names = state.cluster.locations
        bounds = np.r_[0, ends].tolist()
        for i, (t_idx, loc) in enumerate(zip(idx.tolist(), locs.tolist(), strict=True)):
            js, ti = owners[t_idx]
            mine = taken[bounds[i]:bounds[i + 1]]
            js.journal.devices.extend(mine)
            where = names[loc]
            js.grants[ti].extend([DeviceGrant(ids[d], kind, False, where) for d in mine])
        np.subtract.at(state.free_count[kind], locs, wants)

    def _grant(self, state: FreeState, js: JobState, ti: int, kind: str, own: int,
               sources: list[tuple[str | None, int, list[list[int]] | None]]) -> None:
        """Take the devices the flow gave one task (local ones: list None); fail the job if the
        real state says no."""
        devices = state.cluster.devices
        locations = state.cluster.locations
        why = "none"
        for model, count, entries in sources:
            for _ in range(count):
                if entries is None:
                    dev = state.take_device(kind, own, model, js.journal)
                    if dev is None:
                        break
                    js.grants[ti].append(DeviceGrant(devices[dev].id, kind, False, locations[own]))
                    continue
                grant, why = self._take_remote(state, js, kind, own, model, entries)
                if grant is None:
                    break
                js.grants[ti].append(grant)
            else:
                continue
            break
        else:
            return
        if why == "slo":
            js.fail(state, Reason.SLO_AT_RISK, (
                f"remote {kind} for {js.job.name}/{ti} on {locations[own]} would miss the SLO "
                f"({js.tau:g} s) once this round's traffic is on the links; postponed"))
        elif why == "bandwidth":
            js.fail(state, Reason.NO_BANDWIDTH, (
                f"needs {js.job.tasks.wants(kind)} {kind} for task {js.job.name}/{ti} on {locations[own]}; "
                f"the links to the free ones lack {js.gbps:g} Gb/s of headroom"))
        else:
            js.fail(state, Reason.CONTENTION, f"the {kind} it was given went to jobs ahead of it this round")

    def _take_remote(self, state: FreeState, js: JobState, kind: str, own: int, model: str | None,
                     entries: list[list[int]]) -> tuple[DeviceGrant | None, str]:
        devices = state.cluster.devices
        locations = state.cluster.locations
        why = "none"
        while entries and entries[0][1] == 0:
            entries.pop(0)
        for entry in entries[:SCAN_LIMIT]:
            loc = entry[0]
            if entry[1] == 0:
                continue
            if loc == own:
                dev = state.take_device(kind, loc, model, js.journal)
                if dev is None:
                    continue
                entry[1] -= 1
                return DeviceGrant(devices[dev].id, kind, False, locations[loc]), ""
            path = state.path(own, loc)
            if not state.take_traffic(path, js.gbps, js.journal):
                why = "bandwidth"
                continue
            if self.options.network_aware:
                after = phi(js.job, js.profile, 1.0, state.load(path))
                if after > js.tau and after > js.phi_local:
                    state.undo_last_traffic(js.journal)
                    why = "slo"
                    continue
            dev = state.take_device(kind, loc, model, js.journal)
            if dev is None:
                state.undo_last_traffic(js.journal)
                continue
            entry[1] -= 1
            js.remote += 1
            names = tuple(state.link_names[p] for p in path)
            return DeviceGrant(devices[dev].id, kind, True, locations[loc], names, js.gbps), ""
        return None, why

    def _explain_device(self, state: FreeState, js: JobState, kind: str, own: int, want: int, best: int,
                        u_cost: int, slo_blocked: bool) -> None:
        """Why the flow left (part of) a task's devices unscheduled: not enough within reach, the SLO,
        waiting being cheaper, or jobs ahead of it."""
        where = state.cluster.locations[own]
        local = int(state.free_count[kind][own]) if kind in state.free_count else 0
        if not self.options.remote:
            js.fail(state, Reason.NO_DEVICES, f"needs {want} {kind} on {where}, {local} free there "
                                              f"(server-centric: no remote devices)")
            return
        if slo_blocked and (best == np.iinfo(np.int64).max or best >= u_cost):
            js.fail(state, Reason.SLO_AT_RISK, (
                f"needs {want} {kind} for a task on {where} ({local} free there); remote ones would miss "
                f"the SLO ({js.tau:g} s) under the current network load; postponed"))
            return
        reach = state.reachable(kind, own, js.gbps)
        if reach < want:
            everywhere = state.total_free(kind)
            reason = Reason.NO_DEVICES if everywhere < want or reach == everywhere else Reason.NO_BANDWIDTH
            js.fail(state, reason, f"needs {want} {kind}, {reach} free within {state.link_cap[own]:g} Gb/s of {where}")
            return
        if best >= u_cost:
            js.fail(state, Reason.POSTPONED, (
                f"waiting costs less than its best {kind} placement (cost {best / SCALE:.3f} ≥ "
                f"{u_cost / SCALE:.3f}, W={js.job.wait_rounds}); postponed"))
            return
        js.fail(state, Reason.CONTENTION, f"its {kind} went to jobs ahead of it in the queue this round")

    # -- decisions ---------------------------------------------------------------------------------

    def _decisions(self, state: FreeState, ordered: list[Job], placed: list[JobState], jobs: list[JobState],
                   refused: dict[str, Refusal]) -> tuple[tuple[JobPlacement, ...], tuple[Unplaced, ...]]:
        machines = state.cluster.machines
        placed_names = {js.job.name for js in placed}
        by_name = {js.job.name: js for js in jobs}
        out_placed: list[JobPlacement] = []
        for js in sorted(placed, key=lambda s: s.order):
            t = js.job.tasks
            tasks = []
            for ti, m in enumerate(js.machines):
                grants = tuple(js.grants[ti])
                n_remote = sum(1 for g in grants if g.remote) if js.remote else 0
                if n_remote == 0:
                    expected = js.phi_local
                else:
                    load = 0.0
                    if self.options.network_aware:
                        load = state.load(sorted({state.link_index[x] for g in grants for x in g.path}))
                    expected = phi(js.job, js.profile, n_remote / len(grants), load)
                tasks.append(TaskPlacement(f"{js.job.name}/{ti}", machines[m].name, t.cpus, t.memory_gb, grants,
                                           round(expected, 3)))
            out_placed.append(JobPlacement(js.job.name, tuple(tasks)))
        out_unplaced: list[Unplaced] = []
        for job in ordered:
            if job.name in placed_names:
                continue
            if job.name in refused:
                r = refused[job.name]
                out_unplaced.append(Unplaced(job.name, r.reason, r.message))
                continue
            js = by_name[job.name]
            reason, message = js.failure or (Reason.CONTENTION, f"needs {request(job)}; still contended after "
                                                                f"{self.options.max_iterations} tries this round")
            out_unplaced.append(Unplaced(job.name, reason, message))
        return tuple(out_placed), tuple(out_unplaced)

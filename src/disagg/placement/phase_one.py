"""Phase 1: where each task's cpus and memory go (the seed's Fig. 2a).

    job → class → (its preferred machines | X_shape → machines) → sink,   job → U → sink

A job is one node with supply = its task count (its tasks have identical arcs). A class is the
set of jobs with the same request, profile, SLO and importance; a shape is the set of classes with
the same request. Each shape's aggregator X links to the shape's cheapest machines; each class
links to X (paying its own offset over the shape's prices) and to its few cheapest machines
directly. Machine → sink has a free arc up to the machine's free local devices and a spill arc
priced at what going remote costs a typical job, so tasks spread to where their devices are local.

The decoder hands each task a machine from the flow's lists, checking the real fit in `FreeState`
(several classes may share a machine's cpus); a job whose tasks do not all fit fails (gang).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from disagg.placement.cost import P_LOCAL, P_SPARE_DEVICES, SCALE, SPREAD, age_bonus, placing_cost, unscheduled_cost
from disagg.placement.decisions import Reason
from disagg.placement.jobstate import (
    FlowOptions,
    IntArray,
    JobState,
    JobTable,
    expected_arrays,
    expected_vec,
    flow_lists,
    profile_arrays,
    request,
)
from disagg.placement.network import FlowNetwork
from disagg.placement.queue import task_fit_counts
from disagg.placement.state import FreeState, Offers, column

#: Direct arcs from a class to its own cheapest machines (the rest goes through the aggregator).
PREFERRED = 8
#: How many of its shape's cheapest machines a class prices itself.
CLASS_HEAD = 256
#: How many aggregator → machine arcs phase 1 may spend in all (shared among request shapes).
AGG_ARC_BUDGET = 200_000
#: How far the decoder looks along a flow list for a machine the task really fits on.
SCAN_LIMIT = 64

NEVER = np.iinfo(np.int64).max


@dataclass
class ArcBuffer:
    """Arcs gathered piece by piece, joined into arrays once."""

    tails: list[IntArray] = field(default_factory=list)
    heads: list[IntArray] = field(default_factory=list)
    caps: list[IntArray] = field(default_factory=list)
    costs: list[IntArray] = field(default_factory=list)

    def add(self, tails: IntArray, heads: IntArray, caps: IntArray, costs: IntArray) -> None:
        self.tails.append(tails)
        self.heads.append(heads)
        self.caps.append(caps)
        self.costs.append(costs)

    def arrays(self) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        def cat(xs: list[IntArray]) -> IntArray:
            return np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, dtype=np.int64)

        return cat(self.tails), cat(self.heads), cat(self.caps), cat(self.costs)


@dataclass
class Classes:
    """Jobs grouped into classes (same request, profile, goal, importance) and classes into shapes."""

    of_job: IntArray
    counts: IntArray
    tasks: IntArray
    representative: list[JobState]
    shapes: list[list[int]]


@dataclass
class Pricing:
    """The class and shape arcs of phase 1, and what the decoder and the explanations need."""

    preferred: ArcBuffer = field(default_factory=ArcBuffer)
    shared: ArcBuffer = field(default_factory=ArcBuffer)
    to_shape: ArcBuffer = field(default_factory=ArcBuffer)
    surcharges: list[int] = field(default_factory=list)
    min_cost: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def classify(jobs: list[JobState]) -> Classes:
    """Jobs of one round into classes and classes into shapes. A round's job states share one shape
    object per distinct request, so shapes are told apart by identity (no hashing of nested tuples)."""
    classes: dict[tuple[object, ...], int] = {}
    of: list[int] = []
    reps: list[JobState] = []  # the first job of each class (classes are numbered as they first appear)
    for js in jobs:
        c = classes.setdefault((id(js.shape), js.profile.name, js.tau, js.z, js.gbps), len(classes))
        if c == len(reps):
            reps.append(js)
        of.append(c)
    of_job = np.array(of, dtype=np.int64)
    counts = column(jobs, "count", np.int64)
    tasks = np.bincount(of_job, weights=counts, minlength=len(classes)).astype(np.int64)
    shapes: dict[int, list[int]] = {}
    for c, js in enumerate(reps):
        shapes.setdefault(id(js.shape), []).append(c)
    return Classes(of_job, counts, tasks, reps, list(shapes.values()))


def fit_counts(state: FreeState, js: JobState, local_free: dict[str, IntArray], remote: bool,
               min_gbps: float = 0.0) -> IntArray:
    """How many tasks of this job each machine can take: server-centric policies with their own
    devices; with remote devices, no more than its own free devices plus what its uplink can carry
    at `min_gbps` (the least any class of the shape draws per remote device) serve."""
    t = js.job.tasks
    out: IntArray = task_fit_counts(state, t.cpus, t.memory_gb)
    if not t.kinds:
        return out
    local_fit = out.copy()
    local_units = np.zeros(state.n_machines, dtype=np.int64)
    for k in t.kinds:
        have = local_free[k] if k not in t.models else state.local_free(k, t.models[k])
        local_fit = np.minimum(local_fit, have // t.wants(k))
        local_units += have
    if not remote:
        return local_fit
    if min_gbps > 0:
        n = state.n_machines
        carried = np.floor((state.link_cap[:n] - state.link_used[:n] + 1e-9) / min_gbps)
        served = np.floor((np.maximum(carried, 0) + local_units) / sum(t.wants(k) for k in t.kinds))
        out = np.minimum(out, served.astype(np.int64))
    return out


def price(state: FreeState, cls: Classes, opts: FlowOptions) -> Pricing:
    """Arcs from classes to machines, directly and through one aggregator per shape."""
    n_machines = state.n_machines
    used_frac = 1.0 - state.cpu / np.maximum(state.cpu_total, 1e-9)
    up_load = state.link_load()[:n_machines] if opts.network_aware else np.zeros(n_machines)
    local_free: dict[str, IntArray] = {k: state.local_free(k) for k in state.kinds}
    pricing = Pricing(min_cost=np.full(len(cls.representative), NEVER, dtype=np.int64))
    for g, members in enumerate(cls.shapes):
        rep = cls.representative[members[0]]
        t = rep.job.tasks
        fit = fit_counts(state, rep, local_free, opts.remote, min(cls.representative[c].gbps for c in members))
        cand = np.nonzero(fit > 0)[0]
        want_total = sum(rep.wants.values())
        # The share of the task's devices that would have to be remote on each machine.
        share = np.zeros(len(cand))
        if want_total:
            local = np.zeros(len(cand))
            for k, n in rep.wants.items():
                local += np.minimum(local_free[k][cand], n)
            share = (want_total - local) / want_total
        load = up_load[cand]
        pref = P_LOCAL + SPREAD * used_frac[cand]
        for k in state.kinds:
            if t.wants(k) == 0:
                pref = pref + P_SPARE_DEVICES * (local_free[k][cand] > 0)
        ph = expected_vec(rep.profile, share, load, rep.tau)
        proxy = placing_cost(ph, rep.tau, rep.z, pref)
        keep = np.ones(len(cand), dtype=bool)
        if opts.network_aware:
            # Machines where even the shape's first class would miss its SLO remotely are left out.
            keep = ~((share > 0) & (ph > rep.tau))
        # Enough machines for twice the shape's tasks, and more while the arc budget allows, so
        # that shapes whose favourite machines overlap still find room elsewhere.
        limit = max(opts.min_candidates, 2 * int(cls.tasks[members].sum()), AGG_ARC_BUDGET // len(cls.shapes))
        sel = np.nonzero(keep)[0]
        if len(sel) > limit:
            sel = sel[np.argpartition(proxy[sel], limit - 1)[:limit]]
        if len(sel) == 0:
            continue
        cand, share, load, pref, proxy = cand[sel], share[sel], load[sel], pref[sel], proxy[sel]
        pricing.shared.add(np.full(len(cand), g, dtype=np.int64), cand, fit[cand], proxy)
        _price_classes(pricing, g, members, cls, fit, cand, share, load, pref, proxy, want_total > 0, opts)
    return pricing


def _price_classes(pricing: Pricing, g: int, members: list[int], cls: Classes, fit: IntArray, cand: IntArray,
                   share: np.ndarray, load: np.ndarray, pref: np.ndarray, proxy: IntArray, wants_devices: bool,
                   opts: FlowOptions) -> None:
    """All classes of one shape at once: one row per class, one column per machine of the shape's head
    (its cheapest machines). A class's offset to X and its preferred machines come from there."""
    head = np.arange(len(cand))
    if len(cand) > CLASS_HEAD:
        head = np.argpartition(proxy, CLASS_HEAD - 1)[:CLASS_HEAD]
    h_share, h_load, h_pref, h_proxy, h_cand = share[head], load[head], pref[head], proxy[head], cand[head]
    reps = [cls.representative[c] for c in members]
    ids = np.array(members, dtype=np.int64)
    params = tuple(a[:, None] for a in profile_arrays(reps))
    taus = np.array([js.tau for js in reps])[:, None]
    zs = np.array([js.z for js in reps])[:, None]
    ph = expected_arrays(params, h_share[None, :], h_load[None, :])
    cost = placing_cost(ph, taus, zs, h_pref[None, :])
    if wants_devices and opts.remote:
        ends = placing_cost(expected_arrays(params, np.array([[0.0, 1.0]]), np.zeros((1, 2))), taus, zs, P_LOCAL)
        pricing.surcharges.extend((ends[:, 1] - ends[:, 0]).tolist())
    allowed = np.ones(cost.shape, dtype=bool)
    if opts.network_aware:
        phi_local = np.array([js.phi_local for js in reps])[:, None]
        allowed = ~((h_share[None, :] > 0) & (ph > taus) & (ph > phi_local))
    masked = np.where(allowed, cost, NEVER)
    has = allowed.any(axis=1)
    offsets = np.where(allowed, cost - h_proxy[None, :], np.iinfo(np.int64).min).max(axis=1)
    pricing.to_shape.add(ids[has], np.full(int(has.sum()), g, dtype=np.int64), cls.tasks[ids[has]],
                         np.maximum(offsets[has], 0))
    n_pref = min(PREFERRED, masked.shape[1])
    if n_pref < masked.shape[1]:
        top = np.argpartition(masked, n_pref - 1, axis=1)[:, :n_pref]
    else:
        top = np.broadcast_to(np.arange(masked.shape[1]), masked.shape)
    top_cost = np.take_along_axis(masked, top, axis=1)
    keep = top_cost < NEVER
    rows = np.broadcast_to(ids[:, None], top.shape)[keep]
    heads = h_cand[top[keep]]
    pricing.preferred.add(rows, heads, np.minimum(fit[heads], cls.tasks[rows]), top_cost[keep])
    pricing.min_cost[ids[has]] = masked[has].min(axis=1)


@dataclass
class PhaseOne:
    """The network of phase 1 and what the decoder reads back from its flows."""

    net: FlowNetwork
    cls: Classes
    pricing: Pricing
    u_cost: IntArray
    arcs: dict[str, tuple[IntArray, IntArray, IntArray, IntArray]]


def build(state: FreeState, jobs: list[JobState], opts: FlowOptions, queue_len: int, table: JobTable) -> PhaseOne:
    cls = classify(jobs)
    pricing = price(state, cls, opts)
    n_machines, n_jobs, n_classes = state.n_machines, len(jobs), len(cls.representative)
    net = FlowNetwork()
    job0 = net.add_nodes(n_jobs)
    class0 = net.add_nodes(n_classes)
    shape0 = net.add_nodes(len(cls.shapes))
    mach0 = net.add_nodes(n_machines)
    unsched = net.add_nodes(1)
    sink = net.add_nodes(1)
    total = int(cls.counts.sum())
    net.supplies[job0:job0 + n_jobs] = cls.counts
    net.supplies[sink] = -total
    rows = JobTable.indices(jobs)
    u_cost = unscheduled_cost(table.tau[rows], table.z[rows], table.waits[rows]) + age_bonus(table.order[rows],
                                                                                              queue_len)
    idx = np.arange(n_jobs, dtype=np.int64)
    net.add_arcs("job->class", job0 + idx, class0 + cls.of_job, cls.counts, 0)
    net.add_arcs("job->U", job0 + idx, unsched, cls.counts, u_cost)
    preferred = pricing.preferred.arrays()
    to_shape = pricing.to_shape.arrays()
    shared = pricing.shared.arrays()
    net.add_arcs("class->machine", class0 + preferred[0], mach0 + preferred[1], preferred[2], preferred[3])
    net.add_arcs("class->X", class0 + to_shape[0], shape0 + to_shape[1], to_shape[2], to_shape[3])
    net.add_arcs("X->machine", shape0 + shared[0], mach0 + shared[1], shared[2], shared[3])
    reached = np.zeros(n_machines, dtype=bool)
    reached[preferred[1]] = True
    reached[shared[1]] = True
    _machine_to_sink(net, state, cls, pricing, np.nonzero(reached)[0], mach0, sink, total)
    net.add_arcs("U->sink", [unsched], sink, [total], 0)
    return PhaseOne(net, cls, pricing, u_cost, {"preferred": preferred, "to_shape": to_shape, "shared": shared})


def _machine_to_sink(net: FlowNetwork, state: FreeState, cls: Classes, pricing: Pricing,
                     used: IntArray, mach0: int, sink: int, total: int) -> None:
    """A machine's cpu and memory bound how many of the smallest tasks it takes (the decoder checks
    each task's real fit). Local devices are shared by every class that lands on a machine: tasks up
    to its free local devices go free, the rest pay what going remote costs a typical job."""
    # Every job of a class has its representative's request: the classes stand for the jobs here.
    reps = cls.representative
    min_cpu = min(js.cpus for js in reps)
    min_mem = min(js.memory_gb for js in reps)
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = np.minimum(np.floor((state.cpu + 1e-9) / min_cpu), np.floor((state.mem + 1e-9) / min_mem))
    machine_cap = np.clip(cap, 0, total).astype(np.int64)
    if not pricing.surcharges:
        net.add_arcs("machine->sink", mach0 + used, sink, machine_cap[used], 0)
        return
    wants = np.array([sum(js.wants.values()) for js in reps], dtype=np.int64)[cls.of_job]
    want_mean = max(1.0, float(np.average(wants, weights=cls.counts)))
    local_total = sum(state.local_free(k) for k in state.kinds)
    slots = np.minimum(np.floor(local_total / want_mean).astype(np.int64), machine_cap)
    net.add_arcs("machine->sink", mach0 + used, sink, slots[used], 0)
    net.add_arcs("machine->sink:spill", mach0 + used, sink, machine_cap[used] - slots[used],
                 max(1, int(np.median(pricing.surcharges))))


def decode(state: FreeState, jobs: list[JobState], phase: PhaseOne, flows: IntArray, opts: FlowOptions
           ) -> list[JobState]:
    """Hand out machines in queue order; returns the jobs whose every task got one."""
    net, cls = phase.net, phase.cls
    to_class = flows[net.block("job->class")]
    pref, shared = phase.arcs["preferred"], phase.arcs["shared"]
    # Per class its preferred machines with flow, then per shape its machines, cheapest first.
    direct = {c: Offers(x) for c, x in flow_lists(pref[0], pref[1], pref[3],
                                                  flows[net.block("class->machine")]).items()}
    common = {g: Offers(x) for g, x in flow_lists(shared[0], shared[1], shared[3],
                                                  flows[net.block("X->machine")]).items()}
    shape_of = dict(zip(phase.arcs["to_shape"][0].tolist(), phase.arcs["to_shape"][1].tolist(), strict=True))
    # A class without flow on its own arcs (most) draws from its shape's list only.
    sources = [tuple(o for o in (direct.get(c), common.get(shape_of.get(c, -1))) if o is not None)
               for c in range(len(cls.representative))]
    survivors: list[JobState] = []
    take, remote = state.take_cpu_along, opts.remote
    # Each task gets a machine from the flow's lists (the class's own, then its shape's), checking the
    # real fit; a repair when the flow over-filled a machine; gang: all tasks or none. (One loop for
    # every job, no call per job: a round at 12,500 machines hands out some 12,000 tasks.)
    for i, (js, c, sent, count) in enumerate(zip(jobs, cls.of_job.tolist(), to_class.tolist(), cls.counts.tolist(),
                                                 strict=True)):
        if sent < count:
            explain(state, js, int(phase.pricing.min_cost[c]), int(phase.u_cost[i]), opts)
            continue
        cpus, memory_gb, machines, offered = js.cpus, js.memory_gb, js.machines, sources[c]
        for _ in range(count):
            for offers in offered:
                m = take(offers, cpus, memory_gb, js, SCAN_LIMIT)
                if m >= 0:
                    break
            else:
                m = repair(state, js, remote)
                if m < 0:
                    js.fail(state, Reason.CONTENTION, f"needs {request(js.job)}; the cpus and memory that fit "
                                                      f"went to jobs ahead of it this round")
                    break
            machines.append(m)
        else:
            js.grants = [()] * count
            survivors.append(js)
    return survivors


def repair(state: FreeState, js: JobState, remote: bool) -> int:
    """The flow's machines for this class are used up (several classes shared a machine): take the
    machine with the most free cpus that still fits the task (and its devices, server-centric)."""
    cpus, memory_gb = js.cpus, js.memory_gb
    # Server-centric: only machines whose own free devices cover the task (ascending, so argmax still
    # takes the first of equals).
    has_devices, cand = (None, np.arange(state.n_machines)) if remote else state.machines_with_local(js.shape)
    # Usually the machine with the most free cpus fits: then it is the answer (argmax takes the first
    # of equals either way) without a mask over every machine.
    m = int(np.argmax(state.cpu))
    if (has_devices is None or has_devices[m]) and state.take_cpu(m, cpus, memory_gb, js):
        return m
    cpu = state.cpu[cand]
    ok = (cpu + 1e-9 >= cpus) & (state.mem[cand] + 1e-9 >= memory_gb)
    if not ok.any():
        return -1
    m = int(cand[np.argmax(np.where(ok, cpu, -np.inf))])
    return m if state.take_cpu(m, cpus, memory_gb, js) else -1


def explain(state: FreeState, js: JobState, best: int, u_cost: int, opts: FlowOptions) -> None:
    """Why the flow sent (some of) a job's tasks to U."""
    t = js.job.tasks
    if best == NEVER:
        if not opts.remote and t.kinds:
            wants = ", ".join(f"{t.wants(k)} {k}" + (f" ({t.models[k]})" if k in t.models else "") for k in t.kinds)
            js.fail(state, Reason.NO_DEVICES, f"needs {t.count} task(s) of {t.cpus:g} cpus, {t.memory_gb:g} GB and "
                                              f"{wants} on the same machine (server-centric); no machine has that "
                                              f"free now")
        elif opts.network_aware:
            js.fail(state, Reason.SLO_AT_RISK, f"every machine with {t.cpus:g} cpus free would need remote devices "
                                               f"that miss the SLO ({js.tau:g} s) under the current network load; "
                                               f"postponed")
        else:
            js.fail(state, Reason.NO_CAPACITY, f"no machine has {t.cpus:g} cpus and {t.memory_gb:g} GB free")
    elif best >= u_cost:
        js.fail(state, Reason.POSTPONED, f"waiting costs less than its best placement (cost {best / SCALE:.3f} ≥ "
                                         f"{u_cost / SCALE:.3f}, W={js.job.wait_rounds}); postponed")
    else:
        js.fail(state, Reason.CONTENTION, f"needs {request(js.job)}; what fits went to jobs ahead of it in the "
                                          f"queue this round")

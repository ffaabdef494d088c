"""Phase k: the devices of one kind (the seed's Fig. 2b and 2c).

    task → own location (local) | R_rack → locations in its rack | C → every location,   task → U

A task is one node with supply = the devices of the kind it wants (its sub-tasks: they have the
same arcs, so one node with supply z is the same problem as z nodes). Location nodes are
(location, model) pairs, so a task pinned to a model reaches only that model. Phase-1 decisions
are the preferences: P_LOCAL on the task's own machine, P_RACK and P_CROSS for remote devices.
Costs, and whether remote arcs exist at all, are the policy's cost model's answers (`cost_models.py`).

The decoder hands out devices in queue order and checks what a flow cannot see: link bandwidth for
remote devices and, for NA, the SLO once this round's traffic is on the links. A task that cannot
get all its devices fails its job (gang).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain, compress, islice
from operator import attrgetter, itemgetter

import numpy as np
from numpy.typing import NDArray

from disagg.placement.commit import EPS
from disagg.placement.cost import SCALE
from disagg.placement.cost_models import REFUSE_ALL, CostModel, RemoteArcs, RemoteCheck
from disagg.placement.decisions import DeviceGrant, Reason
from disagg.placement.jobstate import FloatArray, IntArray, JobTable, RoundJob, unscheduled
from disagg.placement.network import FlowNetwork
from disagg.placement.state import FreeState

#: How far the decoder looks along an aggregator's list for a device it can really use.
SCAN_LIMIT = 64

NEVER = np.iinfo(np.int64).max


@dataclass
class Tasks:
    """Per task of the jobs in this phase: one entry per (job, task index), as arrays. A task's job is
    `jobs[job_at[i]]`, its index in that job `task_index[i]`."""

    jobs: list[RoundJob]
    job_at: list[int]
    task_index: list[int]
    own: IntArray
    want: IntArray
    tau: FloatArray
    z: FloatArray
    gbps: FloatArray
    phi_local: FloatArray
    u_cost: IntArray
    pinned: IntArray
    params: tuple[FloatArray, ...]
    guard: IntArray
    own_up: FloatArray
    own_rack: FloatArray


def _tasks(state: FreeState, jobs: list[RoundJob], kind: str, models: list[str], costs: CostModel,
           queue_len: int, table: JobTable) -> Tasks:
    n_jobs = len(jobs)
    machines = list(map(attrgetter("machines"), jobs))
    # Per job to per task: a repeat, unless every job has one task here (the usual case: as it stands;
    # told by the set of the counts, the quickest way both at some tens of jobs and at 10,000).
    one_each = set(map(len, machines)) <= {1}
    per_task = np.ones(n_jobs, dtype=np.int64) if one_each else np.fromiter(map(len, machines), dtype=np.int64,
                                                                              count=n_jobs)
    n = n_jobs if one_each else int(per_task.sum())

    def spread(per_job: IntArray) -> IntArray:
        return per_job if one_each else np.repeat(per_job, per_task)

    rows = spread(JobTable.indices(jobs))
    job_at = spread(np.arange(n_jobs, dtype=np.int64))
    tau, z = table.tau[rows], table.z[rows]
    # -1: any model; -2: a model that has no free device at all.
    model_of = {m: i for i, m in enumerate(models)}
    pinned_job = np.full(n_jobs, -1, dtype=np.int64)
    # shape[3]: the request's pinned models (usually none).
    for i in compress(range(n_jobs), map(itemgetter(3), map(attrgetter("shape"), jobs))):
        pinned = jobs[i].job.tasks.models
        if kind in pinned:
            pinned_job[i] = model_of.get(pinned[kind], -2)
    # Each task's job's own traffic of this round on the task's uplink and its rack's (devices of an
    # earlier kind): what the network-aware model tells apart from others' traffic.
    own = np.fromiter(chain.from_iterable(machines), dtype=np.int64, count=n)
    own_up, own_rack = np.zeros(n), np.zeros(n)
    starts = job_at if one_each else np.cumsum(per_task) - per_task
    # (Only once the round has taken traffic can a job hold some: a local-only round never looks.)
    with_traffic = [j for j, js in enumerate(jobs) if js.taken_traffic] if state.traffic_takes else []
    for j in with_traffic:
        for i in range(int(starts[j]), int(starts[j] + per_task[j])):
            up, rack = int(own[i]), len(state.loc_rack) + int(state.loc_rack[own[i]])
            for links, gbps in jobs[j].taken_traffic:
                own_up[i] += gbps * (up in links)
                own_rack[i] += gbps * (rack in links)
    return Tasks(
        jobs=jobs,
        job_at=job_at.tolist(),
        task_index=[0] * n if one_each else (np.arange(n, dtype=np.int64) - np.repeat(starts, per_task)).tolist(),
        own=own,
        want=spread(np.fromiter(map(itemgetter(kind), map(attrgetter("wants"), jobs)), dtype=np.int64, count=n_jobs)),
        tau=tau, z=z, gbps=table.gbps[rows], phi_local=table.phi_local[rows],
        u_cost=unscheduled(costs.task_to_unscheduled(table, rows, queue_len), table, rows),
        pinned=spread(pinned_job),
        params=tuple(a[rows] for a in table.params),
        guard=table.guard[rows],
        own_up=own_up,
        own_rack=own_rack,
    )


@dataclass
class DevicePhase:
    """The network of one device phase and what the decoder reads back from its flows."""

    kind: str
    net: FlowNetwork
    tasks: Tasks
    models: list[str]
    #: The remote arcs; None when the cost model offers none (server-centric).
    remote: RemoteArcs | None
    best_cost: IntArray
    #: Per task, its cheapest remote arc (NEVER when none): what a device beyond its local ones costs.
    best_remote: IntArray
    #: Tasks served by their own machine's devices without the solver (`settled_locally`).
    settled: NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    #: The tasks in the network (the others are settled), in the order of the task->U arcs.
    in_net: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    local_sel: list[IntArray] = field(default_factory=list)
    rack_sel: list[IntArray] = field(default_factory=list)
    cross_sel: list[IntArray] = field(default_factory=list)
    loc_sel: list[IntArray] = field(default_factory=list)


def build(state: FreeState, jobs: list[RoundJob], kind: str, costs: CostModel, queue_len: int,
          table: JobTable) -> DevicePhase:
    """Location nodes are (location, model) pairs so that a task pinned to a model only reaches devices
    of that model; with one model per kind (the usual case) this is one node per location."""
    models, free = state.free_by_model(kind)
    n_models, n_loc = len(models), len(state.loc_rack)
    tasks = _tasks(state, jobs, kind, models, costs, queue_len, table)
    remote = costs.subtask_to_remote(state, tasks)
    own, want, n_tasks = tasks.own, tasks.want, len(tasks.job_at)
    net = FlowNetwork()
    # Tasks, rack aggregators, cross-rack aggregators, locations, U, sink: numbered in that order, added
    # at once (each `add_nodes` grows the supplies anew).
    task0 = net.add_nodes(n_tasks + (state.n_racks + 1 + n_loc) * n_models + 2)
    rack0 = task0 + n_tasks
    cross0 = rack0 + state.n_racks * n_models
    loc0 = cross0 + n_models
    unsched = loc0 + n_loc * n_models
    sink = unsched + 1
    total = int(want.sum())
    local_cost = costs.subtask_to_local(tasks)
    best = np.full(n_tasks, NEVER, dtype=np.int64) if remote is None else np.minimum(
        np.where(remote.rack_ok, remote.rack_cost, NEVER), np.where(remote.cross_ok, remote.cross_cost, NEVER))
    settled = settled_locally(tasks, free, n_loc, local_cost, best)
    if settled.any():  # what they take is not free for the network's remote arcs
        free = free.copy()
        free[:, 0] -= np.bincount(own[settled], weights=want[settled], minlength=n_loc).astype(free.dtype)
        total -= int(want[settled].sum())
    net.supplies[task0:task0 + n_tasks] = np.where(settled, 0, want)
    net.supplies[sink] = -total
    idx = np.arange(n_tasks, dtype=np.int64)
    in_net = idx[~settled]
    net.add_arcs("task->U", task0 + in_net, unsched, want[in_net], tasks.u_cost[in_net])
    phase = DevicePhase(kind, net, tasks, models, remote, best, best.copy(), settled, in_net)
    load = state.link_load()
    headroom = state.link_cap - state.link_used
    min_gbps = float(tasks.gbps.min()) if n_tasks else 0.0
    unpinned, in_flow = tasks.pinned == -1, ~settled
    for mi in range(n_models):
        fm = free[:, mi]
        has = fm > 0
        takes = (unpinned | (tasks.pinned == mi)) & in_flow
        sel = idx[takes & has[own]]
        own_sel, local_sel_cost = own[sel], local_cost[sel]
        net.add_arcs(f"local:{mi}", task0 + sel, _node(loc0, own_sel, n_models, mi), np.minimum(want[sel], fm[own_sel]),
                     local_sel_cost)
        phase.local_sel.append(sel)
        phase.best_cost[sel] = np.minimum(phase.best_cost[sel], local_sel_cost)
        if remote is not None:
            r_sel = idx[takes & remote.rack_ok]
            net.add_arcs(f"rack:{mi}", task0 + r_sel, _node(rack0, state.loc_rack[own[r_sel]], n_models, mi),
                         want[r_sel], remote.rack_cost[r_sel])
            c_sel = idx[takes & remote.cross_ok]
            net.add_arcs(f"cross:{mi}", task0 + c_sel, cross0 + mi, want[c_sel], remote.cross_cost[c_sel])
            phase.rack_sel.append(r_sel)
            phase.cross_sel.append(c_sel)
            locs = np.nonzero(has & (headroom[:n_loc] + EPS >= min_gbps))[0]
            loc_racks, loc_nodes, loc_free = state.loc_rack[locs], _node(loc0, locs, n_models, mi), fm[locs]
            loc_cost, cross_loc_cost = costs.remote_to_location(load[locs], load[n_loc + loc_racks])
            net.add_arcs(f"rack->loc:{mi}", _node(rack0, loc_racks, n_models, mi), loc_nodes, loc_free, loc_cost)
            net.add_arcs(f"cross->loc:{mi}", np.full(len(locs), cross0 + mi), loc_nodes, loc_free, cross_loc_cost)
            phase.loc_sel.append(locs)
        all_locs = np.nonzero(has)[0]
        net.add_arcs(f"loc->sink:{mi}", _node(loc0, all_locs, n_models, mi), sink, fm[all_locs], 0)
    net.add_arcs("U->sink", [unsched], sink, [total], 0)
    return phase


def _node(first: int, at: IntArray, n_models: int, mi: int) -> IntArray:
    """The nodes of (`at`, model `mi`) pairs numbered from `first`, models within each: with one model
    (the usual case) `first + at` as it stands, without two more numpy calls per block."""
    out: IntArray = first + at if n_models == 1 else first + at * n_models + mi
    return out


def settled_locally(tasks: Tasks, free: IntArray, n_loc: int, local_cost: IntArray, best_remote: IntArray
                    ) -> NDArray[np.bool_]:
    """The tasks whose own machine's free devices serve every task of the phase there, where a local
    device costs less than waiting and no more than any remote one (one model, none pinned). The flow
    would give each of them its own devices (no other task's local arc reaches them, and taking them
    leaves every other task its own); they are settled before the solver, which then sees only the rest
    (at 12,500 machines some hundreds of tasks of 12,000). Their devices leave the remote arcs' supply."""
    n = len(tasks.own)
    if free.shape[1] != 1 or n == 0:
        return np.zeros(n, dtype=bool)
    own, want = tasks.own, tasks.want
    asked = np.bincount(own, weights=want, minlength=n_loc)
    out: NDArray[np.bool_] = ((want > 0) & (tasks.pinned == -1) & (free[own, 0] >= asked[own])
                              & (local_cost < tasks.u_cost) & (local_cost <= best_remote))
    return out


def decode(state: FreeState, phase: DevicePhase, flows: IntArray, costs: CostModel) -> None:
    """Hand out devices in queue order; a task that cannot get all its devices fails its whole job."""
    net, tasks, kind = phase.net, phase.tasks, phase.kind
    n_tasks, n_models = len(tasks.job_at), len(phase.models)
    f_unsched = np.zeros(n_tasks, dtype=np.int64)
    f_unsched[phase.in_net] = flows[net.block("task->U")]
    own, want = tasks.own, tasks.want

    # Tasks whose devices are all local come first, in one vectorised step: the flow never sends
    # more to a location than it has free, so they cannot fail; only models could say otherwise.
    done = np.zeros(n_tasks, dtype=bool)
    if n_models == 1:
        f_local = np.zeros(n_tasks, dtype=np.int64)
        f_local[phase.local_sel[0]] = flows[net.block("local:0")]
        done = ((f_local == want) & (f_unsched == 0) & (want > 0)) | phase.settled
        grant_local(state, kind, tasks, done)
    if done.all():
        return

    # What the flow gave each remaining task: (where from, model, count); where: local, rack or cross.
    given = _given(phase, flows, done)
    # Per rack (and for the cross-rack aggregator) the locations the flow sent devices from.
    remote_lists: dict[tuple[str, int, int], list[list[int]]] = {}
    # (As lists first: numpy's scalar reads, three per location, cost more than the rest of it.)
    for mi, locs in enumerate(phase.loc_sel):
        rl = flows[net.block(f"rack->loc:{mi}")]
        at = np.flatnonzero(rl)
        for loc, rack, n in zip(locs[at].tolist(), state.loc_rack[locs[at]].tolist(), rl[at].tolist(), strict=True):
            remote_lists.setdefault(("rack", rack, mi), []).append([loc, n])
        cl = flows[net.block(f"cross->loc:{mi}")]
        at = np.flatnonzero(cl)
        remote_lists[("cross", 0, mi)] = [[loc, n] for loc, n in zip(locs[at].tolist(), cl[at].tolist(), strict=True)]

    # The rest task by task, in queue order (jobs come in queue order, their tasks in a row); a job
    # that has failed skips its remaining tasks.
    for i in np.nonzero(~done)[0].tolist():
        js, ti = tasks.jobs[tasks.job_at[i]], tasks.task_index[i]
        if js.failure is not None:
            continue
        if f_unsched[i] > 0:
            explain(state, phase, i, js)
        else:
            rack = int(state.loc_rack[own[i]])
            wanted = [(phase.models[mi] if n_models > 1 else None, count, None if src == "local" else
                       remote_lists.get((src, rack if src == "rack" else 0, mi), []))
                      for src, mi, count in given.get(i, [])]
            grant(state, js, ti, kind, int(own[i]), wanted, costs)
        if js.failure is not None:
            js.failed_on = (int(own[i]),)  # the machine whose task could not be served


def _given(phase: DevicePhase, flows: IntArray, done: NDArray[np.bool_]) -> dict[int, list[tuple[str, int, int]]]:
    """Per task not `done`, what the flow gave it: (local, rack or cross, model, count), local ones first,
    then in the rack, then across racks, each by model. A model's local, rack and cross-rack blocks follow
    one another (`build`), so their flows are read as one slice against their selections end to end
    (one set of numpy calls, not three)."""
    net = phase.net
    given: dict[int, list[tuple[str, int, int]]] = {}
    for mi, local in enumerate(phase.local_sel):
        parts = [local] if phase.remote is None else [local, phase.rack_sel[mi], phase.cross_sel[mi]]
        sel = np.concatenate(parts)
        f = flows[net.block(f"local:{mi}").start:net.block(f"{'local' if phase.remote is None else 'cross'}:{mi}").stop]
        keep = np.flatnonzero((f > 0) & ~done[sel])
        rack_from, cross_from = len(local), len(sel) - len(parts[-1])
        for k, i, n in zip(keep.tolist(), sel[keep].tolist(), f[keep].tolist(), strict=True):
            source = "local" if k < rack_from else "rack" if k < cross_from else "cross"
            given.setdefault(i, []).append((source, mi, n))
    if len(phase.local_sel) > 1:  # by source first, then model (a stable sort keeps the models' order)
        for entries in given.values():
            entries.sort(key=lambda e: _SOURCE_RANK[e[0]])
    return given


_SOURCE_RANK = {"local": 0, "rack": 1, "cross": 2}


def grant_local(state: FreeState, kind: str, tasks: Tasks, chosen: NDArray[np.bool_]) -> None:
    """Hand the chosen tasks their local devices from the top of each location's stack."""
    idx = np.nonzero(chosen)[0]
    if len(idx) == 0:
        return
    locs, wants = tasks.own[idx], tasks.want[idx]
    order = np.lexsort((idx, locs))
    idx, locs, wants = idx[order], locs[order], wants[order]
    # Within a location, each task takes the next `want` devices down from the top.
    first_of_loc = np.concatenate(([True], locs[1:] != locs[:-1]))
    cum = np.cumsum(wants)
    base = np.maximum.accumulate(np.where(first_of_loc, cum - wants, 0))
    before = cum - wants - base
    hi = state.start[kind][locs] + state.free_count[kind][locs] - before
    # Flat positions of every taken device, task after task, each task's from its top down.
    ends = np.cumsum(wants)
    step = np.arange(int(ends[-1])) - np.repeat(ends - wants, wants)
    taken_at = state.slots[kind][np.repeat(hi - 1, wants) - step]
    taken = taken_at.tolist()
    granted = state.inventory.local_grants(kind, taken_at, taken, state.cluster.locations)
    # Back in task order (queue order) to hand them to their jobs: the jobs' records are then read in the
    # order they were made, not scattered by location (most of a round's cost here was those reads).
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    jobs, job_at, task_index = tasks.jobs, tasks.job_at, tasks.task_index
    for t_idx, b, e in zip(idx[back].tolist(), (ends - wants)[back].tolist(), ends[back].tolist(), strict=True):
        js = jobs[job_at[t_idx]]
        js.taken_devices.extend(taken[b:e])
        js.grants[task_index[t_idx]] += granted[b:e]
    np.subtract.at(state.free_count[kind], locs, wants)
    state.version += 1


def grant(state: FreeState, js: RoundJob, ti: int, kind: str, own: int,
          sources: list[tuple[str | None, int, list[list[int]] | None]], costs: CostModel) -> None:
    """Take the devices the flow gave one task (local ones: list None); fail the job if the
    real state says no."""
    locations = state.cluster.locations
    why = "none"
    check = costs.remote_check(state, js)
    for model, count, entries in sources:
        for _ in range(count):
            if entries is None:
                got, why = take_at(state, js, kind, own, own, model, check)
            else:
                got, why = take_remote(state, js, kind, own, model, entries, check)
            if got is None:
                break
            js.grants[ti] += (got,)
        else:
            continue
        break
    else:
        return
    if why == "slo":
        js.fail(state, Reason.SLO_AT_RISK, (
            f"remote {kind} for {js.job.name}/{ti} on {locations[own]} would miss the SLO "
            f"({js.goal()}) once this round's traffic is on the links, by more than waiting costs at "
            f"W={js.wait_rounds}; postponed"))
    elif why == "bandwidth":
        js.fail(state, Reason.NO_BANDWIDTH, (
            f"needs {js.job.tasks.wants(kind)} {kind} for task {js.job.name}/{ti} on {locations[own]}; "
            f"the links to the free ones lack {js.gbps:g} Gb/s of headroom"))
    else:
        js.fail(state, Reason.CONTENTION, f"the {kind} it was given went to jobs ahead of it this round")


def take_remote(state: FreeState, js: RoundJob, kind: str, own: int, model: str | None, entries: list[list[int]],
                check: RemoteCheck | None) -> tuple[DeviceGrant | None, str]:
    """One remote device for a task from an aggregator's list, if a path has the bandwidth (and, NA,
    the SLO still holds with this round's traffic on it); else from any location within reach (the
    flow sees the task's own links, not those of the device's side, so its choice can be full).
    `why` says what stopped it otherwise."""
    why = "none"
    while entries and entries[0][1] == 0:
        entries.pop(0)
    if check is not None:  # (a held task's every path misses: walked past without pricing each)
        check = check.from_machine(own)
    if check is REFUSE_ALL:
        got, why = _walk_refused(state, js, kind, own, model, entries)
        if got is not None:
            return got, ""
    else:
        for entry in islice(entries, SCAN_LIMIT):
            if entry[1] == 0:
                continue
            got, reason = take_at(state, js, kind, own, entry[0], model, check)
            if got is not None:
                entry[1] -= 1
                return got, ""
            why = reason or why
    # Within reach, any model the job accepts (the flow's model stands for its choice, not the job's ask).
    got, reason = take_within_reach(state, js, kind, own, js.job.tasks.models.get(kind), check)
    return got, reason or why


def _walk_refused(state: FreeState, js: RoundJob, kind: str, own: int, model: str | None, entries: list[list[int]]
                  ) -> tuple[DeviceGrant | None, str]:
    """`take_remote`'s walk along the flow's list for a check that refuses every path (`REFUSE_ALL`),
    `take_at` spelt out for it: each path that fits is retraced ("slo"), each other one lacks the
    bandwidth; only the task's own location (a device there is local, no check asked) is `take_at`'s.
    A held task walks past some thousands of these a simulated run."""
    why, gbps = "none", js.gbps
    for entry in islice(entries, SCAN_LIMIT):
        if entry[1] == 0:
            continue
        loc = entry[0]
        if loc == own:
            got, reason = take_at(state, js, kind, own, loc, model, REFUSE_ALL)
            if got is not None:
                entry[1] -= 1
                return got, ""
            why = reason or why
            continue
        path = state.path(own, loc)
        if state.fits_traffic(path, gbps):
            state.retrace_traffic(path, gbps)
            why = "slo"
        else:
            why = "bandwidth"
    return None, why


def take_within_reach(state: FreeState, js: RoundJob, kind: str, own: int, model: str | None,
                      check: RemoteCheck | None) -> tuple[DeviceGrant | None, str]:
    """A device from any other location whose path has the headroom: in the task's rack first, then
    across racks, each in location order (deterministic)."""
    free = state.free_count.get(kind)
    if free is None:
        return None, ""
    fits: NDArray[np.bool_] | None = None
    if check is REFUSE_ALL:  # (the order and whether each path fits, in one pass: `_rejected_ahead` reads both)
        order, fits = state.reach_trial(own, js.gbps, free > 0, SCAN_LIMIT)
    else:
        order = state.reach_order(own, js.gbps, free > 0)[:SCAN_LIMIT]
    start, why = (0, "") if check is None else _rejected_ahead(state, js, own, order, check, fits)
    for loc in order[start:].tolist():
        got, reason = take_at(state, js, kind, own, loc, model, check)
        if got is not None:
            return got, ""
        why = reason or why
    return None, why


def _rejected_ahead(state: FreeState, js: RoundJob, own: int, locs: IntArray, check: RemoteCheck,
                    fits_ahead: NDArray[np.bool_] | None = None) -> tuple[int, str]:
    """Try the leading `locs` as `take_at` would, one after another, as long as it would reject them
    (no headroom, or the check), priced in one pass for all of them: a held task's decoder tries tens
    of paths and rejects nearly all. Returns how many it rejected and why the last of them failed.
    The paths rejected by the check are retraced in turn (`retrace_paths`); where that moves a link
    other paths share (the task's uplink, a rack's), the rest are priced again from there, as the walk
    would see them. Where the pass cannot price them (`trial_loads`), none: the walk tries them one by one.
    A check that refuses every path (`REFUSE_ALL`) is not asked: only whether each fits (`trial_fits`, or
    `fits_ahead` where the caller has it for all of `locs` as they stand)."""
    start, why, n, gbps = 0, "", len(locs), js.gbps
    refused = check is REFUSE_ALL  # (every path: none needs its load, nor the check's word on it)
    while n - start > 1:
        rest = locs[start:]
        if refused:
            fits = fits_ahead if start == 0 and fits_ahead is not None else state.trial_fits(own, rest, gbps)
            if fits is None:
                break
            first = len(rest)
        else:
            trial = state.trial_loads(own, rest, gbps)
            if trial is None:
                break
            fits = trial[0]
            first = check.first_kept(own, rest.tolist(), fits.tolist(), trial[1])
            if first == 0:
                break
        why = "slo" if fits[first - 1] else "bandwidth"
        kept = fits[:first]
        tried = rest[:first][kept]
        done = state.retrace_paths(own, tried, gbps)
        if done == len(tried):
            return start + first, why
        start += int(np.flatnonzero(kept)[done - 1]) + 1  # (past the path whose retrace moved a shared link)
        why = "slo"
    return start, why


def take_at(state: FreeState, js: RoundJob, kind: str, own: int, loc: int, model: str | None,
            check: RemoteCheck | None) -> tuple[DeviceGrant | None, str]:
    """One device of `kind` at `loc` for a task on `own`, with its traffic on the path; `why`
    ("bandwidth", "slo" or "") says what stopped it. The path's headroom and the cost model's `check`
    are asked before its traffic is taken: most paths tried fail the check."""
    locations = state.cluster.locations
    if loc == own:
        dev = state.take_device(kind, loc, model, js)
        return (None, "") if dev is None else (DeviceGrant(state.dev_id[dev], kind, False, locations[loc]), "")
    path = state.path(own, loc)
    gbps = js.gbps
    if not state.fits_traffic(path, gbps):
        return None, "bandwidth"
    if check is not None and not check(path):
        state.retrace_traffic(path, gbps)
        return None, "slo"
    state.take_traffic(path, gbps, js)
    dev = state.take_device(kind, loc, model, js)
    if dev is None:
        if gbps > 0:  # no traffic was taken otherwise (`take_traffic`), so none to give back
            state.undo_last_traffic(js)
        return None, ""
    js.remote += 1
    names = tuple(map(state.link_names.__getitem__, path))
    return DeviceGrant(state.dev_id[dev], kind, True, locations[loc], names, js.gbps), ""


def explain(state: FreeState, phase: DevicePhase, i: int, js: RoundJob) -> None:
    """Why the flow left (part of) task `i`'s devices unscheduled: no remote arcs (server-centric) and
    too few local devices, the SLO, not enough within reach, waiting being cheaper, or jobs ahead of it."""
    tasks, kind, remote = phase.tasks, phase.kind, phase.remote
    own, want = int(tasks.own[i]), int(tasks.want[i])
    best, u_cost = int(phase.best_cost[i]), int(tasks.u_cost[i])
    where = state.cluster.locations[own]
    local = int(state.free_count[kind][own]) if kind in state.free_count else 0
    if remote is None:
        js.fail(state, Reason.NO_DEVICES, _server_centric_shortfall(state, js, kind, own, want, local))
        return
    if remote.slo_blocked[i] and best >= u_cost:
        js.fail(state, Reason.SLO_AT_RISK, (
            f"needs {want} {kind} for a task on {where} ({local} free there); remote ones would miss "
            f"the SLO ({js.goal()}) under the current network load by more than waiting costs at "
            f"W={js.wait_rounds} (cost {best / SCALE:.3f} ≥ {u_cost / SCALE:.3f}); postponed"))
        return
    reach = state.reachable(kind, own, js.gbps, js.job.tasks.models.get(kind))
    if reach < want:
        everywhere = state.total_free(kind)
        reason = Reason.NO_DEVICES if everywhere < want or reach == everywhere else Reason.NO_BANDWIDTH
        js.fail(state, reason, f"needs {want} {kind}, {reach} free within {state.link_cap[own]:g} Gb/s of {where}")
        return
    if local < want:
        best = int(phase.best_remote[i])  # the devices it went without would have been remote
    if best >= u_cost:
        js.fail(state, Reason.POSTPONED, (
            f"waiting costs less than its best {kind} placement (cost {best / SCALE:.3f} ≥ "
            f"{u_cost / SCALE:.3f}, W={js.wait_rounds}); postponed"))
        return
    js.fail(state, Reason.CONTENTION, f"its {kind} went to jobs ahead of it in the queue this round")


def _server_centric_shortfall(state: FreeState, js: RoundJob, kind: str, own: int, want: int, local: int) -> str:
    """What a job's tasks on one machine need of `kind` against what it has free. All of them count,
    not only the task the flow left short: "needs 2, 3 free" would read as no shortfall at all when
    two tasks there need 2 each. Devices the job already took this round count as free (its own)."""
    where = state.cluster.locations[own]
    here = js.machines.count(own)
    devices = state.cluster.devices
    free = local + sum(1 for d in js.taken_devices if devices[d].kind == kind and devices[d].location == where)
    per = js.wants.get(kind, want)
    need = f"{want} {kind} on {where}" if here <= 1 else (
        f"{per * here} {kind} on {where} ({per} for each of its {here} tasks there)")
    return f"needs {need}, {free} free there (server-centric: no remote devices)"

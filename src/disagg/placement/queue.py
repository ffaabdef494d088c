"""The queue side of a round: order by total wait, then take the jobs that fit in what is free.

DRMaestro (Alg. 1): "Only the jobs that can fit in the currently available resources are gathered
from the queue, and to prevent starvation, the queue is sorted by the total wait time."
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter, is_

import numpy as np
from numpy.typing import NDArray

from disagg.model import Job, TaskRequest
from disagg.placement.commit import EPS, exceeds
from disagg.placement.decisions import Reason
from disagg.placement.state import FreeState, column

IntArray = NDArray[np.int64]


def order_queue(queue: Sequence[Job], now: float) -> list[Job]:
    """Longest total wait first; ties by submit time, then name (deterministic). The total wait
    `now - submit_s` falls as `submit_s` rises, so this is the order of (submit_s, name); `now` is
    kept in the signature because the order is defined by the wait.

    Sorted by the submit time alone first (numpy's stable argsort of the times, faster again than a
    float key, itself several times faster than a tuple); only a queue with equal submit times needs
    the names.

    The times are read with a comprehension (a quarter faster than `map(attrgetter)` over a simulated
    queue of 1,500 jobs, each round: the jobs lie apart in memory, and the getter's call was the rest)."""
    submits = np.fromiter([job.submit_s for job in queue], dtype=np.float64, count=len(queue))
    # Already in order, each time its own (no tie, no NaN: the simulator's queue, in order of arrival,
    # nearly every round): the queue as it is, which the stable argsort below would give.
    if (submits[1:] > submits[:-1]).all():
        return list(queue)
    if np.isnan(submits).any():  # (NaN sorts apart in numpy; Python's sort is the reference)
        ordered = sorted(queue, key=attrgetter("submit_s"))
        keys = list(map(attrgetter("submit_s"), ordered))
        unique = len(set(keys)) == len(keys)
    else:  # a stable argsort: the order `sorted` gives by the same float key
        at = np.argsort(submits, kind="stable")
        ordered = list(map(queue.__getitem__, at.tolist()))
        in_order = submits[at]
        unique = bool((in_order[1:] != in_order[:-1]).all())
    if unique:
        return ordered
    return sorted(ordered, key=attrgetter("submit_s", "name"))


@dataclass(frozen=True)
class Refusal:
    reason: Reason
    message: str


def task_fit_counts(state: FreeState, cpus: float, mem: float) -> NDArray[np.int64]:
    """How many tasks of this shape each machine can take now (cpu and memory only)."""
    return np.maximum(task_room_for(state, cpus, mem), 0).astype(np.int64)


def task_room_for(state: FreeState, cpus: float, mem: float) -> NDArray[np.float64]:
    """Per machine, how many tasks of `cpus` and `mem` its free cpus and memory hold, as floats (a task of
    no cpus or memory divides by zero, quietly: inf or NaN). A finite, positive divisor raises no
    floating-point warning whatever it divides, so the usual shape needs no errstate (half the call's
    time; a simulated run asks this thousands of times)."""
    quiet = 0 < cpus < math.inf and 0 < mem < math.inf
    with nullcontext() if quiet else np.errstate(divide="ignore", invalid="ignore"):
        out: NDArray[np.float64] = np.minimum(np.floor((state.cpu + EPS) / cpus), np.floor((state.mem + EPS) / mem))
    return out


#: How far below what is left a running sum must stay for the head to take a job without the walk:
#: the walk subtracts job by job, the running sum adds, and the two may round differently.
_HEAD_MARGIN = 1e-6
#: Up to how many requests `_Admission._asked_fit` asks the fit of one by one rather than per distinct shape.
_FEW_REQUESTS = 16
#: The head is first looked for among this many jobs: on a full cluster it is short or empty, and
#: the columns of a long queue would be read for nothing. A queue no longer than this is walked:
#: the head's fixed cost (a few numpy calls) is more than walking so few jobs.
HEAD_PROBE = 64


class Asks(dict[int, int]):
    """A request's admission code by `id()` of its `TaskRequest` (jobs often share one): a round that
    admits more than once passes the same one each time. Equal requests (count, cpus, memory, devices,
    models) share a code (`codes`): admission's memos are keyed by it, a small int, where a key of
    nested tuples would be hashed again at each of a long queue's jobs."""

    def __init__(self) -> None:
        super().__init__()
        self.codes: dict[tuple[object, ...], int] = {}

    def codes_of(self, requests: list[TaskRequest]) -> list[int]:
        """Each request's code, in order (a request not seen before gets its code here)."""
        codes = self.codes
        distinct = _distinct(requests)
        for t in distinct.values():
            if id(t) not in self:
                models = t.models
                key = (t.count, t.cpus, t.memory_gb, tuple(t.devices.items()), tuple(models.items()) if models else ())
                self[id(t)] = codes.setdefault(key, len(codes))
        if len(distinct) == 1:
            return [self[next(iter(distinct))]] * len(requests)
        return list(map(self.__getitem__, map(id, requests)))


def _distinct(requests: list[TaskRequest]) -> dict[int, TaskRequest]:
    """The distinct request objects, by `id`, in the order they first appear. A queue whose jobs all
    share one (the simulator's, of one job type) is told at once, without a dict of the whole queue."""
    if requests and all(map(is_, requests, repeat(requests[0]))):
        return {id(requests[0]): requests[0]}
    return dict(zip(map(id, requests), requests, strict=True))


def admit(state: FreeState, ordered: Sequence[Job], vectorised: bool = True, probe: int = HEAD_PROBE,
          asks: Asks | None = None, refused: dict[str, Refusal] | None = None,
          codes: Sequence[int] | None = None) -> tuple[list[int], dict[str, Refusal]]:
    """Split the ordered queue into the jobs this round considers (their places in `ordered`) and those
    refused, with why.

    A job is considered when (a) one of its tasks fits on some machine now, its gang fits in the
    sum of what machines can take, and (b) the cluster-wide free cpus, memory and devices left after
    the jobs ahead of it cover it. Necessary, not sufficient: the flow decides the rest.

    The queue's head, up to the first job that what is left cannot cover, is decided at once with
    running sums (`vectorised`; a queue that fits is all head; looked for among the first `probe`
    jobs, then the whole queue) where the walk took each of the first `probe` jobs; the rest job by
    job. Both give the same answer (a test checks): the head only takes the jobs the walk would take.

    `refused`: the dict to write the refusals into (and return), a round's own when it admits again.
    `codes`: the jobs' request codes (`asks.codes_of`), when the caller has them already (a round that
    admits again reads them off the codes it took of its whole queue once).
    """
    taken, out, tail = admit_deferred(state, ordered, vectorised, probe, asks, refused, codes)
    if tail is not None:
        tail.write(ordered, out)
    return taken, out


@dataclass
class Tail:
    """The end of a walk whose refusals were not written (`admit_deferred`): from `start` (a place in
    the jobs walked) on, every job is refused as the last job of its request was (`said`, by request
    code); `codes`: the request codes of those jobs, in order. On a full cluster most of a long queue is
    such a tail, and a flow round re-admits it several times: it keeps the tail as places and codes and
    writes the refusals that last once, at the end."""

    start: int
    said: dict[int, Refusal]
    codes: list[int]

    def write(self, ordered: Sequence[Job], refused: dict[str, Refusal]) -> None:
        """The tail's refusals into `refused`, by the names of `ordered`'s jobs from `start` on."""
        names = map(attrgetter("name"), ordered[self.start:])
        refused.update(zip(names, map(self.said.__getitem__, self.codes), strict=True))


def admit_deferred(state: FreeState, ordered: Sequence[Job], vectorised: bool = True, probe: int = HEAD_PROBE,
                   asks: Asks | None = None, refused: dict[str, Refusal] | None = None,
                   codes: Sequence[int] | None = None) -> tuple[list[int], dict[str, Refusal], Tail | None]:
    """`admit`, with the refusals of the walk's tail (once every request of the walk is refused with
    nothing taken since) left out of the dict and returned as a `Tail` (None: the walk had none).
    `admit` is this with the tail written."""
    admission = _Admission(state, Asks() if asks is None else asks, {} if refused is None else refused)
    first = 0
    if vectorised and len(ordered) > probe:
        # The head pays for its numpy calls only when it is long: the first `probe` jobs are walked while
        # each is taken (on a full cluster the walk soon refuses one and goes on alone: a simulated
        # round's head is a dozen jobs of a queue of 1,500), and only when all are, the head is looked
        # for from there.
        first, all_taken = admission.take_front(ordered, probe, codes)
        if all_taken:
            first += admission.take_head(ordered, probe, start=first)
    tail = admission.walk(ordered, first, codes=codes, defer=True)
    return admission.taken, admission.refused, tail


@dataclass
class _Head:
    """The queue's head as `take_head` finds it: its length, and per job of the queue read whether
    its gang fits on the machines at all and what it needs in all."""

    length: int
    fits: NDArray[np.bool_]
    need_cpu: NDArray[np.float64]
    need_mem: NDArray[np.float64]
    need_dev: dict[tuple[str, str | None], IntArray]


def _mapping_get(mapping: Mapping[str, int], key: str, default: int) -> int:
    """`Mapping.get`, for a request whose devices are not a plain dict."""
    return mapping.get(key, default)


class _Admission:
    """What is left as the queue is walked, and the refusals made so far.

    A long queue on a full cluster refuses thousands of jobs for the same few reasons, so refusals
    are made once per distinct reason and shared.
    """

    def __init__(self, state: FreeState, asks: Asks, refused: dict[str, Refusal]) -> None:
        self.state = state
        self.left_cpu = float(state.cpu.sum())
        self.left_mem = float(state.mem.sum())
        self.left_dev: dict[tuple[str, str | None], int] = {}
        self.free_dev: dict[tuple[str, str | None], int] = {}
        self.shape_fit: dict[tuple[float, float], int] = {}
        self.said: dict[tuple[object, ...], Refusal] = {}
        # The devices a request needs in all, per (kind, model): requests repeat along a queue.
        self.requests: dict[int, list[tuple[str, int, tuple[str, str | None]]]] = {}
        self.taken: list[int] = []  # places in the queue
        self.refused = refused
        # What is left moves only when a job is taken, so until then a job asking for what an earlier
        # one was refused for is refused the same way (a queue on a full cluster is mostly such jobs).
        self.last: dict[int, tuple[int, Refusal]] = {}
        self.asks = asks
        #: Per request taken once: what a job of it needs in all (cpus, memory, devices). Its gang fits
        #: the machines (what they can take does not change while the queue is walked), so the next job
        #: asking for it is taken when what is left covers that (`walk`), else looked at (`consider`).
        self.needs: dict[int, tuple[float, float, list[tuple[str, int, tuple[str, str | None]]]]] = {}

    def fit(self, cpus: float, memory_gb: float) -> int:
        """How many tasks of a shape the machines can take now."""
        shape = (cpus, memory_gb)
        found = self.shape_fit.get(shape)
        if found is None:
            found = self.shape_fit[shape] = int(task_fit_counts(self.state, cpus, memory_gb).sum())
        return found

    def most_free(self) -> tuple[float, float]:
        """The most free cpus and the most free memory on one machine, for a refusal that names them:
        read when one is first made (admission takes nothing from the state, so they are what they were
        at the start; read with each shape's fit, they were two numpy calls a shape and an admission,
        thousands of times a simulated run, for a message made a few times)."""
        state = self.state
        return float(state.cpu.max(initial=0)), float(state.mem.max(initial=0))

    def wanted(self, ask: int, t: TaskRequest) -> list[tuple[str, int, tuple[str, str | None]]]:
        found = self.requests.get(ask)
        if found is None:
            found = self.requests[ask] = [(kind, n * t.count, (kind, t.models.get(kind)))
                                          for kind, n in t.devices.items() if n > 0]
        return found

    def device_left(self, dev: tuple[str, str | None]) -> int:
        if dev not in self.left_dev:
            self.left_dev[dev] = self.free_dev[dev] = self.state.total_free(dev[0], dev[1])
        return self.left_dev[dev]

    def take(self, job: Job, at: int, wanted: list[tuple[str, int, tuple[str, str | None]]]) -> None:
        t = job.tasks
        self.left_cpu -= t.count * t.cpus
        self.left_mem -= t.count * t.memory_gb
        for _, need, dev in wanted:
            self.left_dev[dev] -= need
        self.taken.append(at)

    def take_front(self, ordered: Sequence[Job], n: int, codes: Sequence[int] | None = None) -> tuple[int, bool]:
        """Walk the first `n` jobs of the queue (none decided yet) while each is taken, as `walk` takes
        them; stop after the first it refuses. Returns how many jobs it decided, and whether it took
        every one of the `n`. (Nothing is refused before the refusal it stops at, so no memo of refusals
        is there to read: a job is taken in a run of its request, `_take_run`, or looked at, `consider`.)"""
        front = list(codes[:n]) if codes is not None else self.asks.codes_of([j.tasks for j in ordered[:n]])
        taken, needs = self.taken, self.needs
        at = 0
        while at < n:
            ask = front[at]
            need = needs.get(ask)
            if need is not None:
                run = self._take_run(need, front, at)
                if run > at:
                    taken.extend(range(at, run))
                    at = run
                    continue
            n_taken = len(taken)
            self.consider(ordered[at], at, ask)
            at += 1
            if len(taken) == n_taken:
                return at, False
        return at, True

    def take_head(self, ordered: Sequence[Job], probe: int = HEAD_PROBE, start: int = 0) -> int:
        """Decide the queue's head at once: the jobs from `start` (those before it decided) before the
        first one whose running sums of cpus, memory or devices (over the jobs that fit on the machines
        at all) reach what is left. Looks among the first `probe` of them, then, if they are all head,
        the rest of the queue. Returns how many jobs it decided."""
        if start:
            ordered = ordered[start:]
        probe = min(len(ordered), probe)
        head = self._find_head(ordered[:probe])
        if head.length == probe < len(ordered):
            head = self._find_head(ordered)
        # The head's jobs that fit on the machines are taken; the rest are refused for that, which
        # does not depend on what is left (so the order of the two does not matter).
        fits = head.fits[:head.length]
        for i in np.nonzero(~fits)[0].tolist():
            self.walk(ordered[i:i + 1], 0, offset=start + i)
        taken = np.nonzero(fits)[0]
        # What is left, subtracted job by job as the walk would (accumulate is sequential: the same
        # rounding).
        # (np.concatenate, not np.r_: the same array without r_'s several microseconds of parsing a call.)
        self.left_cpu = float(np.subtract.accumulate(np.concatenate(([self.left_cpu], head.need_cpu[taken])))[-1])
        self.left_mem = float(np.subtract.accumulate(np.concatenate(([self.left_mem], head.need_mem[taken])))[-1])
        for dev, need_d in head.need_dev.items():
            self.left_dev[dev] -= int(need_d[taken].sum())
        self.taken += (taken + start).tolist() if start else taken.tolist()
        return head.length

    def _find_head(self, ordered: Sequence[Job]) -> _Head:
        n = len(ordered)
        if n == 0:
            return _Head(0, np.zeros(0, dtype=bool), np.zeros(0), np.zeros(0), {})
        requests = list(map(attrgetter("tasks"), ordered))
        # A queue's jobs mostly share a few request objects (the simulator's share one per job type): the
        # columns are read off those and spread over the jobs, rather than off every job.
        distinct = _distinct(requests)
        shared = 2 * len(distinct) <= n
        asked = list(distinct.values()) if shared else requests
        count, cpus, memory = (column(asked, name) for name in ("count", "cpus", "memory_gb"))
        # Does a job's gang fit on the machines at all (per distinct task shape)?
        fit = self._asked_fit(cpus, memory)
        need_dev = self._device_needs(asked, count)
        if shared:  # (every request is some job's: the distinct values and the devices' kinds are the jobs')
            if len(distinct) == 1:
                of = np.zeros(n, dtype=np.int64)
            else:
                index = {key: k for k, key in enumerate(distinct)}
                of = np.fromiter(map(index.__getitem__, map(id, requests)), dtype=np.int64, count=n)
            count, cpus, memory, fit = count[of], cpus[of], memory[of], fit[of]
            need_dev = {dev: need_d[of] for dev, need_d in need_dev.items()}
        ok = fit >= count
        need_cpu, need_mem = count * cpus, count * memory
        over = np.zeros(n, dtype=bool)
        for need, left in ((need_cpu, self.left_cpu), (need_mem, self.left_mem)):
            over |= np.cumsum(np.where(ok, need, 0.0)) > left - _HEAD_MARGIN * max(1.0, abs(left))
        for dev, need_d in need_dev.items():
            over |= np.cumsum(np.where(ok, need_d, 0)) > self.device_left(dev)
        over &= ok
        return _Head(int(np.argmax(over)) if over.any() else n, ok, need_cpu, need_mem, need_dev)

    def _asked_fit(self, cpus: NDArray[np.float64], memory: NDArray[np.float64]) -> NDArray[np.float64]:
        """Per request (its task's `cpus` and `memory`), how many of its tasks the machines can take (`fit`),
        asked once per distinct task shape. A few requests of finite, positive numbers (a simulated queue's
        one or two) are asked in turn, the memo of `fit` by shape answering the repeats (equal such floats
        are the same key): three np.unique calls cost more than the whole head otherwise."""
        if len(cpus) <= _FEW_REQUESTS:
            pairs = list(zip(cpus.tolist(), memory.tolist(), strict=True))
            if all(0 < c < math.inf and 0 < m < math.inf for c, m in pairs):
                return np.array([self.fit(c, m) for c, m in pairs], dtype=np.float64)
        cpu_values, cpu_of = np.unique(cpus, return_inverse=True)
        mem_values, mem_of = np.unique(memory, return_inverse=True)
        shapes, shape_of = np.unique(cpu_of * len(mem_values) + mem_of, return_inverse=True)
        per_cpu = len(mem_values)
        shape_fit = np.array([self.fit(float(cpu_values[s // per_cpu]), float(mem_values[s % per_cpu]))
                              for s in shapes.tolist()], dtype=np.float64)
        out: NDArray[np.float64] = shape_fit[shape_of]
        return out

    @staticmethod
    def _device_needs(requests: list[TaskRequest],
                      count: NDArray[np.float64]) -> dict[tuple[str, str | None], IntArray]:
        """Per (kind, model) the devices each job needs in all; a model only where the job pins one."""
        n = len(requests)
        devices = list(map(attrgetter("devices"), requests))
        models = list(map(attrgetter("models"), requests))
        counts = count.astype(np.int64)
        out: dict[tuple[str, str | None], IntArray] = {}
        # `dict.get` straight on the queue's dicts (the usual mappings) costs a fifth of a `methodcaller`'s call.
        get = dict.get if set(map(type, devices)) == {dict} else _mapping_get
        for kind in sorted(set().union(*devices)):
            per_task = np.fromiter(map(get, devices, itertools.repeat(kind), itertools.repeat(0)), dtype=np.int64,
                                   count=n)
            out[(kind, None)] = np.maximum(per_task, 0) * counts
        for i in np.nonzero(np.fromiter(map(bool, models), dtype=bool, count=n))[0].tolist():
            for kind, model in models[i].items():
                need = out.get((kind, None))
                if need is not None and need[i] > 0:
                    out.setdefault((kind, model), np.zeros(n, dtype=np.int64))[i] = need[i]
                    need[i] = 0
        return {dev: need for dev, need in out.items() if need.any()}

    def walk(self, ordered: Sequence[Job], first: int, offset: int = 0, codes: Sequence[int] | None = None,
             defer: bool = False) -> Tail | None:
        """Decide the jobs from `first` on one by one (their places in the queue: `offset` + index).
        A job asking for what the last refused one asked for, with nothing taken since, is refused
        the same way without a look (on a full cluster most of a long queue is); once every request
        of the walk is so refused, nothing more can be taken (what is left only shrinks), and the rest
        of the queue is refused at once, each job the way its request was: written into `refused`, or
        (`defer`) returned as a `Tail` (its `start` a place in `ordered`; None: no tail)."""
        asks, last, refused, taken = self.asks, self.last, self.refused, self.taken
        jobs = ordered[first:] if first else ordered
        # (The requests with a comprehension: over a queue of 1,500 jobs apart in memory, `map(attrgetter)`
        # took a third longer.)
        ask_list = (asks.codes_of([job.tasks for job in jobs]) if codes is None else
                    list(codes[first:]) if first else list(codes))
        # (A walk of one request, a simulated queue's usual one, told by a count, by identity in C, where
        # the set hashes each of its thousands of codes.)
        walk_asks = ({ask_list[0]} if ask_list and ask_list.count(ask_list[0]) == len(ask_list) else
                     set(ask_list))
        seen_for = last.get
        n_taken = len(taken)
        # The walk's requests refused with nothing taken since (a take makes every request worth a look).
        blocked = {a for a in walk_asks if (s := seen_for(a)) is not None and s[0] == n_taken}
        if ask_list and len(blocked) == len(walk_asks):  # (every request refused already: all a tail)
            tail = Tail(first, {a: last[a][1] for a in walk_asks}, ask_list)
            if not defer:
                tail.write(ordered, refused)
                return None
            return tail
        needs = self.needs
        n_jobs, at = len(ask_list), 0
        # Inline: the walk runs over thousands of jobs on a full cluster, most of them memo hits, and a
        # round that admits many jobs of one request takes them here (server-centric ones, hundreds): a
        # run of them at once (`_take_run`).
        while at < n_jobs:
            job, ask = jobs[at], ask_list[at]
            seen = seen_for(ask)
            if seen is not None and seen[0] == n_taken:
                refused[job.name] = seen[1]
                at += 1
                continue
            need = needs.get(ask)
            if need is not None:
                run = self._take_run(need, ask_list, at)
                if run > at:
                    taken.extend(range(offset + first + at, offset + first + run))
                    n_taken += run - at
                    blocked.clear()
                    at = run
                    continue
            self.consider(job, offset + first + at, ask)
            if len(taken) != n_taken:
                n_taken = len(taken)
                blocked.clear()
                at += 1
                continue
            blocked.add(ask)
            if len(blocked) == len(walk_asks):
                tail = Tail(first + at + 1, {a: last[a][1] for a in walk_asks}, ask_list[at + 1:])
                if not defer:
                    tail.write(ordered, refused)
                    return None
                return tail if tail.codes else None
            at += 1
        return None

    def _take_run(self, need: tuple[float, float, list[tuple[str, int, tuple[str, str | None]]]],
                  ask_list: list[int], at: int) -> int:
        """Take the jobs from `at` on while they ask for the request of `need` (taken once already, so its
        gang fits the machines) and what is left covers them, subtracting as `take` does, job by job
        (the same rounding); returns where the run stopped (`at`: nothing taken). (`exceeds` inlined.)"""
        need_cpu, need_mem, devices = need
        left_cpu, left_mem, left_dev = self.left_cpu, self.left_mem, self.left_dev
        ask, run, n_jobs = ask_list[at], at, len(ask_list)
        if len(devices) == 1:  # (the usual request: one kind of device)
            (_, n, dev), = devices
            free = left_dev[dev]
            while (run < n_jobs and ask_list[run] == ask and not need_cpu > left_cpu + EPS
                   and not need_mem > left_mem + EPS and not n > free):
                left_cpu -= need_cpu
                left_mem -= need_mem
                free -= n
                run += 1
            left_dev[dev] = free
        else:
            while (run < n_jobs and ask_list[run] == ask and not need_cpu > left_cpu + EPS
                   and not need_mem > left_mem + EPS and all(n <= left_dev[dev] for _, n, dev in devices)):
                left_cpu -= need_cpu
                left_mem -= need_mem
                for _, n, dev in devices:
                    left_dev[dev] -= n
                run += 1
        self.left_cpu, self.left_mem = left_cpu, left_mem
        return run

    def consider(self, job: Job, at: int, ask: int) -> None:
        """Take the job, or refuse it naming what it lacks."""
        t = job.tasks
        total_fit = self.fit(t.cpus, t.memory_gb)
        need_cpu, need_mem = t.count * t.cpus, t.count * t.memory_gb
        wanted = self.wanted(ask, t)
        said = self.said
        short = None
        if total_fit < t.count:
            key: tuple[object, ...] = ("fit", t.count, (t.cpus, t.memory_gb))
            if key not in said:
                best_cpu, best_mem = self.most_free()
                said[key] = Refusal(Reason.NO_CAPACITY, (
                    f"needs {t.count} task(s) of {t.cpus:g} cpus and {t.memory_gb:g} GB each on machines; "
                    f"{total_fit} fit now (most free on one machine: {best_cpu:g} cpus, {best_mem:g} GB)"))
            short = said[key]
        elif exceeds(need_cpu, self.left_cpu) or exceeds(need_mem, self.left_mem):
            left_cpu, left_mem = self.left_cpu, self.left_mem
            key = ("left", need_cpu, need_mem, left_cpu, left_mem)
            if key not in said:
                said[key] = Refusal(Reason.CONTENTION, (
                    f"needs {need_cpu:g} cpus and {need_mem:g} GB; {left_cpu:g} cpus and {left_mem:g} GB "
                    f"are left after the jobs ahead of it in the queue"))
            short = said[key]
        else:
            for kind, need, dev in wanted:
                left = self.device_left(dev)
                if need > left:
                    key = ("dev", need, dev, left)
                    if key not in said:
                        what = f"{kind} ({dev[1]})" if dev[1] else kind
                        total = self.free_dev[dev]
                        said[key] = Refusal(Reason.NO_DEVICES if need > total else Reason.CONTENTION,
                                            f"needs {need} {what}; {total} free, {left} left after the "
                                            f"jobs ahead of it in the queue")
                    short = said[key]
                    break
        if short is not None:
            self.refused[job.name] = short
            self.last[ask] = (len(self.taken), short)
            return
        self.needs[ask] = (need_cpu, need_mem, wanted)
        self.take(job, at, wanted)

"""The multi-phase min-cost-flow placer shared by `drmaestro`, `drmaestro-na` and `firmament`.

    queue order → admit → phase 1 (cpu, memory) → phase k per device kind → gang check → decisions
                    ↑_________________ retry jobs that lost only to contention ________________|

Phase 1 is `phase_one`, phase k is `phase_device`; this module runs them, retries, and turns the
surviving jobs into decisions. See README.md in this folder for the networks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import compress
from operator import attrgetter, not_
from typing import TypeVar, overload

from disagg.model import DEVICE_KINDS, Cluster, Job, TaskRequest
from disagg.placement import phase_device, phase_one
from disagg.placement.base import Clock, FairTerms, WaitingQueue, collector_paused, current_jobs, no_clock
from disagg.placement.cost import TAU_MAX_S, TAU_MIN_S, clamp_goal, clamp_importance, phi, profile_of
from disagg.placement.cost_models import get_cost_model, local_capacity
from disagg.placement.decisions import (
    Decisions,
    DeviceGrant,
    JobPlacement,
    LaterReasons,
    LaterStats,
    Reason,
    TaskPlacement,
    Unplaced,
)
from disagg.placement.fairness import fair_order
from disagg.placement.jobstate import FlowOptions, IntArray, JobTable, RoundJob, Timings, request
from disagg.placement.network import FlowNetwork
from disagg.placement.queue import Asks, Refusal, Tail, admit_deferred, order_queue
from disagg.placement.search import search
from disagg.placement.solver import solve
from disagg.placement.state import FreeState
from disagg.profiles import Profile, expected_s

__all__ = ["FlowOptions", "FlowPlacer"]

T = TypeVar("T")

#: What a device phase fails a job for when its remote devices could not be had: no devices or
#: bandwidth within reach, or (network-aware) they would miss the SLO.
_REMOTE_SHORT = (Reason.NO_BANDWIDTH, Reason.NO_DEVICES, Reason.SLO_AT_RISK)


def _image_parts(job: Job) -> tuple[Profile, float | None, float, float]:
    """What a round's jobs of `job`'s image share (`_RoundJobCache.images`), read off the first of them:
    its profile, its local time if the profile is known, the τ of a job without an SLO, and the bandwidth
    a remote device of a job that does not say draws.

    All four are the profile's alone, worked out as `phi`, `goal_s` and `remote_gbps` work them out for
    such a job (a test holds them to those): a known profile's local time does not read the goal it is
    given, a job without an SLO has the profile's τ, one without a bandwidth the profile's. (Through
    those functions this took a copy of the job without its SLO and bandwidth, `dataclasses.replace`:
    most of this call, made for each image in each of a simulated run's rounds.)"""
    profile = profile_of(job)
    known = profile.known
    return (profile, expected_s(profile, 0.0, 0.0) if known else None, 1.5 * profile.base_s if known else 1.0,
            profile.network_gbps)


def _request_parts(t: TaskRequest, shapes: dict[tuple[object, ...], tuple[object, ...]]
                   ) -> tuple[dict[str, int], tuple[object, ...]]:
    """What a round's jobs asking `t` share (`_RoundJobCache.requests`): the devices it wants (read-only,
    shared), and its shape, one object per distinct request in `shapes` (classes compare shapes by
    identity): requests that differ only in how they are written (order, zero counts) share it."""
    wanted = {k: int(v) for k, v in t.devices.items() if v > 0}
    key = (t.cpus, t.memory_gb, tuple(sorted(wanted.items())), tuple(sorted(t.models.items())))
    return wanted, shapes.setdefault(key, key)


@dataclass
class _RoundJobCache:
    """What job states of one round share: per image its profile, (known profiles) local time and
    defaults; per request its wanted devices and its shape, one shape object per distinct request."""

    #: A `WaitingQueue`'s `wait_rounds`: each admitted job's W this round; None: the job's own.
    wait_rounds: Callable[[Job], int] | None = None
    images: dict[str, tuple[Profile, float | None, float, float]] = field(default_factory=dict)
    shapes: dict[tuple[object, ...], tuple[object, ...]] = field(default_factory=dict)
    asks: Asks = field(default_factory=Asks)  # admission's, shared by the round's admissions
    requests: dict[tuple[object, ...], tuple[dict[str, int], tuple[object, ...]]] = field(default_factory=dict)
    last_request: object = None
    last_parts: tuple[dict[str, int], tuple[object, ...]] = ({}, ())
    importance: dict[float, float] = field(default_factory=dict)


class _Places(Sequence[Job]):
    """The jobs at some places of the queue (`ordered[places[i]]`), each read when asked for: a round's
    re-admission walks thousands of places each iteration and reads the jobs up to its tail only."""

    __slots__ = ("_ordered", "_places")

    def __init__(self, ordered: list[Job], places: list[int]) -> None:
        self._ordered = ordered
        self._places = places

    def __len__(self) -> int:
        return len(self._places)

    @overload
    def __getitem__(self, i: int) -> Job: ...

    @overload
    def __getitem__(self, i: slice) -> list[Job]: ...

    def __getitem__(self, i: int | slice) -> Job | list[Job]:
        if isinstance(i, slice):
            return list(map(self._ordered.__getitem__, self._places[i]))
        return self._ordered[self._places[i]]


@dataclass
class FlowRound:
    """What one `FlowPlacer.place` computes, as one value: the free state it reserves from, the queue in
    the order it admits (`ordered`), the jobs it admitted (`jobs`, queue order) and refused (`refused`),
    their numbers as arrays (`table`, with the tenants' fair-share terms, `bonus`), the jobs placed so far,
    per shape the fit of its first iteration (`first_fit`), and its timings. Each stage of the round
    (`FlowPlacer._admit`, `_iteration`, `_retries`, `_readmit`, `_last_resort`, `_decisions`) reads and
    extends it; nothing of it outlives the call."""

    snapshot: Cluster
    state: FreeState
    ordered: list[Job]
    bonus: dict[str, float]
    cache: _RoundJobCache
    jobs: list[RoundJob]
    refused: dict[str, Refusal]
    table: JobTable
    clock: Clock
    timings: Timings = field(default_factory=Timings)
    placed: list[RoundJob] = field(default_factory=list)
    first_fit: dict[int, int] = field(default_factory=dict)
    #: Places in the queue of the jobs refused only for contention: re-admitted once those ahead are decided.
    #: From `tail_from` on, the last walk's tail (`queue.Tail`): refused as their requests were
    #: (`tail_said`, by the codes `tail_codes`), never written into `refused` (`_unplaced` reads them
    #: off the tail); before it, jobs whose refusal `refused` holds.
    late: list[int] = field(default_factory=list)
    tail_from: int = 0
    tail_said: dict[int, Refusal] = field(default_factory=dict)
    tail_codes: list[int] = field(default_factory=list)
    #: The request code (`queue.Asks.codes_of`) of each job of `late` before `tail_from`: taken when
    #: re-admission first runs (and only for those jobs), then kept in step with `late`.
    head_codes: list[int] | None = None
    iterations: int = 0
    #: Places in the queue of the jobs re-admitted for the next iteration whose job states are not made
    #: yet (`FlowPlacer._warm`): made when a phase looks at them, which a phase that no shape of its jobs
    #: fits does not (`FlowPlacer._nowhere`), nor a last iteration. `cold_failed`: why such a job failed
    #: without a job state (by place in the queue); `cold_admitted`: how many jobs were admitted so.
    cold: list[int] = field(default_factory=list)
    cold_failed: dict[int, tuple[Reason, str]] = field(default_factory=dict)
    cold_admitted: int = 0
    #: What the last phase that fitted nowhere (`FlowPlacer._nowhere`) said per request, gbps and image:
    #: still what a phase would say while nothing has been taken since (such a phase takes nothing, nor
    #: does re-admission); None once a phase has been built.
    nowhere_said: dict[tuple[object, ...], tuple[Reason, str]] | None = None
    #: Why jobs wait made only when read (`WaitingQueue.reasons_later`: the simulator's rounds).
    reasons_later: bool = False
    #: The last iteration's re-admission left for when the reasons or stats are read (`FlowPlacer._later`):
    #: all it decides is which jobs are said to be still contended, and how many were admitted.
    readmit_later: bool = False

    @property
    def queue_len(self) -> int:
        return len(self.ordered)


class FlowPlacer:
    """Runs the phases for a set of options, pricing with the options' cost model. Stateless between
    rounds: a round's state is its `FlowRound`, made and dropped by each `place`."""

    def __init__(self, options: FlowOptions) -> None:
        self.options = options
        self.costs = get_cost_model(options.cost_model)
        #: When a list, every solved network of a round is appended as (phase, network, flows), for
        #: debugging (`disagg place --dump-graphs`). None (the default) keeps nothing.
        self.graphs: list[tuple[str, FlowNetwork, IntArray]] | None = None

    def _keep(self, phase: str, net: FlowNetwork, flows: IntArray) -> None:
        if self.graphs is not None:
            self.graphs.append((phase, net, flows))

    # -- the round ---------------------------------------------------------------------------------

    def place(self, snapshot: Cluster, queue: Sequence[Job], now: float, clock: Clock = no_clock,
              terms: FairTerms | None = None) -> Decisions:
        start = clock()
        with collector_paused():
            decisions = self._place(snapshot, queue, now, clock, terms or {})
        # Freeing the round's working state (when `_place` returns) and the one collection that leaving
        # the pause runs are part of the round's Python cost: counted as decoding.
        round_s = clock() - start
        decisions.timings["decode_s"] += round_s - decisions.timings["round_s"]
        decisions.timings["round_s"] = round_s
        return decisions

    def _place(self, snapshot: Cluster, queue: Sequence[Job], now: float, clock: Clock, terms: FairTerms
               ) -> Decisions:
        """The stages of a round (placement/README.md): admit; iterations of phase 1, the device phases
        and the gang check, each followed by the retries (contention losers, the liveness rule's forced
        jobs, second tries) and re-admission; the last resort; the decisions."""
        start = clock()
        rnd = self._admit(snapshot, queue, now, clock, terms)
        rnd.timings.build_s += clock() - start
        pending = rnd.jobs
        for _ in range(self.options.max_iterations):
            if not pending and not rnd.cold:
                break
            pending = self._iteration(rnd, pending)
        rnd.cold_admitted += len(rnd.cold)  # (re-admitted by the last iteration: no phase looks at them)
        # (A phase that fits nowhere made `cold` empty: what is left there was re-admitted by the last iteration.)
        if not snapshot.allocations and not rnd.placed and (rnd.jobs or rnd.cold_admitted):
            rnd.placed += self._last_resort(rnd.state, self._oldest(rnd))
        decode_start = clock()
        placed, unplaced = self._decisions(rnd)
        slo_at_risk = sum(1 for p in placed if p.slo_at_risk)
        rnd.timings.decode_s += clock() - decode_start
        return Decisions(
            policy=self.options.name,
            placed=placed,
            unplaced=unplaced,
            timings=rnd.timings.as_dict(clock() - start),
            stats=(LaterStats(partial(self._stats, rnd, slo_at_risk)) if rnd.readmit_later
                   else self._stats(rnd, slo_at_risk)),
        )

    def _admit(self, snapshot: Cluster, queue: Sequence[Job], now: float, clock: Clock, terms: FairTerms
               ) -> FlowRound:
        """Stage 1: the queue in order (with tenants, fair order by the fair-share `terms` that
        `placement.fairness` hands the policy), what is free covers (admission), the admitted jobs' records."""
        state = FreeState(snapshot)
        bonus = dict(terms)
        # W is read off the jobs the round admits (their job states), but fair order reads every job's.
        waits = queue.wait_rounds if isinstance(queue, WaitingQueue) and not bonus else None
        ordered = fair_order(order_queue(queue if waits is not None else current_jobs(queue), now), bonus)
        cache = _RoundJobCache(wait_rounds=waits)
        admitted, refused, tail = admit_deferred(state, ordered, asks=cache.asks)
        jobs = self._job_states(map(ordered.__getitem__, admitted), admitted, cache)
        self._guard(state, jobs)
        rnd = FlowRound(snapshot, state, ordered, bonus, cache, jobs, refused, JobTable.of(jobs, bonus), clock,
                        reasons_later=isinstance(queue, WaitingQueue) and queue.reasons_later)
        # Only refusals for contention change between iterations (re-admission), so the jobs that may
        # get another look only ever shrink from this list, in queue order.
        head = len(ordered) if tail is None else tail.start
        rnd.late = [i for i, j in enumerate(ordered[:head]) if j.name in refused] if refused else []
        rnd.tail_from = len(rnd.late)
        if tail is not None:
            rnd.late += range(tail.start, len(ordered))
            rnd.tail_said, rnd.tail_codes = tail.said, tail.codes
        return rnd

    def _iteration(self, rnd: FlowRound, pending: list[RoundJob]) -> list[RoundJob]:
        """Stage 2, once per iteration: phase 1, the device phases, the gang check; then the retries and
        re-admission. Returns the jobs for the next iteration (none: the round is over)."""
        rnd.iterations += 1
        known: dict[int, IntArray] = {}  # the shapes' fits `_nowhere` found, for phase 1 (the same state)
        if self._nowhere(rnd, pending, known):
            first: list[RoundJob] = []
        else:
            pending = self._warm(rnd, pending)
            fitting = phase_one.gangs_that_fit(rnd.state, pending, self.costs, rnd.first_fit, known)
            first = self._phase_one(rnd, fitting, known) if fitting else []
        survivors = first
        for kind in DEVICE_KINDS:
            wanting = self._wanting(survivors, kind, rnd.cache)
            if wanting:
                self._phase_device(rnd, wanting, kind)
                survivors = [js for js in survivors if js.failure is None]
        rnd.placed += survivors
        retry, forced = self._retries(rnd, pending, first)
        fresh = self._readmit(rnd) if not self._readmit_later(rnd, forced) else []
        if forced:
            rnd.table = rnd.table.extended(rnd.jobs, [], rnd.bonus)
        # Nothing placed, nobody new: stop, unless jobs the contention losers lost to failed after all
        # (what the flow gave them is free again; looked for only then: a pass over every job of the round).
        if not survivors and not fresh and not forced and not (retry and any(
                js.failure is not None and js.failure[0] != Reason.CONTENTION for js in pending)):
            return []
        for js in retry:
            js.failure = None
        rnd.cold = fresh
        return sorted(retry, key=lambda js: js.order)

    def _readmit_later(self, rnd: FlowRound, forced: list[RoundJob]) -> bool:
        """Whether the last iteration's re-admission waits till the reasons or stats are read (and then
        runs, `_later`): where the caller reads them only now and then (`reasons_later`: the simulator),
        nothing is forced, and something runs (so no last resort reads what it admits). Its walk only says
        which jobs are still contended (`FlowRound.cold`) and how many were admitted: a fifth of a
        simulated round's last iteration (drmaestro, paper-128m-4096j), for reasons read once a run."""
        rnd.readmit_later = (rnd.reasons_later and rnd.iterations >= self.options.max_iterations and not forced
                             and bool(rnd.snapshot.allocations))
        return rnd.readmit_later

    def _later(self, rnd: FlowRound) -> None:
        """The re-admission `_readmit_later` left, made now (once): its jobs are still contended."""
        if rnd.readmit_later:
            rnd.readmit_later = False
            rnd.cold = self._readmit(rnd)
            rnd.cold_admitted += len(rnd.cold)

    def _stats(self, rnd: FlowRound, slo_at_risk: int) -> dict[str, int]:
        """The round's stats (`slo_at_risk`: its placements said to put their SLO at risk), once what
        `_readmit_later` left is made."""
        self._later(rnd)
        return {"admitted": len(rnd.jobs) + rnd.cold_admitted, "iterations": rnd.iterations,
                "slo_at_risk": slo_at_risk}

    def _retries(self, rnd: FlowRound, pending: list[RoundJob], first: list[RoundJob]
                 ) -> tuple[list[RoundJob], list[RoundJob]]:
        """Stage 3: who gets another iteration — the jobs that lost only to contention, the lone job the
        liveness rule forces (`_must_place`) and the second tries (`_second_try`). Returns (all of them,
        the forced and second tries)."""
        retry = [js for js in pending if js.failure is not None and js.failure[0] == Reason.CONTENTION]
        forced = self._must_place(rnd.snapshot, rnd.queue_len, pending) + self._second_try(rnd.state, first)
        retry += [js for js in forced if js.failure is not None and js.failure[0] != Reason.CONTENTION]
        return retry, forced

    def _readmit(self, rnd: FlowRound) -> list[int]:
        """Stage 4: jobs refused up front only because the jobs ahead of them claimed what was free get
        another look, now that those jobs are decided (some of them may not have been placed). Returns
        the places in the queue of those admitted (their job states are made when a phase needs them:
        `_warm`)."""
        ordered, refused, late, split, contention = rnd.ordered, rnd.refused, rnd.late, rnd.tail_from, Reason.CONTENTION
        if rnd.head_codes is None:
            rnd.head_codes = rnd.cache.asks.codes_of([ordered[i].tasks for i in late[:split]])
        head_codes = rnd.head_codes
        # Still refused for contention: the jobs walked one by one by their own refusal, the tail (most
        # of a long queue on a full cluster) by its requests'; what the tail's other jobs were refused
        # for is final, written now.
        kept = [k for k in range(split) if refused[ordered[late[k]].name].reason is contention]
        tail_codes = rnd.tail_codes
        still = {a: r.reason is contention for a, r in rnd.tail_said.items()}
        # (Usually every request of the last walk is still refused for contention: then so is the whole
        # tail, without a look at each of its jobs; and usually so is every job of the head: then the jobs
        # to walk are `late` as it is, not a copy of its thousands of places.)
        mask = None if all(still.values()) else list(map(still.__getitem__, tail_codes))
        positions: list[int]
        if mask is None or all(mask):
            if len(kept) == split:
                positions, codes = late, head_codes + tail_codes if head_codes else tail_codes
            else:
                positions = [*map(late.__getitem__, kept), *late[split:]]
                codes = [*map(head_codes.__getitem__, kept), *tail_codes]
        else:  # (some request's refusal is final: the tail's jobs asking it are refused for good)
            final = Tail(0, rnd.tail_said, list(compress(tail_codes, map(not_, mask))))
            final.write(list(map(ordered.__getitem__, compress(late[split:], map(not_, mask)))), refused)
            positions = [*map(late.__getitem__, kept), *compress(late[split:], mask)]
            codes = [*map(head_codes.__getitem__, kept), *compress(tail_codes, mask)]
        # (Walked: jobs refused for contention once mostly are again, which the walk's memo of
        # refusals answers without a look; the head would stop at the first.)
        # The refusals go straight into the round's (every job walked is in it already), but for the
        # walk's tail. (The jobs as a view of the queue: the walk reads those up to its tail only.)
        more, _, tail = admit_deferred(rnd.state, _Places(ordered, positions), vectorised=False,
                                       asks=rnd.cache.asks, refused=refused, codes=codes)
        fresh = [positions[k] for k in more]
        for i in fresh:
            refused.pop(ordered[i].name, None)  # (a job of an earlier tail has none)
        end = len(positions) if tail is None else tail.start
        if more:
            taken = set(more)
            rnd.late = [i for k, i in enumerate(positions[:end]) if k not in taken]
            rnd.head_codes = [a for k, a in enumerate(codes[:end]) if k not in taken]
            rnd.tail_from = len(rnd.late)
            if tail is not None:
                rnd.late += positions[end:]
        else:  # (nothing taken: the same places, the walk's tail from `end` on)
            rnd.late, rnd.head_codes, rnd.tail_from = positions, codes[:end], end
        rnd.tail_said, rnd.tail_codes = ({}, []) if tail is None else (tail.said, tail.codes)
        return fresh

    def _warm(self, rnd: FlowRound, pending: list[RoundJob]) -> list[RoundJob]:
        """The re-admitted jobs' job states, made for the phase that looks at them (nothing has changed
        the free state since they were admitted): appended to the round's jobs and table, and merged into
        `pending` in queue order."""
        if not rnd.cold:
            return pending
        ordered, cache = rnd.ordered, rnd.cache
        fresh = self._job_states(map(ordered.__getitem__, rnd.cold), rnd.cold, cache)
        rnd.cold = []
        self._guard(rnd.state, fresh)
        rnd.jobs += fresh
        rnd.table = rnd.table.extended(rnd.jobs, fresh, rnd.bonus)
        return sorted(pending + fresh, key=lambda js: js.order)

    def _nowhere(self, rnd: FlowRound, pending: list[RoundJob], known: dict[int, IntArray]) -> bool:
        """Phase 1 when no shape of its jobs (`pending`, and the re-admitted ones not yet made, `rnd.cold`)
        fits any machine (`phase_one.fits_nowhere`): every job fails as the decoder would fail it, without
        a network; a re-admitted job without a job state of its own (one is made per request and gbps, to
        stand for them). A server-centric round whose free devices all sit in pools re-admits hundreds of
        jobs each iteration that no machine serves (paper-128m-4096j under `firmament`: three quarters of
        its phase-1 jobs). False (nothing done): the phase is built (always, when its networks are kept), with the
        fits found here (`known`)."""
        if self.graphs is not None:
            return False
        start = rnd.clock()
        ordered = rnd.ordered
        # The re-admitted jobs by request and what sets their gbps (what their fit and their reason read),
        # as columns: most of them ask for the same few things.
        cold = rnd.cold
        jobs = list(map(ordered.__getitem__, cold))
        keys = list(zip(map(id, map(attrgetter("tasks"), jobs)), map(attrgetter("network_gbps"), jobs),
                        map(attrgetter("image"), jobs), strict=True))
        said = rnd.nowhere_said
        if not pending and said is not None and all(map(said.__contains__, keys)):
            why = said  # (the same state, and keys that fitted nowhere in it: `_fits_nowhere`)
            failed = True
        else:
            why, failed = self._fits_nowhere(rnd, pending, cold, keys, known)
        rnd.nowhere_said = why if failed else None
        if failed:
            rnd.cold_failed.update(zip(cold, map(why.__getitem__, keys), strict=True))
            rnd.cold_admitted += len(cold)
            rnd.cold = []
        rnd.timings.decode_s += rnd.clock() - start
        return failed

    def _fits_nowhere(self, rnd: FlowRound, pending: list[RoundJob], cold: list[int],
                      keys: Sequence[tuple[object, ...]], known: dict[int, IntArray]
                      ) -> tuple[dict[tuple[object, ...], tuple[Reason, str]], bool]:
        """`phase_one.fits_nowhere` for `pending` and one stand-in per key of the re-admitted jobs (`cold`,
        their `keys`): what it failed each key for, and whether it did.

        A phase that fitted nowhere takes nothing, nor does the re-admission after it, so the next
        iteration's phase, when it looks only at re-admitted jobs of keys this one failed (a server-centric
        round's last iteration: `_nowhere`), would find them fitting nowhere again for the same reasons: a
        key's fit and reason read its request and gbps and the free state, and a shape that fitted nowhere
        at the least gbps of its jobs fits nowhere at any more. So it is not asked again."""
        ordered = rnd.ordered
        firsts = dict(zip(keys, cold, strict=True))
        # (One call for them all: made one by one, each paid the loop's setup.)
        stand_ins = dict(zip(firsts, self._job_states(map(ordered.__getitem__, firsts.values()), firsts.values(),
                                                      rnd.cache), strict=True))
        why: dict[tuple[object, ...], tuple[Reason, str]] = {}
        if not phase_one.fits_nowhere(rnd.state, pending + list(stand_ins.values()), self.costs, rnd.first_fit,
                                      known):
            return why, False
        for key, js in stand_ins.items():
            assert js.failure is not None  # (`fits_nowhere` failed every job it was given)
            why[key] = js.failure
        return why, True

    def _oldest(self, rnd: FlowRound) -> RoundJob:
        """The oldest job the round admitted (the last resort's): a job state, made for it when it has none
        (it then stays out of the round's jobs: it is placed, or stays as it was)."""
        oldest = min(rnd.jobs, key=lambda js: js.order) if rnd.jobs else None
        first = min(min(rnd.cold_failed, default=len(rnd.ordered)), min(rnd.cold, default=len(rnd.ordered)))
        if oldest is not None and oldest.order < first:
            return oldest
        return self._job_state(rnd.ordered[first], first, rnd.cache)

    @staticmethod
    def _must_place(snapshot: Cluster, queue_len: int, pending: list[RoundJob]) -> list[RoundJob]:
        """The liveness rule on an idle cluster: where nothing else runs or waits, no placement gets
        better by waiting, so a job the flow left waiting (waiting cost less, or what read as contention
        with nobody else there) is tried again with an unscheduled arc that outbids any placement
        (`RoundJob.must_place`). Returns it. (With other jobs waiting, W bounds the wait: they may be
        placed meanwhile, and waiting for them to end may be worth it.)"""
        if snapshot.allocations or queue_len != 1:
            return []
        forced = []
        for js in pending:
            if not js.must_place and js.failure is not None and js.failure[0] in (Reason.POSTPONED,
                                                                                   Reason.CONTENTION):
                js.must_place = True
                forced.append(js)
        return forced

    def _last_resort(self, state: FreeState, js: RoundJob) -> list[RoundJob]:
        """The liveness rule's last resort: where nothing runs and the round placed nothing, waiting cannot
        help the oldest job the phases could not place, so it is looked for exhaustively
        (`placement.search`, bounded); found, it is placed as found."""
        found = search(state, js.job, js.gbps, self.costs.local_only)
        if found is None:
            return []
        js.failure = None
        js.machines = [m for m, _ in found]
        js.grants = [grants for _, grants in found]
        js.remote = sum(g.remote for _, grants in found for g in grants)
        for grants in js.grants:
            n_remote = sum(g.remote for g in grants)
            if n_remote:
                expected = phi(js.job, js.profile, n_remote / len(grants), self.costs.remote_load(state, grants))
                js.slo_risk |= self.costs.at_risk(js, expected)
        return [js]

    def _second_try(self, state: FreeState, first: list[RoundJob]) -> list[RoundJob]:
        """Jobs that phase 1 placed but a device phase could not serve (devices, bandwidth, SLO): phase 1
        cannot see every link a device phase will need, nor what remote devices a round's tasks leave
        each other. Each gets one more try in the next iteration, in a shape of its own: with local
        devices only (`RoundJob.local_first`: a machine takes only the tasks its own free devices
        serve) when the machines' own free devices can hold its whole gang, else with one task fewer on
        the machine that failed it (`RoundJob.avoid`)."""
        out = []
        # How many tasks of a request the machines' own free devices serve, per request (its shape object;
        # nothing is taken here, so it holds for every job asking it).
        served: dict[int, int] = {}
        for js in [js for js in first if js.failure is not None]:  # (most of a round's jobs did not fail)
            if js.second_try or js.failure is None or js.failure[0] not in _REMOTE_SHORT:
                continue
            js.second_try = True
            if js.failure[0] == Reason.SLO_AT_RISK:
                js.held_failure = js.failure
            if not self.costs.local_only and id(js.shape) not in served:
                local = {k: state.local_free(k) for k in js.wants}
                served[id(js.shape)] = int(local_capacity(state, js, local).sum())
            if not self.costs.local_only and served[id(js.shape)] >= js.count:
                js.local_first = True
            else:
                js.avoid = js.failed_on
            js.shape = tuple(list(js.shape))  # a new object: a shape of its own (shapes compare by identity)
            out.append(js)
        return out

    def _guard(self, state: FreeState, jobs: list[RoundJob]) -> None:
        """What the cost model holds each job back for this round (only a model that guards SLOs
        looks: the others hold none back, and their classes stay as they were)."""
        if not self.costs.guards_slo:
            return  # (a job's guard starts as SloGuard.NONE)
        slo_guard = self.costs.slo_guard
        # Once per distinct request (a round's jobs share one shape object per request): the guard is a
        # function of the request and the free state (`CostModel.slo_guard`).
        said: dict[tuple[int, int], int] = {}
        for js in jobs:
            key = (id(js.shape), js.count)
            guard = said.get(key)
            if guard is None:
                guard = said[key] = slo_guard(state, js)
            js.guard = guard

    @staticmethod
    def _wanting(jobs: list[RoundJob], kind: str, cache: _RoundJobCache) -> list[RoundJob]:
        """The jobs that want devices of `kind`. The round's distinct requests say at once when all or
        none do (the usual case: one kind of device in the whole queue)."""
        wants = [kind in w for w, _ in cache.requests.values()]
        if all(wants):
            return jobs
        if not any(wants):
            return []
        return [js for js in jobs if kind in js.wants]

    @staticmethod
    def _job_state(job: Job, order: int, cache: _RoundJobCache) -> RoundJob:
        """The job state of one job (`_job_states` of it alone)."""
        return FlowPlacer._job_states([job], [order], cache)[0]

    @staticmethod
    def _job_states(jobs: Iterable[Job], orders: Iterable[int], cache: _RoundJobCache) -> list[RoundJob]:
        """The job states of `jobs`, at `orders` in the round's queue. One loop for them all, what it reads
        of the round's cache held in locals (a round's admission makes 10,000 at 12,500 machines: a call
        and a few attribute reads per job were a fifth of making them)."""
        images, requests, shapes, importance = cache.images, cache.requests, cache.shapes, cache.importance
        wait_rounds = cache.wait_rounds
        last_request, parts = cache.last_request, cache.last_parts
        out: list[RoundJob] = []
        for job, order in zip(jobs, orders, strict=True):
            # Per image, once a round: its profile, its local time if the profile is known (it then does
            # not depend on the job's SLO; an unknown image's is its τ), the τ of a job without an SLO,
            # and the bandwidth a remote device of a job that does not say draws.
            image = images.get(job.image)
            if image is None:
                image = images[job.image] = _image_parts(job)
            profile, phi_known, default_tau, default_gbps = image
            slo = job.slo_s
            # (`clamp_goal` inline, `min(max(slo, TAU_MIN_S), TAU_MAX_S)` as comparisons (the same value, and
            # the same object: two builtin calls per job were a tenth of this loop): a simulated queue's SLOs
            # are mostly each its own, so a memo of them missed.)
            tau = (default_tau if slo is None else TAU_MAX_S if slo != slo else TAU_MIN_S if slo < TAU_MIN_S
                   else TAU_MAX_S if slo > TAU_MAX_S else slo)
            if phi_known is not None and tau < phi_known:  # (below its own best time: read as it, `goal_s`)
                tau = clamp_goal(phi_known)
            gbps = job.network_gbps
            t = job.tasks
            # Requests repeat across a queue: their device and model parts are worked out once per round.
            # `wants` is shared between jobs with the same request, so it is read-only.
            # One `shape` object per distinct request in a round: classes compare shapes by identity.
            cpus, memory_gb = t.cpus, t.memory_gb
            # The previous job's request object again (the simulator's jobs share a few) needs no key.
            if t is not last_request:
                models = t.models
                request_key = (cpus, memory_gb, tuple(t.devices.items()), tuple(models.items()) if models else ())
                found = requests.get(request_key)
                if found is None:
                    found = requests[request_key] = _request_parts(t, shapes)
                parts, last_request = found, t
            wants, shape = parts
            z = importance.get(job.importance)
            if z is None:  # a queue has a few distinct importances: clamped once each
                z = importance[job.importance] = clamp_importance(job.importance)
            out.append(RoundJob(job, order, profile, tau, z, default_gbps if gbps is None else gbps,
                                phi_known if phi_known is not None else phi(job, profile, 0.0, 0.0),
                                shape, wants, t.count, cpus, memory_gb,
                                job.wait_rounds if wait_rounds is None else wait_rounds(job)))
        cache.last_request, cache.last_parts = last_request, parts
        return out

    def _phase_one(self, rnd: FlowRound, jobs: list[RoundJob], known: dict[int, IntArray]) -> list[RoundJob]:
        state, timings, clock = rnd.state, rnd.timings, rnd.clock
        phase = self._timed(timings, clock, "build_s", lambda: phase_one.build(
            state, jobs, self.costs, self.options.min_candidates, rnd.queue_len, rnd.table, rnd.first_fit, known))
        flows = self._timed(timings, clock, "solve_s", lambda: solve(phase.net))
        self._keep("phase1", phase.net, flows)
        return self._timed(timings, clock, "decode_s", lambda: phase_one.decode(state, jobs, phase, flows,
                                                                                 self.costs))

    def _phase_device(self, rnd: FlowRound, jobs: list[RoundJob], kind: str) -> None:
        state, timings, clock = rnd.state, rnd.timings, rnd.clock
        phase = self._timed(timings, clock, "build_s", lambda: phase_device.build(state, jobs, kind, self.costs,
                                                                                  rnd.queue_len, rnd.table))
        flows = self._timed(timings, clock, "solve_s", lambda: solve(phase.net))
        self._keep(kind, phase.net, flows)
        self._timed(timings, clock, "decode_s", lambda: phase_device.decode(state, phase, flows, self.costs))

    @staticmethod
    def _timed(timings: Timings, clock: Clock, field: str, step: Callable[[], T]) -> T:
        """Run one step and add its time to `timings.<field>`."""
        start = clock()
        out = step()
        setattr(timings, field, getattr(timings, field) + clock() - start)
        return out

    # -- decisions ---------------------------------------------------------------------------------

    def _risk(self, js: RoundJob, tasks: tuple[TaskPlacement, ...]) -> str | None:
        """Why the job is placed knowing it likely misses its SLO, or None (see `CostModel.at_risk`)."""
        if not js.slo_risk:
            return None
        worst = max(t.expected_s or 0.0 for t in tasks)
        if js.slo_held:
            why = (f"held back {js.wait_rounds} rounds; waiting now costs more than a miss of "
                   f"{100 * (worst - js.tau) / js.tau:.0f}% of it (docs/design-decisions.md, \"No job waits forever\")")
        else:
            why = "no placement meets it even with no other traffic on its links, so waiting cannot help"
        return f"expected {worst:g} s, over its SLO ({js.goal()}): {why}"

    def _remote_task(self, state: FreeState, js: RoundJob, ti: int, machine: str,
                     grants: tuple[DeviceGrant, ...]) -> TaskPlacement:
        """A task of a job with remote devices: its expected time counts its own remote share, at the
        link load its cost model prices (NA: the busiest link its devices use)."""
        job = js.job
        n_remote = sum(1 for g in grants if g.remote)
        expected = js.phi_local
        if n_remote:
            expected = phi(job, js.profile, n_remote / len(grants), self.costs.remote_load(state, grants))
        return TaskPlacement(f"{job.name}/{ti}", machine, js.cpus, js.memory_gb, grants,
                             round(expected, 3))

    def _decisions(self, rnd: FlowRound) -> tuple[tuple[JobPlacement, ...], Sequence[Unplaced]]:
        """The last stage: the placed jobs as placements (queue order) and every other job with why."""
        state, ordered, placed = rnd.state, rnd.ordered, rnd.placed
        names = state.cluster.locations  # machines first, in order
        # Jobs of one image share their local time (known profiles): round it once (round is slow).
        rounded: dict[float, float] = {}
        out_placed: list[JobPlacement] = []
        for js in sorted(placed, key=attrgetter("order")):
            name, cpus, memory_gb, machines, grants = js.job.name, js.cpus, js.memory_gb, js.machines, js.grants
            if js.remote:
                tasks = tuple([self._remote_task(state, js, ti, names[m], granted)
                               for ti, (m, granted) in enumerate(zip(machines, grants, strict=True))])
                out_placed.append(JobPlacement(name, tasks, self._risk(js, tasks)))
                continue
            else:
                local = rounded.get(js.phi_local)
                if local is None:
                    local = rounded[js.phi_local] = round(js.phi_local, 3)
                if len(machines) == 1:  # most jobs: no per-job comprehension
                    tasks = (TaskPlacement(f"{name}/0", names[machines[0]], cpus, memory_gb, grants[0], local),)
                else:
                    tasks = tuple([TaskPlacement(f"{name}/{ti}", names[m], cpus, memory_gb, granted, local)
                                   for ti, (m, granted) in enumerate(zip(machines, grants, strict=True))])
            out_placed.append(JobPlacement(name, tasks))
        # Every job placed (each once: a placed job is out of the round's later tries): none to explain, no
        # pass over the queue.
        if len(placed) == len(ordered):
            return tuple(out_placed), ()
        placed_at = {js.order for js in placed}
        if rnd.reasons_later:
            return tuple(out_placed), LaterReasons(partial(self._unplaced, rnd, placed_at))
        return tuple(out_placed), self._unplaced(rnd, placed_at)

    def _unplaced(self, rnd: FlowRound, placed_at: set[int]) -> tuple[Unplaced, ...]:
        """Every job not placed (`placed_at`: their places in the queue), in queue order, with why: refused,
        failed (with a job state, or without: `FlowRound.cold_failed`), or still contended after the
        round's tries (re-admitted by its last iteration: `FlowRound.cold`)."""
        self._later(rnd)
        ordered = rnd.ordered
        contended: dict[int, tuple[Reason, str]] = {}  # by request (`id` of its `TaskRequest`)
        failed: dict[int, tuple[Reason, str]] = {
            js.order: js.held_failure or js.failure or self._contended(js.job, contended)
            for js in rnd.jobs if js.order not in placed_at}
        failed.update(rnd.cold_failed)
        failed.update((i, self._contended(ordered[i], contended)) for i in rnd.cold)
        # (One pass over a queue of thousands on a full cluster, most of it refused: kept lean. A job
        # refused is said so, whatever else the round holds of it.)
        names = list(map(attrgetter("name"), ordered))
        said: list[Refusal | None] = list(map(rnd.refused.get, names))
        if rnd.tail_codes:  # the last walk's tail, refused as their requests were (not in `refused`)
            for i, refusal in zip(rnd.late[rnd.tail_from:], map(rnd.tail_said.__getitem__, rnd.tail_codes),
                                  strict=True):
                said[i] = refusal
        refusals: dict[tuple[Reason, str], Refusal] = {}  # one per distinct failure (jobs share a few)
        for i, failure in failed.items():
            if said[i] is None:
                found = refusals.get(failure)
                if found is None:
                    found = refusals[failure] = Refusal(*failure)
                said[i] = found
        for i in placed_at:
            said[i] = None
        return tuple([Unplaced(name, r.reason, r.message) for name, r in zip(names, said, strict=True)
                      if r is not None])

    def _contended(self, job: Job, said: dict[int, tuple[Reason, str]]) -> tuple[Reason, str]:
        """Why a job admitted this round and never failed waits: it was still contended when the round's
        tries ran out. `said`: the round's, by request (most jobs of a round ask for the same few things)."""
        found = said.get(id(job.tasks))
        if found is None:
            found = said[id(job.tasks)] = (Reason.CONTENTION, (
                f"needs {request(job)}; still contended after {self.options.max_iterations} tries this round"))
        return found

"""The scheduling loop: plan on a snapshot, commit the plan, drive the slices.

One thread runs rounds; each round, in order:
  1. monitor   — mirror the fabric's device and link health (`control.health`); slices a failure
                 hits are sent to teardown and their jobs re-queued; nothing else is touched;
  2. poll      — end the grace periods of preempted slices that are over (`control.preemption`); ask
                 the engine about the other running slices; an ended job sends its slice to teardown;
  3. place     — plan: call the policy (`disagg.placement.registry`, default `drmaestro-na`) on a
                 snapshot and the `window` oldest queued jobs, then backfill: one job per distinct
                 request among the rest of the queue, on the snapshot with the head's reservation held
                 (`placement.backfill`: a backfilled job never takes what the oldest waiting job is
                 waiting for); commit: the store applies the plan in one
                 transaction that re-checks that no machine, device or link is over-committed
                 (Nomad's plan / commit). A placement that no longer fits stays queued; the loop then
                 takes a fresh snapshot and plans those jobs again (Nomad's refresh path), at most
                 `replans` times a round, and counts it in the round's numbers;
                 With tenants (`control.tenants`), the snapshot carries the tenancy, the round reads
                 each tenant's oldest queued jobs, and the policy runs with quotas, fair share and
                 preemption around it; the jobs it preempts get SIGTERM now and are stopped later;
  4. dispatch  — hand slices that are composing or tearing down to worker threads (one per slice).
A submission wakes the loop at once; otherwise it runs every `tick_s`.

A commit conflict is a race (something changed between the snapshot and the commit) once; the same job
conflicting again in the next round is a bug — the snapshot offers what the commit knows is not there —
and the loop names it: a warning, an event on the job, `disagg_repeated_conflicts_total`, and `/healthz`
`degraded` with the cause while it lasts (`_note_conflicts`).

No single job stops the cluster: if the policy fails on a round's queue (an input that slipped past
the API's bounds, a bug), the loop bisects the queue on the same snapshot, fails the jobs whose
planning fails on their own (reason `unplaceable`, with the error) and places the others in the
same round. A failed round is counted (`disagg_rounds_failed_total`) and `/healthz` says `degraded`,
with the cause, for `DEGRADED_S` after it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from disagg.control.config import Config
from disagg.control.health import HealthMonitor
from disagg.control.history import HistorySampler
from disagg.control.leadership import Leadership
from disagg.control.metrics import ControllerMetrics
from disagg.control.preemption import Preempter
from disagg.control.profiles import LEARN_EVERY_S, ProfileKeeper
from disagg.control.slice import SliceRunner, fair_pick
from disagg.control.tenants import TenancyKeeper, TenantDirectory
from disagg.engines.base import Engine, with_foreign_holdings
from disagg.fabric.base import FabricDriver, with_fabric_holdings
from disagg.model import Cluster, Job
from disagg.model.states import JobState, RunState, SliceOutcome, SliceState
from disagg.placement.backfill import place_round
from disagg.placement.base import collector_paused
from disagg.placement.decisions import Decisions, Preemption
from disagg.placement.fairness import with_fairness
from disagg.placement.registry import get_policy
from disagg.placement.unreachable import name_cut_off
from disagg.profiles import with_profiles
from disagg.store import CommitResult, Store
from disagg.store.ports import LoopPort

log = logging.getLogger(__name__)

#: How long /healthz says `degraded` after a round failed, seconds.
DEGRADED_S = 60.0
#: At most this many reads of a round's snapshot while preempted victims keep stopping during the read
#: (`Controller.snapshot`); the last read stands.
SNAPSHOT_READS = 3



class FailureLog:
    """The log's lines for failed rounds: the first of a kind with its traceback, then one line every
    REPEAT_EVERY_S counting the same failure, and one when rounds succeed again. A cause that lasts (the
    state directory's disk full) failed every round, four tracebacks a second, and buried the rest."""

    REPEAT_EVERY_S = 30.0
    #: Rounds that succeed for this long end a failure (a cause that fails only the rounds that write a
    #: file, once a second, lets the ones between succeed).
    OVER_AFTER_S = 10.0

    def __init__(self) -> None:
        self.kind = ""  # the failure being repeated ("" while rounds succeed)
        self.count = 0  # failed rounds since the last line
        self.said_at = 0.0
        self.last_at = 0.0  # the last failed round

    def failed(self, exc: BaseException) -> None:
        kind = f"{type(exc).__name__}: {exc}"
        now = self.last_at = time.monotonic()
        if kind != self.kind:
            self.kind, self.count, self.said_at = kind, 0, now
            log.exception("controller round failed")
        elif now - self.said_at >= self.REPEAT_EVERY_S:
            self.count += 1
            log.error("controller rounds keep failing: %d more in %.0f s, each with %s", self.count,
                      now - self.said_at, kind[:300])
            self.count, self.said_at = 0, now
        else:
            self.count += 1

    def ok(self) -> None:
        if self.kind and time.monotonic() - self.last_at >= self.OVER_AFTER_S:
            log.info("controller rounds succeed again (they failed with %s)", self.kind[:300])
            self.kind, self.count = "", 0

class Controller:
    """The scheduling loop: store + fabric + engine + policy, driven by one thread."""

    def __init__(self, store: Store, fabric: FabricDriver, engine: Engine, config: Config | None = None,
                 metrics: ControllerMetrics | None = None) -> None:
        self.store: LoopPort = store  # its own port; the parts below get theirs from `store`
        self.fabric = fabric
        self.engine = engine
        self.config = config or Config()
        # a round without tenants goes straight through the wrapper: the plain policy
        self.policy = with_fairness(get_policy(self.config.policy))
        self.metrics = metrics or ControllerMetrics(store, fabric)
        self.health = HealthMonitor(store, fabric)
        self.history = HistorySampler(store, self.config.history_every_s, self.config.history_retention_s)
        self.slices = SliceRunner(store, fabric, engine, self.metrics.observe_step, self.config.parallel_steps)
        self.tenancy = TenancyKeeper(store, TenantDirectory(store, self.config), self.config)
        self.preempter = Preempter(store, engine, self.slices, self.config.preempt_grace_s)
        self.profiles = ProfileKeeper(store, self.config)
        self._next_learn = 0.0
        self._in_grace: set[str] = set()
        self.rng = np.random.default_rng(self.config.seed)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=self.config.workers, thread_name_prefix="slice")
        self._inflight: dict[str, str] = {}  # slice → tenant, in a worker's hands
        self._dispatching = False  # a thread is reading the slices to work (`dispatch`)
        self._dispatch_again = False  # and is asked to read once more when done
        self._skips: set[str] = set()  # slices workers just left, which wait for the next tick
        self._lock = threading.Lock()
        self.last_round: dict[str, Any] = {}
        self._last_schedule = 0.0
        self._pending_round = False
        self.publish: Callable[[], None] | None = None  # the loop process publishes its numbers
        self.mark: Callable[[], None] | None = None  # writes the store's mark into the state directory
        self.collect: Callable[[], None] | None = None  # retention: removes what ended long ago
        self._next_collect = time.monotonic() + 10.0
        self.trouble: dict[str, Any] | None = None  # the last failed round: its cause and when
        self.failures = FailureLog()  # what the log says of failed rounds
        self._conflicts: dict[str, str] = {}  # the last round's commit conflicts: job → why
        self._repeating: set[str] = set()  # jobs whose conflict repeats, round after round
        self.leadership: Leadership | None = None  # replicas: the lease this loop runs under
        self._first_round = False

    def lead(self, leadership: Leadership) -> None:
        """Run under `leadership`: the slice workers act only while the lease is valid, and losing it
        (a refused renewal, a fenced write) stops this loop at once (`control.leadership`)."""
        self.leadership = leadership
        self.slices.may_act = leadership.may_act
        leadership.on_lost = lambda why: self.step_down()

    def step_down(self) -> None:
        """Stop the loop and let no new slice work start; the workers' next write is fenced anyway."""
        self._stop.set()
        self._wake.set()
        threading.Thread(target=self._pool.shutdown, kwargs={"wait": False, "cancel_futures": True},
                         name="step-down", daemon=True).start()

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="controller-loop", daemon=True)
        self._thread.start()

    def stop(self, wait_workers: bool = True) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._pool.shutdown(wait=wait_workers)

    def wake(self) -> None:
        """Place soon: something was stored that the loop should act on."""
        self._wake.set()

    def _run(self) -> None:
        self.store.write_first()
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
                self.history.maybe_sample(time.time())
                self.housekeeping()
                self._first_round_done()
            except Exception as exc:  # the loop must survive a bad round; the next one retries
                self.failures.failed(exc)
                self.round_failed(f"a round failed: {type(exc).__name__}: {exc}")
            else:
                self.failures.ok()
            self._wake.wait(self.config.tick_s)
            # rounds are at least tick_s apart, however many submissions wake the loop meanwhile
            self._stop.wait(max(0.0, started + self.config.tick_s - time.monotonic()))

    def _first_round_done(self) -> None:
        """Once, after the first round this leader committed: note it in the lease (a takeover's end)."""
        if not self._first_round and self.leadership is not None and self.leadership.epoch is not None:
            self.store.first_round(self.leadership.epoch)
            self._first_round = True

    def tick(self) -> None:
        """One round: monitor, poll, place (when something changed, or every second), dispatch."""
        woken = self._wake.is_set() or self._pending_round
        self._wake.clear()
        self._pending_round = False
        self.monitor()
        self._in_grace = self.preempter.step()
        self.poll()
        since = time.monotonic() - self._last_schedule
        if (woken and since >= self.config.round_gap_s) or since >= 1.0:
            self._last_schedule = time.monotonic()
            self.schedule()
        elif woken:
            self._pending_round = True  # too soon after the last round: place in a later tick
        self.dispatch()

    def housekeeping(self) -> None:
        """After a round: publish the loop's numbers, write the store's mark, collect what is past retention."""
        if self.publish is not None:
            self.publish()
        if self.mark is not None:
            self.mark()
        if time.monotonic() >= self._next_learn:
            self._next_learn = time.monotonic() + LEARN_EVERY_S
            self.profiles.learn(time.time())
        if self.collect is not None and time.monotonic() >= self._next_collect:
            from disagg.control.gc import GC_EVERY_S

            self._next_collect = time.monotonic() + GC_EVERY_S
            self.collect()

    def round_failed(self, cause: str) -> None:
        """Count a failed round and keep its cause for /healthz (`degraded` for DEGRADED_S)."""
        self.metrics.rounds_failed.inc()
        self.trouble = {"cause": cause[:500], "at": time.time()}

    def round_info(self) -> dict[str, Any]:
        """The last round's numbers, and `trouble` (cause, when) while a failed round is recent."""
        info = dict(self.last_round)
        if self.trouble is not None and time.time() - float(self.trouble["at"]) < DEGRADED_S:
            info["trouble"] = dict(self.trouble)
        return info

    def idle(self) -> bool:
        with self._lock:
            return not self._inflight

    # --- 1. monitor ------------------------------------------------------------------------
    def monitor(self) -> None:
        """Mirror the fabric's device and link health into the store; re-queue affected slices."""
        if self.health.look():
            self._wake.set()  # capacity changed: place again

    # --- 2. poll ---------------------------------------------------------------------------
    def poll(self) -> None:
        """Ask the engine about every running slice: the ended ones go to teardown together (one write)."""
        ended: list[tuple[str, JobState, int | None]] = []
        for slice_id, handle in self.store.running_slices():
            with self._lock:
                if slice_id in self._inflight or slice_id in self._in_grace:
                    continue
            st = self.engine.status(handle or slice_id)
            if st.state in (RunState.COMPLETED, RunState.FAILED):
                ended.append((slice_id, JobState(st.state), st.exit_code))
            elif st.state in (RunState.LOST, RunState.CANCELLED):
                self.slices.abort(slice_id, SliceOutcome.REQUEUE, f"job lost on the engine: {st.detail or st.state}")
        if ended:
            self.store.finish_slices(ended)

    # --- 3. place: plan, then commit ------------------------------------------------------------
    def schedule(self) -> Decisions | None:
        """Plan on a snapshot and commit; re-plan what conflicted on a fresh snapshot (at most `replans`).

        With the cyclic collector paused (`placement.base.collector_paused`) for the whole round, not only
        the policy's part: the loop's heap holds the inventory and every live slice's placement (some
        470,000 objects at 12,500 machines under load), and what a round reads, plans and commits set off
        a full collection of it in nearly every round (0.2–0.27 s of a 1.0–1.4 s round at 12,000 live
        slices), for no garbage. After the round the young objects go to the oldest generation at once,
        and a full collection runs every hundredth round instead."""
        with collector_paused():
            return self._schedule()

    def _schedule(self) -> Decisions | None:
        queue = self._queue()
        if queue and self.tenancy.on:
            queue = self._refuse_beyond_limits(queue)
        if not queue:
            return None
        t0 = time.perf_counter()
        extra = self._backfill_candidates(queue)
        decisions, queue, extra = self._plan_round(queue, extra)
        considered = [j.name for j in queue] + [j.name for j in extra]
        result = self.store.commit_placements(decisions, considered)
        committed = list(result.placed)
        placed, replans = len(result.placed), 0
        preempted: list[Preemption] = list(decisions.preempted)
        conflicts = dict(result.conflicts)
        while result.conflicts and replans < self.config.replans:
            replans += 1
            retry, retry_extra = self._conflicted(result, queue, extra)
            again = self.plan(retry, retry_extra)
            preempted += again.preempted
            result = self.store.commit_placements(again, [j.name for j in retry + retry_extra], count_wait=False)
            placed += len(result.placed)
            conflicts.update(result.conflicts)
            committed += result.placed
        self._note_conflicts(conflicts)
        self.profiles.note_placed([job for job, _ in committed], [*queue, *extra])
        if preempted:
            self.preempter.start(preempted)
        elapsed = time.perf_counter() - t0
        self.metrics.round_seconds.observe(elapsed)
        self.history.round_done(elapsed)
        self.metrics.replans.inc(replans)
        self.last_round = {"at": time.time(), JobState.QUEUED: len(queue) + len(extra), "placed": placed,
                           "unplaced": len(decisions.unplaced), "replans": replans, "round_s": elapsed,
                           "backfilled": decisions.stats.get("backfilled", 0)}
        return decisions

    def _note_conflicts(self, conflicts: dict[str, str]) -> None:
        """Name a commit conflict that repeats for the same job in consecutive rounds: the policy's snapshot
        offered what the commit knows is not there (a down link, a failed device), which is a bug, not a
        race. A warning and an event on the job when the repeat begins; each round it lasts, the metric
        `disagg_repeated_conflicts_total` and `/healthz` degraded with the cause. The round has re-planned
        those jobs on a fresh snapshot already (the refresh path)."""
        repeated = {job: why for job, why in conflicts.items() if job in self._conflicts}
        self._conflicts = conflicts
        if not repeated:
            self._repeating = set()
            return
        self.metrics.repeated_conflicts.inc(len(repeated))
        shown = "; ".join(f"{job}: {why}" for job, why in list(repeated.items())[:3])
        more = f" and {len(repeated) - 3} more" if len(repeated) > 3 else ""
        cause = (f"placement conflict repeated for {len(repeated)} job(s) in consecutive rounds ({shown}{more}): "
                 "the policy's snapshot offers what the commit refuses")
        self.trouble = {"cause": cause[:500], "at": time.time()}
        new = {job: why for job, why in repeated.items() if job not in self._repeating}
        self._repeating = set(repeated)
        if new:
            log.warning("%s", cause)
            self.store.note_jobs({job: f"placement conflict again, a round after the last: {why} (the policy's "
                                       "snapshot offers what the commit refuses: a bug; re-planned on a fresh "
                                       "snapshot)" for job, why in new.items()})

    def _refuse_beyond_limits(self, queue: list[Job]) -> list[Job]:
        """Fail the queued jobs their tenant's limits would never let run (reason `over-limit`: a limit
        lowered since they were submitted); the rest of `queue`."""
        why = self.tenancy.beyond_limits(queue)
        if not why:
            return queue
        for job_id in self.store.fail_beyond_limit(why):
            log.info("job %s failed: %s", job_id, why[job_id])
        return [j for j in queue if j.name not in why]

    def plan(self, queue: list[Job], extra: list[Job] | None = None) -> Decisions:
        """The policy's decisions on a fresh snapshot (pure: nothing is written): the window `queue`, then
        the backfill candidates `extra` around the head's reservation (`placement.backfill`)."""
        return self._place(self.snapshot([*queue, *(extra or [])]), queue, extra or [])

    def snapshot(self, queue: list[Job]) -> Cluster:
        """The cluster as the policy sees it now for `queue`, with its tenancy read after it. A victim whose
        teardown ends between those reads (on a slice worker) is seen holding its devices by the first and
        neither as being preempted nor as a stopped claim's victim by the others: its claimant looks short
        with nothing awaited, and a second victim is preempted for it (three victims for two claims, seen
        under load). So the reads are done again, while the victims stopped are not the same after them."""
        queued = {j.name for j in queue}
        for _ in range(SNAPSHOT_READS):
            settled = self.preempter.settled()
            # what jobs outside disagg hold on the engine (a user's own sbatch) is not offered: no double
            # booking; nor what others hold on a shared fabric (blocks another client composed on Redfish)
            snapshot = with_foreign_holdings(self.store.cluster(), self.engine.foreign_holdings())
            snapshot = with_fabric_holdings(snapshot, self.fabric.holdings())
            # with tenants: who holds what, the decayed usage, and the claims whose victims have stopped
            tenancy = self.tenancy.round(snapshot, self.preempter.claims(queued))
            if self.preempter.settled() == settled:
                break
        return snapshot.with_tenancy(tenancy)

    def _place(self, snapshot: Cluster, queue: list[Job], extra: list[Job] | None = None) -> Decisions:
        starving = self.config.starvation_rounds or None
        table = self.profiles.round_table()  # what the round knows of each image (control.profiles)
        decisions = place_round(self.policy, snapshot, with_profiles(queue, table), with_profiles(extra or [], table),
                                time.time(), self.rng, time.perf_counter, starving).decisions
        return name_cut_off(decisions, snapshot, [*queue, *(extra or [])])  # a down link is named in the reasons

    def _plan_round(self, queue: list[Job], extra: list[Job]) -> tuple[Decisions, list[Job], list[Job]]:
        """Plan the round; if the policy fails on it, set aside the jobs it fails on alone (bisecting the
        queue on the same snapshot, backfill candidates dropped for this round) and plan the rest.
        (decisions, the window jobs planned, the backfill candidates planned)"""
        snapshot = self.snapshot([*queue, *extra])
        try:
            return self._place(snapshot, queue, extra), queue, extra
        except Exception as exc:  # the policy failed on this queue: find the jobs it fails on
            cause = f"{type(exc).__name__}: {exc}"
            log.warning("placement round failed (%s); bisecting its %d jobs", cause, len(queue) + len(extra))
        ok, bad = self._split(snapshot, [*queue, *extra])
        if bad:
            why = f"set aside: planning it made the scheduling round fail ({cause[:300]})"
            self.store.set_aside([j.name for j in bad], why)
            self.metrics.set_aside.inc(len(bad))
        self.round_failed(f"a placement round failed on {len(bad)} job(s) ({', '.join(j.name for j in bad[:5])}), "
                          f"set aside: {cause}")
        return (self._place(snapshot, ok) if ok else Decisions(self.config.policy)), ok, []

    def _split(self, snapshot: Cluster, jobs: list[Job]) -> tuple[list[Job], list[Job]]:
        """(jobs the policy plans together, jobs it fails on alone): bisection. Jobs that fail only in
        company are left out of both (they wait for a later round)."""
        try:
            self._place(snapshot, jobs)
            return jobs, []
        except Exception:
            if len(jobs) == 1:
                return [], jobs
        mid = len(jobs) // 2
        left_ok, left_bad = self._split(snapshot, jobs[:mid])
        right_ok, right_bad = self._split(snapshot, jobs[mid:])
        together = left_ok + right_ok
        try:
            self._place(snapshot, together)
        except Exception:
            together = left_ok
        return together, left_bad + right_bad

    def _queue(self) -> list[Job]:
        """The jobs a round looks at: the `window` oldest; with tenants, the `window` oldest of each
        tenant (so that one tenant's burst does not hide the others' jobs from fair share)."""
        if self.tenancy.on:
            return self.store.queued_by_tenant(self.config.window)
        return self.store.queued_jobs(self.config.window)

    def _backfill_candidates(self, queue: list[Job]) -> list[Job]:
        """Beyond a full window: the oldest job of each distinct request (backfill's candidates), none of
        them already in the round's queue. None with tenants: the round then reads each tenant's own window
        instead, and quotas are booked over one pass of the policy (a second pass on a snapshot holding the
        first's placements would not see whose they are)."""
        window = self.config.window
        if len(queue) < window or self.tenancy.on:
            return []
        names = {j.name for j in queue}
        return [j for j in self.store.queued_representatives(window, self.config.backfill) if j.name not in names]

    def _conflicted(self, result: CommitResult, queue: list[Job], extra: list[Job]) -> tuple[list[Job], list[Job]]:
        """The jobs whose placement conflicted, re-read from the queue (a cancel may have taken them), as
        (window jobs, backfill candidates). With backfill candidates among them, the oldest window job
        still waiting leads the window, so that its reservation is made again on the fresh snapshot."""
        wanted = {job for job, _ in result.conflicts}
        still = {j.name: j for j in self._queue()}
        window = [still[j.name] for j in queue if j.name in wanted and j.name in still]
        backfill = [j for j in extra if j.name in wanted]  # a cancel since: the commit skips them
        head = next((still[j.name] for j in queue if j.name in still), None)
        if backfill and head is not None and all(j.name != head.name for j in window):
            window.insert(0, head)
        return window, backfill

    # --- 4. dispatch -----------------------------------------------------------------------
    def dispatch(self, skip: str | None = None, worker: bool = False) -> None:
        """Hand the idle workers the slices to move on, in a fair order between tenants (`slice.fair_pick`),
        never more than they start at once: what waits stays in the store, ordered again at the next tick
        or when a worker is done (`skip`: the slice it was on, which waits for the next tick).

        One read at a time: a call while another thread reads asks it to read once more when done and
        returns. Each read ranks every waiting slice (12,000 under a burst of submissions); with each of
        sixteen workers reading as it finished, they were half a core of the two in `bench controller`.
        `worker`: the caller is a worker that finished, which reads again while asked to; the loop's own
        call reads once (its next tick reads again) and goes back to placing."""
        if self._stop.is_set():
            return  # stepped down (or stopping): no new slice work
        with self._lock:
            if skip is not None:
                self._skips.add(skip)
            if self._dispatching:
                self._dispatch_again = True
                return
            if len(self._inflight) >= self.config.workers:
                self._skips.clear()
                return  # every worker busy: nothing to read
            self._dispatching = True
        try:
            again = True
            while again and not self._stop.is_set():
                with self._lock:
                    skips, self._skips, self._dispatch_again = self._skips, set(), False
                self._dispatch_once(skips)
                with self._lock:
                    again = worker and self._dispatch_again
        finally:
            with self._lock:
                self._dispatching = False

    def _dispatch_once(self, skips: set[str]) -> None:
        """One read of the slices waiting for a worker, and as many handed out as workers are free."""
        # each tenant's oldest 2 x workers + 1: what a fair pick can use past those in flight and the skips
        # (at most one per worker)
        to_work = self.store.slices_to_work(per_tenant=2 * self.config.workers + 1)
        with self._lock:
            free = self.config.workers - len(self._inflight)
            if free <= 0:
                return
            busy = Counter(self._inflight.values())
            skips = skips | self._skips  # and those left by workers that finished during the read
            chosen = fair_pick([w for w in to_work if w[0] not in self._inflight and w[0] not in skips], busy, free)
            for slice_id, _, tenant in chosen:
                self._inflight[slice_id] = tenant
        for slice_id, state, _ in chosen:
            self._pool.submit(self._work, slice_id, state)

    def _work(self, slice_id: str, state: SliceState) -> None:
        try:
            if state == SliceState.COMPOSING:
                self.slices.compose(slice_id)
            else:
                self.slices.teardown(slice_id)
        except Exception:
            log.exception("slice %s: %s step failed; will retry", slice_id, state)
        finally:
            with self._lock:
                self._inflight.pop(slice_id, None)
            self._wake.set()
        if not self._stop.is_set():
            try:
                self.dispatch(skip=slice_id, worker=True)  # this worker is free: the next slice in the fair order now
            except Exception:
                log.exception("dispatch after slice %s failed; the next tick dispatches", slice_id)


__all__ = ["Controller"]

"""The scheduling loop: plan on a snapshot, commit the plan, drive the slices.

One thread runs rounds; each round, in order:
  1. monitor   — mirror the fabric's device and link health (`control.health`); slices a failure
                 hits are sent to teardown and their jobs re-queued; nothing else is touched;
  2. poll      — ask the engine about running slices; an ended job sends its slice to teardown;
  3. place     — plan: call the policy (`disagg.placement.registry`, default `drmaestro-na`) on a
                 snapshot and the `window` oldest queued jobs, then backfill: one job per distinct
                 request among the rest of the queue, on the snapshot with the head's reservation held
                 (`placement.backfill`: a backfilled job never takes what the oldest waiting job is
                 waiting for); commit: the store applies the plan in one
                 transaction that re-checks that no machine, device or link is over-committed
                 (Nomad's plan / commit). A placement that no longer fits stays queued; the loop then
                 takes a fresh snapshot and plans those jobs again (Nomad's refresh path), at most
                 `replans` times a round, and counts it in the round's numbers;
  4. dispatch  — hand slices that are composing or tearing down to worker threads (one per slice).
A submission wakes the loop at once; otherwise it runs every `tick_s`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from disagg.control.config import Config
from disagg.control.health import HealthMonitor
from disagg.control.metrics import ControllerMetrics
from disagg.control.slice import SliceRunner
from disagg.engines.base import Engine, with_foreign_holdings
from disagg.fabric.base import FabricDriver
from disagg.model import Job
from disagg.model.states import JobState, RunState, SliceOutcome, SliceState
from disagg.placement.backfill import place_round
from disagg.placement.decisions import Decisions
from disagg.placement.registry import get_policy
from disagg.store import CommitResult, Store

log = logging.getLogger(__name__)


class Controller:
    """The scheduling loop: store + fabric + engine + policy, driven by one thread."""

    def __init__(self, store: Store, fabric: FabricDriver, engine: Engine, config: Config | None = None,
                 metrics: ControllerMetrics | None = None) -> None:
        self.store = store
        self.fabric = fabric
        self.engine = engine
        self.config = config or Config()
        self.policy = get_policy(self.config.policy)
        self.metrics = metrics or ControllerMetrics(store, fabric)
        self.health = HealthMonitor(store, fabric)
        self.slices = SliceRunner(store, fabric, engine, self.metrics.observe_step, self.config.parallel_steps)
        self.rng = np.random.default_rng(self.config.seed)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=self.config.workers, thread_name_prefix="slice")
        self._inflight: set[str] = set()
        self._lock = threading.Lock()
        self.last_round: dict[str, Any] = {}
        self._last_schedule = 0.0
        self._pending_round = False
        self.publish: Callable[[], None] | None = None  # the loop process publishes its numbers

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
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
                if self.publish is not None:
                    self.publish()
            except Exception:  # the loop must survive a bad round; the next one retries
                log.exception("controller round failed")
            self._wake.wait(self.config.tick_s)
            # rounds are at least tick_s apart, however many submissions wake the loop meanwhile
            self._stop.wait(max(0.0, started + self.config.tick_s - time.monotonic()))

    def tick(self) -> None:
        """One round: monitor, poll, place (when something changed, or every second), dispatch."""
        woken = self._wake.is_set() or self._pending_round
        self._wake.clear()
        self._pending_round = False
        self.monitor()
        self.poll()
        since = time.monotonic() - self._last_schedule
        if (woken and since >= self.config.round_gap_s) or since >= 1.0:
            self._last_schedule = time.monotonic()
            self.schedule()
        elif woken:
            self._pending_round = True  # too soon after the last round: place in a later tick
        self.dispatch()

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
        for slice_id, handle in self.store.running_slices():
            with self._lock:
                if slice_id in self._inflight:
                    continue
            st = self.engine.status(handle or slice_id)
            if st.state in (RunState.COMPLETED, RunState.FAILED):
                self.store.finish_slice(slice_id, JobState(st.state), st.exit_code)
            elif st.state in (RunState.LOST, RunState.CANCELLED):
                self.slices.abort(slice_id, SliceOutcome.REQUEUE, f"job lost on the engine: {st.detail or st.state}")

    # --- 3. place: plan, then commit ------------------------------------------------------------
    def schedule(self) -> Decisions | None:
        """Plan on a snapshot and commit; re-plan what conflicted on a fresh snapshot (at most `replans`)."""
        window = self.config.window
        queue = self.store.queued_jobs(window)
        if not queue:
            return None
        t0 = time.perf_counter()
        # Beyond a full window: the oldest job of each distinct request (backfill candidates).
        extra = self.store.queued_representatives(window, self.config.backfill) if len(queue) == window else []
        considered = [j.name for j in queue] + [j.name for j in extra]
        decisions = self.plan(queue, extra)
        result = self.store.commit_placements(decisions, considered)
        placed, replans = len(result.placed), 0
        while result.conflicts and replans < self.config.replans:
            replans += 1
            retry, retry_extra = self._conflicted(result, queue, extra)
            result = self.store.commit_placements(self.plan(retry, retry_extra),
                                                  [j.name for j in retry + retry_extra], count_wait=False)
            placed += len(result.placed)
        elapsed = time.perf_counter() - t0
        self.metrics.round_seconds.observe(elapsed)
        self.metrics.replans.inc(replans)
        self.last_round = {"at": time.time(), JobState.QUEUED: len(queue) + len(extra), "placed": placed,
                           "unplaced": len(decisions.unplaced), "replans": replans, "round_s": elapsed,
                           "backfilled": decisions.stats.get("backfilled", 0)}
        return decisions

    def plan(self, queue: list[Job], extra: list[Job] | None = None) -> Decisions:
        """The policy's decisions on a fresh snapshot (pure: nothing is written): the window `queue`, then
        the backfill candidates `extra` around the head's reservation (`placement.backfill`)."""
        # what jobs outside disagg hold on the engine (a user's own sbatch) is not offered: no double booking
        snapshot = with_foreign_holdings(self.store.cluster(), self.engine.foreign_holdings())
        starving = self.config.starvation_rounds or None
        return place_round(self.policy, snapshot, queue, extra or [], time.time(), self.rng,
                           time.perf_counter, starving).decisions

    def _conflicted(self, result: CommitResult, queue: list[Job], extra: list[Job]) -> tuple[list[Job], list[Job]]:
        """The jobs whose placement conflicted, re-read from the queue (a cancel may have taken them), as
        (window jobs, backfill candidates). With backfill candidates among them, the oldest window job
        still waiting leads the window, so that its reservation is made again on the fresh snapshot."""
        wanted = {job for job, _ in result.conflicts}
        still = {j.name: j for j in self.store.queued_jobs(self.config.window)}
        window = [still[j.name] for j in queue if j.name in wanted and j.name in still]
        backfill = [j for j in extra if j.name in wanted]  # a cancel since: the commit skips them
        head = next((still[j.name] for j in queue if j.name in still), None)
        if backfill and head is not None and all(j.name != head.name for j in window):
            window.insert(0, head)
        return window, backfill

    # --- 4. dispatch -----------------------------------------------------------------------
    def dispatch(self) -> None:
        for slice_id, state in self.store.slices_to_work():
            with self._lock:
                if slice_id in self._inflight:
                    continue
                self._inflight.add(slice_id)
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
                self._inflight.discard(slice_id)
            self._wake.set()


__all__ = ["Controller"]

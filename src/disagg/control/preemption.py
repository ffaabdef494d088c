"""Preemption in the controller: SIGTERM, a grace period, then the kill — through the slice's own life.

A round's plan may name running jobs to preempt (`Decisions.preempted`, see `placement.preemption`).
For each, `Preempter.start` records the preemption against its running slice (the job's history
gets "preempted by j-…: SIGTERM, grace 30 s") and asks the engine to signal the job's tasks. Each
tick, `step` looks at the slices in their grace period: when the job has ended (it stopped on the
signal, with a non-zero exit code) or the grace period is over, the slice is sent to teardown with
the outcome `preempted` —
stop-task kills what is left, the devices are detached, the machines destroyed — and once it is
gone its job is queued again (its wait counter W kept; its next placement is attempt + 1; a
preemption is not a failure, so its retries are not spent). While a slice is in its grace period
the loop's poll leaves it to this module, so that a job that exits on SIGTERM is not taken for a
failed one. A job that ends with exit code 0 within its grace period has done its work: it completes.

A composition (a Redfish client's composed system, holder `composition:<slice>`) that borrows can be
preempted too: nothing runs in it to signal, so its owner has the grace period to decompose it, and at
its end the controller decomposes it (teardown, the outcome `cancelled` with the reason); its devices
and cpus then go to the claimant.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from disagg.control.slice import SliceRunner
from disagg.engines.base import Engine
from disagg.model.states import JobState, RunState, SliceOutcome, SliceState
from disagg.placement.decisions import Preemption
from disagg.store import Store
from disagg.store.tenants import COMPOSITION

log = logging.getLogger(__name__)

#: The `for_job` of a graceful cancel's record (`disagg cancel --grace`): a signal, a grace period, then the
#: kill, as a preemption has, but the job ends cancelled (not re-queued) and claims nothing for anyone.
CANCEL_MARK = "(cancel)"


class Preempter:
    """Starts preemptions and ends them when their grace period is over."""

    def __init__(self, store: Store, engine: Engine, slices: SliceRunner, grace_s: float) -> None:
        self.store = store
        self.engine = engine
        self.slices = slices
        self.grace_s = grace_s
        #: Queued jobs whose victims have stopped (`Tenancy.claims`): placed first, until they are.
        self.reclaimed: set[str] = set()
        #: Whether some preemption may still be open (seen by the last `step`, or started since).
        self._open = True  # a new leader may find preemptions its predecessor started

    def claims(self, queued: set[str]) -> frozenset[str]:
        """The claimants still queued (the others were placed, or cancelled). A victim's teardown ends on a
        slice worker, and may end between this tick's `step` and its round: its claimant is read from the
        store then, or the round would see the victim gone and no claim, give what it freed to the queue's
        order (a borrower's job, or the victim itself re-queued) and preempt a second victim for the same
        claimant (a CI run of the Slurm preemption test saw three victims for two claims)."""
        if self._open:
            self.reclaimed |= {rec.for_job for rec in self.store.preemptions()
                               if rec.slice_state in (None, SliceState.DONE) and rec.for_job != CANCEL_MARK}
        self.reclaimed &= queued
        return frozenset(self.reclaimed)

    def settled(self) -> frozenset[str]:
        """The slices being preempted whose teardown has ended. A round reads it before and after its
        snapshot (`Controller.snapshot`): a change is a victim that stopped between the reads, which then
        disagree about what it holds. Read from the store only while some preemption may be open."""
        if not self._open:
            return frozenset()
        return frozenset(rec.slice_id for rec in self.store.preemptions() if rec.slice_state in (None, SliceState.DONE))

    def start(self, preemptions: Sequence[Preemption]) -> list[str]:
        """Signal each victim's running slice; returns the slices now in their grace period."""
        started = []
        for p in preemptions:
            composition = p.job.startswith(COMPOSITION)
            found = (p.job.removeprefix(COMPOSITION), None) if composition else self.store.running_slice_of(p.job)
            if found is None:
                continue  # it ended or was torn down since the round's snapshot
            slice_id, handle = found
            why = f"{p.why}: SIGTERM, grace {self.grace_s:g} s"
            if not self.store.record_preemption(slice_id, p.job, p.tenant, p.for_job, p.for_tenant,
                                                dict(p.reclaims), why, self.grace_s):
                continue
            started.append(slice_id)
            self._open = True
            log.info("%s %s (tenant %s): %s", "composition" if composition else "job", p.job, p.tenant, why)
            if composition:
                continue  # nothing runs in it to signal: its owner has the grace period to decompose it
            try:
                self.engine.terminate(handle or slice_id)
            except Exception:  # the kill at the end of the grace period stops it all the same
                log.exception("preemption of %s: SIGTERM failed", p.job)
        return started

    def step(self, now: float | None = None) -> set[str]:
        """End the grace periods that are over; returns the slices still in theirs (the poll skips them)."""
        now = time.time() if now is None else now
        waiting: set[str] = set()
        records = self.store.preemptions()
        self._open = bool(records)
        for rec in records:
            if rec.slice_state in (None, SliceState.DONE):
                self.store.drop_preemption(rec.slice_id)
                if rec.for_job != CANCEL_MARK:
                    self.reclaimed.add(rec.for_job)
                continue
            if rec.job_id.startswith(COMPOSITION):
                if rec.slice_state is SliceState.COMPOSED and now >= rec.deadline:
                    self.store.decompose(rec.slice_id, f"preempted by {rec.for_job} (tenant {rec.for_tenant} "
                                         f"reclaims its quota lent to {rec.tenant}); decomposed after its "
                                         f"{rec.deadline - rec.signalled_at:g} s grace")
                elif rec.slice_state is SliceState.COMPOSED:
                    waiting.add(rec.slice_id)
                continue  # an update (composing) finishes first; tearing down: wait
            if rec.slice_state is not SliceState.RUNNING:
                continue  # composing cannot be (only running slices are preempted); tearing down: wait
            status = self.engine.status(rec.handle or rec.slice_id)
            if rec.for_job == CANCEL_MARK:
                if not self._end_cancel(rec.job_id, status.state.ended, now >= rec.deadline):
                    waiting.add(rec.slice_id)
                continue
            if status.state is RunState.COMPLETED:
                # it finished its work (exit code 0) within its grace period: done, not to be run again
                self.store.finish_slice(rec.slice_id, JobState.COMPLETED, status.exit_code)
                continue
            ended = status.state.ended
            if not ended and now < rec.deadline:
                waiting.add(rec.slice_id)
                continue
            how = "it stopped on SIGTERM" if ended else f"killed after its {rec.deadline - rec.signalled_at:g} s grace"
            detail = (f"preempted by {rec.for_job} (tenant {rec.for_tenant} reclaims its quota lent to "
                      f"{rec.tenant}); {how}")
            log.info("job %s: %s", rec.job_id, detail)
            self.slices.abort(rec.slice_id, SliceOutcome.PREEMPTED, detail)
        return waiting

    def _end_cancel(self, job_id: str, ended: bool, over: bool) -> bool:
        """A graceful cancel ends once the job has stopped or its grace period is over: the job is
        cancelled and its slice torn down (stop-task kills what is left). False while it goes on."""
        if not ended and not over:
            return False
        self.store.cancel_job(job_id)
        log.info("job %s: cancelled by user; %s", job_id,
                 "it stopped on the signal" if ended else "killed at the end of its grace period")
        return True


__all__ = ["CANCEL_MARK", "Preempter"]

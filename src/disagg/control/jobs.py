"""`JobService`: what the API calls — submit, cancel, logs, an operator's device and link actions.

It decides nothing about placement: it stores what users ask (a submission, a cancel) through the
store's named operations and wakes the scheduling loop, which may run in this process or in
another one (`control.split`). A 201 means the job is committed: submissions that arrive together
share one transaction (the store's group writer).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

import anyio.to_thread

from disagg.control.config import Config
from disagg.control.disk import DiskWatch
from disagg.control.gc import remove
from disagg.control.health import HealthMonitor
from disagg.control.metrics import ControllerMetrics
from disagg.control.preemption import CANCEL_MARK
from disagg.control.tenants import SubmitLimits, TenantDirectory
from disagg.engines.base import Engine, LogPage
from disagg.fabric.base import FaultInjection
from disagg.model import DEVICE_KINDS, Cluster, Job, TaskRequest, never_fits
from disagg.model.states import JobReason, JobState, RunState
from disagg.store import DuplicateKey, IdempotencyConflict, JobLive, Store, job_dict, new_job_row
from disagg.store.batch import GroupInsert
from disagg.store.snapshot import Inventory

log = logging.getLogger(__name__)

#: How often a submission's check asks whether the inventory changed (one small read), seconds.
INVENTORY_RECHECK_S = 1.0
#: An admin's action on a device or a link, as the server's log says it.
_DONE = {"fail": "marked failed", "repair": "repaired", "drain": "marked drained"}


class JobRejected(ValueError):
    """A job that can never run on this cluster; `field` names what to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class QueueFull(RuntimeError):
    """The tenant has as many jobs queued as `max_queued_per_tenant` allows (429)."""


class QueueCounts:
    """Queued jobs per tenant, read from the store at most every REFRESH_S and counted up between reads:
    a submission does not cost a query (the limit may be overshot by what one second admits)."""

    REFRESH_S = 1.0

    def __init__(self, store: Store) -> None:
        self.store = store
        self.counts: dict[str, int] = {}
        self.read_at = -1e9

    def stale(self) -> bool:
        return time.monotonic() - self.read_at > self.REFRESH_S

    def refresh(self) -> None:
        self.counts = self.store.queued_counts()
        self.read_at = time.monotonic()

    def admit(self, tenant: str, most: int, count: int = 1) -> None:
        """Count `count` more queued jobs of `tenant`; QueueFull (nothing counted) when they would pass
        `most`."""
        n = self.counts.get(tenant, 0)
        if n + count > most:
            ask = "" if count == 1 else f"; a batch of {count} does not fit in what is left ({max(0, most - n)})"
            raise QueueFull(f"tenant {tenant!r} has {n} jobs queued; at most {most} may wait at once "
                            f"(max_queued_per_tenant){ask}: wait for some to start, or cancel some")
        self.counts[tenant] = n + count


class JobService:
    """The controller as the API sees it. `wake` tells the scheduling loop that something changed;
    `round_info` reads the loop's last round (here, or published by the loop process)."""

    def __init__(self, store: Store, engine: Engine, health: HealthMonitor, metrics: ControllerMetrics,
                 config: Config, wake: Callable[[], None], round_info: Callable[[], dict[str, Any]]) -> None:
        self.store = store
        self.engine = engine
        self.health = health
        self.metrics = metrics
        self.config = config
        self.wake = wake
        self.round_info = round_info
        #: The cluster a submission is checked against, with the inventory it was read with and when that
        #: was last compared with the store's (`_capacity`).
        self._cluster: tuple[Inventory, Cluster, float] = (store.inventory(), store.cluster(), time.monotonic())
        self._jobs: GroupInsert = store.submissions()
        self.queued = QueueCounts(store)
        self.limits = SubmitLimits(TenantDirectory(store, config))
        self.disk = DiskWatch({"the store's filesystem": config.store_dir(),
                               "the state directory's filesystem": config.resolved_state_dir().absolute()},
                              int(config.min_free_disk_mb * 2**20))

    def close(self) -> None:
        self._jobs.close()

    # --- submissions -------------------------------------------------------------------------
    def submit(self, tenant: str, request: dict[str, Any], idempotency_key: str | None = None
               ) -> tuple[dict[str, Any], bool]:
        """Store a new job (state queued) or, for a repeated idempotency key, return the first one.

        Returns (job, created) once the job is committed. Raises JobRejected when the job can never
        fit, IdempotencyConflict when the key was used with another body.
        """
        digest, key = _digest(request), idempotency_key

        def earlier() -> list[dict[str, Any]] | None:
            found = None if key is None else self.store.job_by_key(tenant, key, digest)
            return None if found is None else [found]

        jobs, created = self._store(lambda: [self._new_job(tenant, request, key, digest)], earlier, key is not None)
        return jobs[0], created

    async def submit_async(self, tenant: str, request: dict[str, Any], idempotency_key: str | None = None
                           ) -> tuple[dict[str, Any], bool]:
        """`submit` for the API's event loop: no thread hop unless an idempotency key needs a look-up."""
        if idempotency_key is not None:
            return await anyio.to_thread.run_sync(self.submit, tenant, request, idempotency_key)
        jobs = await self._store_async(lambda: [self._new_job(tenant, request, None, _digest(request))])
        return jobs[0], True

    def submit_batch(self, tenant: str, requests: list[dict[str, Any]], idempotency_key: str | None = None
                     ) -> tuple[list[dict[str, Any]], bool]:
        """Store several jobs in one transaction, all or none (Slurm's job arrays; a client that submits
        many jobs pays one request, not one each). Returns (jobs in order, created).

        JobRejected names the first job at fault (`jobs[i].tasks`) and stores nothing; QueueFull when the
        whole batch does not fit the tenant's queue bound. An Idempotency-Key covers the batch: job `i`
        is stored under `batch_key(key, i)` with the digest of the whole body, so a repeat returns the
        same jobs and a repeat with another body (a job changed, added or left out) is a conflict."""
        digest, key = _digest({"batch": requests}), idempotency_key
        keys = None if key is None else [batch_key(key, i) for i in range(len(requests))]

        def earlier() -> list[dict[str, Any]] | None:
            return None if key is None else self._batch_by_key(tenant, key, len(requests), digest)

        return self._store(lambda: self._new_jobs(tenant, requests, keys, digest), earlier, key is not None)

    async def submit_batch_async(self, tenant: str, requests: list[dict[str, Any]],
                                 idempotency_key: str | None = None) -> tuple[list[dict[str, Any]], bool]:
        """`submit_batch` for the API's event loop: no thread hop unless an idempotency key needs look-ups."""
        if idempotency_key is not None:
            return await anyio.to_thread.run_sync(self.submit_batch, tenant, requests, idempotency_key)
        rows = await self._store_async(lambda: self._new_jobs(tenant, requests, None, _digest({"batch": requests})))
        return rows, True

    def _store(self, build: Callable[[], list[dict[str, Any]]], earlier: Callable[[], list[dict[str, Any]] | None],
               keyed: bool) -> tuple[list[dict[str, Any]], bool]:
        """What `submit` and `submit_batch` share: the jobs stored before under the same key (`earlier`,
        when `keyed`), else the rows `build` makes committed in one transaction; a concurrent twin with
        the same key that won the race gives its jobs back. (jobs, created)"""
        if keyed:
            found = earlier()
            if found is not None:
                return found, False
        self._refresh_counts()
        rows = build()
        try:
            self._jobs.insert_all(rows).result()
        except DuplicateKey:
            found = earlier() if keyed else None
            if found is None:
                raise
            return found, False
        self.wake()
        return [job_dict(values) for values in rows], True

    async def _store_async(self, build: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """`_store` without a key, for the API's event loop: the counts' reads (once a second) off it."""
        if self.queued.stale():
            await anyio.to_thread.run_sync(self.queued.refresh)
        if self.limits.stale():
            await anyio.to_thread.run_sync(self.limits.refresh)
        rows = build()
        await asyncio.wrap_future(self._jobs.insert_all(rows))
        self.wake()
        return [job_dict(values) for values in rows]

    def _refresh_counts(self) -> None:
        """The tenants' queued counts and limits, read again when a second old."""
        if self.queued.stale():
            self.queued.refresh()
        if self.limits.stale():
            self.limits.refresh()

    def _batch_by_key(self, tenant: str, key: str, count: int, digest: str) -> list[dict[str, Any]] | None:
        """The jobs a batch with Idempotency-Key `key` stored before (None: none was); IdempotencyConflict
        when the key was used for another body (which also tells another number of jobs)."""
        try:
            first = self.store.job_by_key(tenant, batch_key(key, 0), digest)
            if first is None:
                return None
            found = [first, *(self.store.job_by_key(tenant, batch_key(key, i), digest) for i in range(1, count))]
        except IdempotencyConflict:
            raise IdempotencyConflict(f"Idempotency-Key {key!r} was used for a batch with a different request "
                                      "body") from None
        return [job for job in found if job is not None]  # a job removed since (DELETE) is not given back

    def _new_jobs(self, tenant: str, requests: list[dict[str, Any]], keys: list[str] | None, digest: str
                  ) -> list[dict[str, Any]]:
        """The stored columns of a batch's jobs, or JobRejected naming the first job at fault (nothing is
        counted against the tenant's queue then)."""
        for i, request in enumerate(requests):
            try:
                self._check(tenant, request)
            except JobRejected as exc:
                raise JobRejected(f"jobs[{i}].{exc.field}", f"jobs[{i}]: {exc}") from None
        self.queued.admit(tenant, self.config.max_queued_per_tenant, len(requests))
        now = time.time()
        return [new_job_row(tenant, request, None if keys is None else keys[i], digest, now)
                for i, request in enumerate(requests)]

    def _new_job(self, tenant: str, request: dict[str, Any], key: str | None, digest: str) -> dict[str, Any]:
        """The stored columns of a new job; JobRejected (`_check`) or QueueFull, nothing counted."""
        self._check(tenant, request)
        self.queued.admit(tenant, self.config.max_queued_per_tenant)
        return new_job_row(tenant, request, key, digest, time.time())

    def _capacity(self) -> Cluster:
        """The cluster as the store's inventory now is, compared at most every INVENTORY_RECHECK_S: a start
        with an edited spec changes it, and an API that kept the one it began with (a standby replica's)
        refused jobs the new machines could run and took ones the cluster no longer could."""
        inventory, cluster, at = self._cluster
        now = time.monotonic()
        if now - at >= INVENTORY_RECHECK_S:
            latest = self.store.inventory()
            if latest is not inventory:
                cluster = self.store.cluster()
            self._cluster = (latest, cluster, now)
        return cluster

    def _check(self, tenant: str, request: dict[str, Any]) -> None:
        """JobRejected when the job can never fit on this cluster, or above what its tenant may ever hold
        (`placement.quota.beyond_limit`: the 422 names the tenant, the resource, the limit and the ask)."""
        probe = Job(name="probe", image=request["image"], tasks=_task_request(request["tasks"]), tenant=tenant,
                    preemptible=request.get("preemptible", True) is not False)
        why = never_fits(probe, self._capacity())
        if why:
            raise JobRejected("tasks", f"the job can never fit on this cluster: {why}")
        why = self.limits.problem(tenant, probe)
        if why:
            raise JobRejected("tasks", f"the job can never fit its tenant's limit: {why}")

    # --- a job's life ------------------------------------------------------------------------
    def delete(self, job_id: str) -> bool:
        """Remove an ended job's record once its slices are done: the engine's files of its slices first,
        then its rows (with retention's event floor), as `control.gc` does, so that a crash in between
        leaves rows without files, never files the store does not know (a start would take those for a lost
        store). False: no such job; JobLive: the job, or a slice of it, still lives."""
        state, live, slices = self.store.removable(job_id)
        if state is None:
            return False
        if not JobState(state).final:
            raise JobLive(job_id, state)
        if live is not None:
            raise JobLive(job_id, f"{state} but its slice {live} is still tearing down (it gives its devices back "
                                  "first); remove it once the slice is done")
        remove(self.store, self.engine, {job_id: slices})
        return True

    def cancel(self, job_id: str, grace_s: float = 0.0, sig: str = "TERM", tenant: str = "") -> None:
        """Cancel a job: a queued one stops waiting; a live slice is torn down. Safe to repeat.

        With `grace_s`, a running job first gets SIG`sig` (SIGTERM by default) and keeps running until it
        stops or the grace period is over, as a preempted job does (`control.preemption`: the loop's
        preempter ends it, cancelled); a queued or composing job is cancelled at once, and so is a job
        already in a grace period (a second cancel does not wait again)."""
        found = self.store.running_slice_of(job_id) if grace_s > 0 else None
        why = f"cancel requested: SIG{sig}, grace {grace_s:g} s"
        if found is not None and self.store.record_preemption(found[0], job_id, tenant, CANCEL_MARK, "", {}, why,
                                                              grace_s):
            log.info("job %s: %s", job_id, why)
            try:
                self.engine.terminate(found[1] or found[0], getattr(signal, f"SIG{sig}"))
            except Exception:  # the kill at the end of the grace period stops it all the same
                log.exception("cancel of %s: SIG%s failed", job_id, sig)
            self.wake()
            return
        out = self.store.cancel_job(job_id)
        if out is not None:
            log.info("job %s: cancelled by user (it is %s)", job_id, out["state"])
        self.wake()

    def hold(self, job_id: str, who: str, action: str) -> str | None:
        """An admin's `hold`, `release` or `requeue` of a job: its state now (None: no such job); raises
        `store.NotInState` when the job is in no state the action applies to."""
        do = {"hold": self.store.hold_job, "release": self.store.release_job, "requeue": self.store.requeue_job}
        out = do[action](job_id, who)
        if out is not None:
            log.warning("job %s: %s by %s", job_id, {"hold": "put on hold", "release": "released",
                                                     "requeue": "re-queued"}[action], who)
        self.wake()
        return out

    def logs(self, job_id: str, max_bytes: int = 2**20) -> str:
        """What the job's latest attempt wrote: its last `max_bytes` bytes (a MiB) at most (`log_tail`)."""
        return self.log_tail(job_id, max_bytes)

    def log_tail(self, job_id: str, max_bytes: int) -> str:
        """The end of what the job's latest attempt wrote: its last `max_bytes` bytes at most, read from the
        end of the file whatever its size (empty before it ran, or when the engine has nothing)."""
        handle = self.store.job_handle(job_id)
        if handle is None:
            return ""
        try:
            size = self.engine.log_page(handle, 0, 0).size
            return self.engine.log_page(handle, max(0, size - max_bytes), max_bytes).text
        except (OSError, ValueError):
            return ""

    def log_page(self, job_id: str, offset: int, limit: int) -> dict[str, Any]:
        """A page of what the job's latest attempt wrote (the API's LogsOut): bytes `offset`.. of its output,
        at most `limit`; `complete` once the attempt has ended and the page reaches the end."""
        attempt = self.store.job_attempt(job_id)
        if attempt is None:
            return {"job": job_id, "slice": None, "logs": "", "offset": 0, "next_offset": 0, "size": 0,
                    "complete": self.store.job_ended(job_id)}
        slice_id, handle = attempt
        ended = self.store.job_ended(job_id)
        try:
            page = self.engine.log_page(handle, offset, limit)
            # the engine's word counts once the job's process has ended; `lost` is not an end (a job
            # not launched yet is unknown to the engine: `logs --follow` on a composing job must wait)
            state = self.engine.status(handle).state
            ended = ended or (state.ended and state is not RunState.LOST)
        except (OSError, ValueError):
            page = LogPage("", offset, offset, 0)
        return {"job": job_id, "slice": slice_id, "logs": page.text, "offset": page.offset,
                "next_offset": page.next_offset, "size": page.size,
                "complete": ended and page.next_offset >= page.size}

    # --- an operator's actions ------------------------------------------------------------------
    def set_device(self, device_id: str, action: str) -> dict[str, Any] | None:
        """Admin actions on a device: drain, fail (fault injection), repair. None: no such device."""
        if not self.store.has_device(device_id):
            return None
        if action == "fail":
            self.health.inject(lambda f: f.fail_device(device_id))
        elif action == "repair":
            self.health.inject(lambda f: f.repair_device(device_id), repaired=device_id)
        elif action == "drain":
            self.store.drain_device(device_id)
        else:
            raise ValueError(f"unknown device action {action!r}")
        log.warning("device %s: %s (an admin's action)", device_id, _DONE[action])
        self.wake()
        return next(d for d in self.store.devices_view() if d["id"] == device_id)

    def set_link(self, link_id: str, action: str) -> dict[str, Any] | None:
        """Admin fault injection on a link: `fail` drops it on the fabric, `repair` brings it back.

        The monitor then does what it does for a fault it finds itself: only the slices with a remote
        device whose path crosses the link are torn down and their jobs re-queued (or failed, by
        their own retry policy); devices behind a dropped uplink leave the pool until it is repaired.
        """
        if not self.store.has_link(link_id):
            return None
        actions: dict[str, Callable[[FaultInjection], None]] = {
            "fail": lambda f: f.drop_link(link_id), "repair": lambda f: f.restore_link(link_id)}
        if action not in actions:
            raise ValueError(f"unknown link action {action!r}")
        self.health.inject(actions[action])
        log.warning("link %s: %s (an admin's action)", link_id, _DONE[action])
        self.wake()
        return next(lk for lk in self.store.links_view() if lk["id"] == link_id)


def hold_never_fitting(store: Store) -> tuple[dict[str, str], list[str]]:
    """After a start whose cluster spec changed the inventory: hold the queued jobs that can never fit the
    cluster as it now is (reason `never-fits`, in the words a submission of them is refused with), rather
    than leave them waiting with a reason that says room may come ("2 free, 2 left after the jobs ahead of
    it"); and put back in the queue those held so before that fit again. Held, not failed: a spec edited
    by mistake loses no job, and the start with the right one gives them back. (Job → why of those held,
    those released.)"""
    cluster = store.cluster()
    released = store.release_jobs([j.name for j in store.held_for(JobReason.NEVER_FITS) if never_fits(j, cluster)
                                   is None], "released: the cluster as its spec now is can hold it")
    why: dict[str, str] = {}
    for job in store.queued_jobs(sum(store.queued_counts().values())):
        reason = never_fits(job, cluster)
        if reason:
            why[job.name] = (f"held: the job can never fit on this cluster as its spec now is: {reason} (released "
                             "when a start's spec can hold it; disagg cancel ends it)")
    return {j: why[j] for j in store.hold_jobs(why, JobReason.NEVER_FITS)}, released


def _task_request(tasks: dict[str, Any]) -> TaskRequest:
    return TaskRequest(
        int(tasks["count"]), float(tasks["cpus"]), float(tasks["memory_gb"]),
        {k: int(tasks.get(k) or 0) for k in DEVICE_KINDS if int(tasks.get(k) or 0) > 0},
        {k: str(tasks[f"{k}_model"]) for k in DEVICE_KINDS if tasks.get(f"{k}_model")},
    )


#: A batch's jobs keep its Idempotency-Key as `batch:<32 hex of the key>:<index>` (fits the key column
#: whatever the key's length, and no single submission's key of the same form is expected).
_BATCH_KEY = "batch:{}:{}"


def batch_key(key: str, index: int) -> str:
    """The stored Idempotency-Key of job `index` of a batch submitted with `key`."""
    return _BATCH_KEY.format(hashlib.sha256(key.encode()).hexdigest()[:32], index)


def _digest(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


__all__ = ["JobRejected", "JobService", "QueueCounts", "QueueFull", "batch_key", "hold_never_fitting"]

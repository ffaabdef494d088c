"""The controller and its scheduling loop.

One thread runs rounds; each round, in order:
  1. monitor   — ask the fabric which devices failed and which links dropped (LegoOS's per-component
                 monitors reporting to a global manager); slices that use them are sent to teardown
                 and their jobs re-queued; nothing else is touched;
  2. poll      — ask the engine about running slices; an ended job sends its slice to teardown;
  3. place     — call the policy (`disagg.placement.registry`, default `drmaestro-na`) on a snapshot
                 and the queue, then apply its decisions in one transaction that re-checks that no
                 machine, device or link is over-committed (a conflicting placement stays queued);
                 jobs left waiting get `wait_rounds` + 1 and the reason stored;
  4. dispatch  — hand slices that are composing or tearing down to worker threads (one per slice).
A submission wakes the loop at once; otherwise it runs every `tick_s`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import numpy as np
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from disagg.control.metrics import ControllerMetrics
from disagg.control.slice import SliceRunner, build_placement
from disagg.control.split import LoopLink
from disagg.engines.base import Engine, with_foreign_holdings
from disagg.fabric.emulated import EmulatedFabric
from disagg.model import DEVICE_KINDS, Cluster, Job, TaskRequest, never_fits
from disagg.placement.decisions import Decisions, JobPlacement
from disagg.placement.registry import get_policy
from disagg.store import LIVE_SLICE_STATES, IdempotencyConflict, Store, job_dict, new_id, views
from disagg.store.batch import GroupInsert
from disagg.store.models import DeviceRow, JobRow, LinkRow, SliceRow

log = logging.getLogger(__name__)
_EPS = 1e-9


@dataclass(frozen=True)
class ControllerConfig:
    policy: str = "drmaestro-na"
    tick_s: float = 0.25
    window: int = 32  # queued jobs handed to the policy per round (oldest first)
    round_gap_s: float = 0.5  # placement rounds at least this far apart (a round costs ~1 ms per queued job)
    workers: int = 16  # slices composed or torn down at once
    parallel_steps: bool = True
    seed: int = 0


class JobRejected(ValueError):
    """A job that can never run on this cluster; `field` names what to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def model_job(row: JobRow) -> Job:
    """A stored job as the policies see it (its id is its name)."""
    t = row.tasks
    devices: dict[str, int] = {k: int(t.get(k, 0)) for k in DEVICE_KINDS if int(t.get(k, 0) or 0) > 0}
    models: dict[str, str] = {k: str(t[f"{k}_model"]) for k in DEVICE_KINDS if t.get(f"{k}_model")}
    return Job(
        name=row.id,
        image=row.image,
        submit_s=row.submitted_at,
        importance=row.importance,
        slo_s=row.slo_s,
        wait_rounds=row.wait_rounds,
        command=tuple(row.command),
        tasks=TaskRequest(
            int(t.get("count", 1)), float(t.get("cpus", 1.0)), float(t.get("memory_gb", 1.0)), devices, models
        ),
    )


class Controller:
    """The live controller: store + fabric + engine + policy, driven by one loop thread."""

    def __init__(
        self, store: Store, fabric: EmulatedFabric, engine: Engine, config: ControllerConfig | None = None
    ) -> None:
        self.store = store
        self.fabric = fabric
        self.engine = engine
        self.config = config or ControllerConfig()
        self.policy = get_policy(self.config.policy)
        self.metrics = ControllerMetrics(store, fabric)
        self.slices = SliceRunner(store, fabric, engine, self.metrics.observe_step, self.config.parallel_steps)
        self.rng = np.random.default_rng(self.config.seed)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=self.config.workers, thread_name_prefix="slice")
        self._jobs = GroupInsert(store, JobRow.__table__)  # type: ignore[arg-type]
        self._inflight: set[str] = set()
        self._lock = threading.Lock()
        self._cluster: Cluster = store.cluster()
        self.last_round: dict[str, Any] = {}
        self._last_schedule = 0.0
        self._pending_round = False
        self._health_seen: tuple[frozenset[str], frozenset[str]] | None = None
        self.link: LoopLink | None = None
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
        self._jobs.close()

    def wake(self) -> None:
        """Place soon: something was stored that the loop should act on (here, or in the loop process)."""
        self._wake.set()
        if self.link is not None:
            self.link.wake()

    def round_info(self) -> dict[str, Any]:
        """The last scheduling round (read from the loop process when the API runs apart from it)."""
        if self.link is not None:
            info = self.link.status().get("last_round")
            return info if isinstance(info, dict) else {}
        return self.last_round

    def attach_loop(self, link: LoopLink) -> None:
        """This controller serves the API only; its loop runs in another process (`control.split`)."""
        self.link = link
        self.metrics.loop_text = lambda: str(link.status().get("metrics", "")).encode()

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
        if self._health_key() == self._health_seen:
            return  # nothing changed since the last look (the first look after a start always runs)
        self._change_health(lambda: None)

    def _health_key(self) -> tuple[frozenset[str], frozenset[str]]:
        return frozenset(self.fabric.failed_devices()), frozenset(self.fabric.down_links())

    def _change_health(self, change: Callable[[], None], then: Callable[[Session], None] | None = None) -> None:
        """Apply `change` to the fabric and mirror the fabric's health, in one serialized transaction.

        The fabric is read inside the transaction: a look at the fabric taken before an admin's repair
        (in another thread or the other process of a split `serve`) can then never be written after
        the repair's own mirror, which would leave a repaired link down or a device failed.
        """
        with self.store.write() as s:
            self.store.serialize(s, "fabric-health")
            change()
            seen = self._health_key()
            victims = self._mirror_health(s, *seen)
            if then is not None:
                then(s)
        self._wake.set()  # capacity changed: place again
        for slice_id, why in victims.items():
            if self.slices.abort(slice_id, "requeue", why):
                log.warning("slice %s: %s; job re-queued", slice_id, why)
        self._health_seen = seen

    @staticmethod
    def _mirror_health(s: Session, failed: frozenset[str], down: frozenset[str]) -> dict[str, str]:
        """Write device failures and link states; return the slices they hit, with why."""
        victims: dict[str, str] = {}
        for dev in s.scalars(select(DeviceRow)):
            if dev.id in failed and dev.health != "failed":
                dev.health = "failed"
            if dev.id in failed and dev.slice_id is not None:
                victims.setdefault(dev.slice_id, f"device {dev.id} failed")
        for link in s.scalars(select(LinkRow)):
            link.up = link.id not in down
        if down:
            for sl in s.scalars(select(SliceRow).where(SliceRow.state.in_(("composing", "running")))):
                for t in sl.placement.get("tasks", []):
                    for d in t.get("devices", []):
                        hit = [lk for lk in d.get("path", []) if lk in down]
                        if hit:
                            victims.setdefault(sl.id, f"link {hit[0]} dropped (device {d['id']})")
        return victims

    # --- 2. poll ---------------------------------------------------------------------------
    def poll(self) -> None:
        with self.store.read() as s:
            running = [
                (str(i), h)
                for i, h in s.execute(select(SliceRow.id, SliceRow.handle).where(SliceRow.state == "running"))
            ]
        for slice_id, handle in running:
            with self._lock:
                if slice_id in self._inflight:
                    continue
            st = self.engine.status(handle or slice_id)
            if st.state in ("completed", "failed"):
                self._finish(slice_id, st.state, st.exit_code)
            elif st.state in ("lost", "cancelled"):
                self.slices.abort(slice_id, "requeue", f"job lost on the engine: {st.detail or st.state}")

    def _finish(self, slice_id: str, outcome: str, exit_code: int | None) -> None:
        now = time.time()
        with self.store.write() as s:
            n = s.execute(
                update(SliceRow)
                .where(SliceRow.id == slice_id, SliceRow.state == "running")
                .values(state="tearing-down", outcome=outcome, updated_at=now, detail=f"exit code {exit_code}")
            ).rowcount  # type: ignore[attr-defined]
            if n:
                s.execute(
                    update(JobRow)
                    .where(JobRow.slice_id == slice_id, JobRow.state == "running")
                    .values(
                        state=outcome,
                        exit_code=exit_code,
                        updated_at=now,
                        reason=None if outcome == "completed" else f"exit code {exit_code}",
                        reason_code=None if outcome == "completed" else "exit-code",
                    )
                )

    # --- 3. place --------------------------------------------------------------------------
    def schedule(self) -> Decisions | None:
        with self.store.read() as s:
            rows = list(
                s.scalars(select(JobRow).where(JobRow.state == "queued").order_by(JobRow.seq).limit(self.config.window))
            )
            snapshot = self.store.cluster(s)
        if not rows:
            return None
        # what jobs outside disagg hold on the engine (a user's own sbatch) is not offered: no double booking
        snapshot = with_foreign_holdings(snapshot, self.engine.foreign_holdings())
        t0 = time.perf_counter()
        queue = [model_job(r) for r in rows]
        decisions = self.policy.place(snapshot, queue, time.time(), self.rng, clock=time.perf_counter)
        placed = self.apply(decisions, [r.id for r in rows])
        elapsed = time.perf_counter() - t0
        self.metrics.round_seconds.observe(elapsed)
        self.last_round = {
            "at": time.time(),
            "queued": len(rows),
            "placed": placed,
            "unplaced": len(decisions.unplaced),
            "round_s": elapsed,
        }
        return decisions

    def apply(self, decisions: Decisions, considered: list[str]) -> int:
        """Apply decisions in one transaction, re-checking capacity; returns how many were placed."""
        now = time.time()
        placed = 0
        with self.store.write() as s:
            cpu, mem = self.store.room_left(s)
            # only the devices the decisions grant are read (and locked): reading every device row
            # took 0.8 s a round at 52,500 devices
            granted = sorted({g.id for p in decisions.placed for t in p.tasks for g in t.devices})
            devs: dict[str, DeviceRow] = {}
            for i in range(0, len(granted), 500):
                chunk = select(DeviceRow).where(DeviceRow.id.in_(granted[i:i + 500])).with_for_update()
                devs.update((d.id, d) for d in s.scalars(chunk))
            links = list(s.scalars(select(LinkRow)))
            down = {r.id for r in links if not r.up}
            # bandwidth left on each link: what the live slices' remote devices were placed to carry is taken
            bandwidth = {r.id: r.gbps for r in links}
            for placement in s.scalars(select(SliceRow.placement).where(SliceRow.state.in_(LIVE_SLICE_STATES))):
                for t in placement.get("tasks", []):
                    for d in t.get("devices", []):
                        for lk in d.get("path", []):
                            if lk in bandwidth:
                                bandwidth[lk] -= float(d.get("network_gbps", 0.0))
            jobs = {r.id: r for r in s.scalars(select(JobRow).where(JobRow.id.in_(considered)))}
            decided: set[str] = set()
            waits: dict[tuple[str | None, str | None], list[str]] = defaultdict(list)
            for p in decisions.placed:
                job = jobs.get(p.job)
                decided.add(p.job)
                if job is None or job.state != "queued":
                    continue
                problem = _over_commit(p, cpu, mem, devs, down, bandwidth)
                if problem:
                    job.wait_rounds += 1
                    job.reason, job.reason_code, job.updated_at = (
                        f"placement conflict: {problem}",
                        "contention",
                        now,
                    )
                    continue
                slice_id = new_id("s")
                tasks = _tasks_json(p)
                for t in p.tasks:
                    cpu[t.machine] -= t.cpus
                    mem[t.machine] -= t.memory_gb
                    for g in t.devices:
                        devs[g.id].slice_id = slice_id
                        for lk in g.path:
                            if lk in bandwidth:
                                bandwidth[lk] -= g.network_gbps
                job.attempts += 1
                s.add(
                    SliceRow(
                        id=slice_id,
                        job_id=job.id,
                        attempt=job.attempts,
                        state="composing",
                        outcome=None,
                        detail=None,
                        placement=build_placement(slice_id, tasks),
                        handle=None,
                        created_at=now,
                        updated_at=now,
                    )
                )
                job.state, job.slice_id, job.reason, job.reason_code = "composing", slice_id, None, None
                job.updated_at = now
                placed += 1
            for u in decisions.unplaced:
                decided.add(u.job)
                if u.job in jobs and jobs[u.job].state == "queued":
                    waits[(u.message, str(u.reason))].append(u.job)
            for job_id in considered:
                if job_id not in decided and job_id in jobs and jobs[job_id].state == "queued":
                    waits[(None, None)].append(job_id)
            # one UPDATE per distinct reason (rounds leave many jobs waiting for the same reason)
            for (message, code), ids in waits.items():
                values: dict[str, Any] = {"wait_rounds": JobRow.wait_rounds + 1}
                if message is not None:
                    values.update(reason=message, reason_code=code, updated_at=now)
                s.execute(
                    update(JobRow).where(JobRow.id.in_(ids), JobRow.state == "queued").values(**values),
                    execution_options={"synchronize_session": False},
                )
        return placed

    # --- 4. dispatch -----------------------------------------------------------------------
    def dispatch(self) -> None:
        with self.store.read() as s:
            work = [
                (str(i), str(st))
                for i, st in s.execute(
                    select(SliceRow.id, SliceRow.state)
                    .where(SliceRow.state.in_(("composing", "tearing-down")))
                    .order_by(SliceRow.created_at)
                )
            ]
        for slice_id, state in work:
            with self._lock:
                if slice_id in self._inflight:
                    continue
                self._inflight.add(slice_id)
            self._pool.submit(self._work, slice_id, state)

    def _work(self, slice_id: str, state: str) -> None:
        try:
            if state == "composing":
                self.slices.compose(slice_id)
            else:
                self.slices.teardown(slice_id)
        except Exception:
            log.exception("slice %s: %s step failed; will retry", slice_id, state)
        finally:
            with self._lock:
                self._inflight.discard(slice_id)
            self._wake.set()

    # --- what the API calls ----------------------------------------------------------------
    def submit(
        self, tenant: str, request: dict[str, Any], idempotency_key: str | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Store a new job (state queued) or, for a repeated idempotency key, return the first one.

        Returns (job, created) once the job is committed. Raises JobRejected when the job can never
        fit, IdempotencyConflict when the key was used with another body.
        """
        digest = _digest(request)
        if idempotency_key is not None:
            found = self._by_key(tenant, idempotency_key, digest)
            if found is not None:
                return found, False
        values = self._new_job(tenant, request, idempotency_key, digest)
        try:
            self._jobs.insert(values).result()
        except IntegrityError:
            if idempotency_key is None:
                raise
            found = self._by_key(tenant, idempotency_key, digest)  # a concurrent twin won the race
            if found is None:
                raise
            return found, False
        self.wake()
        return _job_out(values), True

    async def submit_async(
        self, tenant: str, request: dict[str, Any], idempotency_key: str | None = None
    ) -> tuple[dict[str, Any], bool]:
        """`submit` for the API's event loop: no thread hop unless an idempotency key needs a look-up.

        The job is committed by the group writer (one transaction for the submissions that arrive
        together) before this returns.
        """
        if idempotency_key is not None:
            return await anyio.to_thread.run_sync(self.submit, tenant, request, idempotency_key)
        values = self._new_job(tenant, request, None, _digest(request))
        await asyncio.wrap_future(self._jobs.insert(values))
        self.wake()
        return _job_out(values), True

    def _new_job(self, tenant: str, request: dict[str, Any], key: str | None, digest: str) -> dict[str, Any]:
        """The stored columns of a new job; JobRejected when it can never fit on this cluster."""
        tasks = dict(request["tasks"])
        probe = Job(
            name="probe",
            image=request["image"],
            tasks=TaskRequest(
                int(tasks["count"]),
                float(tasks["cpus"]),
                float(tasks["memory_gb"]),
                {k: int(tasks.get(k) or 0) for k in DEVICE_KINDS if int(tasks.get(k) or 0) > 0},
                {k: str(tasks[f"{k}_model"]) for k in DEVICE_KINDS if tasks.get(f"{k}_model")},
            ),
        )
        why = never_fits(probe, self._cluster)
        if why:
            raise JobRejected("tasks", f"the job can never fit on this cluster: {why}")
        now = time.time()
        return {
            "id": new_id("j"),
            "seq": time.time_ns(),
            "tenant": tenant,
            "name": request["name"],
            "image": request["image"],
            "command": list(request["command"]),
            "tasks": tasks,
            "slo_s": request.get("slo_s"),
            "importance": float(request.get("importance", 1.0)),
            "max_retries": int(request.get("max_retries", 2)),
            "state": "queued",
            "reason": "waiting for the next scheduling round",
            "reason_code": "new",
            "wait_rounds": 0,
            "attempts": 0,
            "exit_code": None,
            "slice_id": None,
            "submitted_at": now,
            "updated_at": now,
            "idempotency_key": key,
            "request_hash": digest,
        }

    def _by_key(self, tenant: str, key: str, digest: str) -> dict[str, Any] | None:
        with self.store.read() as s:
            row = s.scalars(select(JobRow).where(JobRow.tenant == tenant, JobRow.idempotency_key == key)).first()
            if row is None:
                return None
            if row.request_hash != digest:
                raise IdempotencyConflict(
                    f"Idempotency-Key {key!r} was used for job {row.id} with a different request body"
                )
            return job_dict(row)

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Cancel a job: a queued one stops waiting; a live slice is torn down. Safe to repeat."""
        now = time.time()
        with self.store.write() as s:
            job = s.get(JobRow, job_id)
            if job is None:
                return None
            if job.state not in ("completed", "failed", "cancelled"):
                job.state, job.reason, job.reason_code, job.updated_at = (
                    "cancelled",
                    "cancelled by user",
                    "cancelled",
                    now,
                )
                if job.slice_id is not None:
                    s.execute(
                        update(SliceRow)
                        .where(SliceRow.id == job.slice_id, SliceRow.state.in_(("composing", "running")))
                        .values(
                            state="tearing-down",
                            outcome="cancelled",
                            detail="cancelled by user",
                            updated_at=now,
                        )
                    )
            out = job_dict(job)
        self.wake()
        return out

    def logs(self, job_id: str) -> str:
        with self.store.read() as s:
            job = s.get(JobRow, job_id)
            if job is None or job.slice_id is None:
                return ""
            sl = s.get(SliceRow, job.slice_id)
            handle = (sl.handle if sl is not None else None) or job.slice_id
        try:
            return self.engine.logs(handle)
        except (OSError, ValueError):
            return ""

    def set_device(self, device_id: str, action: str) -> dict[str, Any] | None:
        """Admin actions on a device: drain, fail (fault injection), repair."""
        with self.store.read() as s:
            if s.get(DeviceRow, device_id) is None:
                return None
        if action == "fail":
            self._change_health(lambda: self.fabric.fail_device(device_id))
        elif action == "repair":

            def healthy(s: Session) -> None:
                dev = s.get(DeviceRow, device_id)
                assert dev is not None
                dev.health, dev.drained = "healthy", False

            self._change_health(lambda: self.fabric.repair_device(device_id), healthy)
        elif action == "drain":
            with self.store.write() as s:
                dev = s.get(DeviceRow, device_id)
                assert dev is not None
                dev.drained = True
        else:
            raise ValueError(f"unknown device action {action!r}")
        self.wake()
        return next(d for d in views.devices_view(self.store) if d["id"] == device_id)

    def set_link(self, link_id: str, action: str) -> dict[str, Any] | None:
        """Admin fault injection on a link: `fail` drops it on the fabric, `repair` brings it back.

        The monitor then does what it does for a fault it finds itself: only the slices with a remote
        device whose path crosses the link are torn down and their jobs re-queued (or failed, by
        their own retry policy); devices behind a dropped uplink leave the pool until it is repaired.
        """
        with self.store.read() as s:
            if s.get(LinkRow, link_id) is None:
                return None
        if action == "fail":
            self._change_health(lambda: self.fabric.drop_link(link_id))
        elif action == "repair":
            self._change_health(lambda: self.fabric.restore_link(link_id))
        else:
            raise ValueError(f"unknown link action {action!r}")
        self.wake()
        return next(lk for lk in views.links_view(self.store) if lk["id"] == link_id)


def _digest(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


#: What `job_dict` shows of a job, read from the stored columns of a new one.
_OUT_KEYS = tuple(
    c.key for c in JobRow.__table__.columns if c.key not in ("seq", "idempotency_key", "request_hash")
)


def _job_out(values: dict[str, Any]) -> dict[str, Any]:
    out = {k: values[k] for k in _OUT_KEYS}
    out["slice"] = out.pop("slice_id")
    out["command"] = list(out["command"])
    out["tasks"] = dict(out["tasks"])
    return out


def _tasks_json(p: JobPlacement) -> list[dict[str, Any]]:
    return [
        {
            "task": t.task,
            "machine": t.machine,
            "cpus": t.cpus,
            "memory_gb": t.memory_gb,
            "devices": [
                {
                    "id": d.id,
                    "kind": d.kind,
                    "remote": d.remote,
                    "location": d.location,
                    "path": list(d.path),
                    "network_gbps": d.network_gbps,
                }
                for d in t.devices
            ],
        }
        for t in p.tasks
    ]


def _over_commit(
    p: JobPlacement,
    cpu: dict[str, float],
    mem: dict[str, float],
    devs: dict[str, DeviceRow],
    down: set[str],
    bandwidth: dict[str, float],
) -> str | None:
    """Why applying this placement now would over-commit something (None when it fits).

    `bandwidth`: Gbit/s left on each link; a remote device takes its `network_gbps` on every link of its path.
    """
    need_cpu: dict[str, float] = {}
    need_mem: dict[str, float] = {}
    need_link: dict[str, float] = {}
    seen: set[str] = set()
    for t in p.tasks:
        if t.machine not in cpu:
            return f"machine {t.machine} is not in the inventory"
        need_cpu[t.machine] = need_cpu.get(t.machine, 0.0) + t.cpus
        need_mem[t.machine] = need_mem.get(t.machine, 0.0) + t.memory_gb
        for g in t.devices:
            d = devs.get(g.id)
            if d is None:
                return f"device {g.id} is not in the inventory"
            if g.id in seen or d.slice_id is not None:
                return f"device {g.id} is already held"
            if d.health != "healthy" or d.drained:
                return f"device {g.id} is {'failed' if d.health != 'healthy' else 'drained'}"
            hit = [lk for lk in g.path if lk in down]
            if hit:
                return f"link {hit[0]} to device {g.id} is down"
            for lk in g.path:
                need_link[lk] = need_link.get(lk, 0.0) + g.network_gbps
            seen.add(g.id)
    for m, c in need_cpu.items():
        if c > cpu[m] + _EPS:
            return f"machine {m} has {cpu[m]:g} cpus free, the job needs {c:g}"
        if need_mem[m] > mem[m] + _EPS:
            return f"machine {m} has {mem[m]:g} GB free, the job needs {need_mem[m]:g}"
    for lk, gbps in need_link.items():
        if lk in bandwidth and gbps > bandwidth[lk] + _EPS:
            return f"link {lk} has {max(bandwidth[lk], 0.0):g} Gbit/s left, the job needs {gbps:g}"
    return None


__all__ = ["LIVE_SLICE_STATES", "Controller", "ControllerConfig", "JobRejected", "model_job"]

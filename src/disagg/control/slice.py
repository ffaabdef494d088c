"""The slice lifecycle: the six FlowOS-RM operations as one persisted state machine per slice.

    composing:     attach-device (every device at once) → launch-machine (every machine at once,
                   each right after its own attaches) → prepare-task → launch-task
    running:       the engine runs the job; the loop polls it
    tearing-down:  stop-task → detach-device (all at once) → destroy-machine (all at once)
    done:          the job gets the slice's outcome (completed, failed, cancelled, or re-queued)
    composed:      a composition (a slice with no job, a Redfish client's system) stops after launch-machine
                   and holds its machine and devices until its owner decomposes it (then tearing-down);
                   an update by its owner sends it back to composing: the devices added are attached and
                   those removed detached (each with its own step), then it is composed again

launch-machine and destroy-machine each have a fabric half (`FabricDriver.compose` / `decompose`): a
fabric of composable hardware composes the slice machine there (Redfish); others need nothing.

Each step is a row in `slice_steps`, written `started` before it runs and `done`/`failed` after, so
a controller killed at any moment resumes a slice exactly where it was: a `started` step is run
again, which is safe because every step is idempotent (the fabric and the engine accept a repeat).
Each step has its compensation (attach ↔ detach, launch-machine ↔ destroy-machine,
launch-task ↔ stop-task); a teardown compensates only the steps that were ever started. Steps
that do not depend on each other run in parallel, so composing a slice costs about its slowest
chain (one attach plus one boot), not the sum of all its steps (FlowOS-RM lost 32–45% of a short
MNIST job to running them one after another).
"""

from __future__ import annotations

import logging
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from disagg.engines.base import Engine, SliceMachine, SliceSpec, TaskRefused
from disagg.fabric.base import FabricDriver, FabricError, Mechanism
from disagg.model.states import JobState, RunState, SliceOutcome, SliceState, StepStatus
from disagg.store import (
    DropDevice,
    KeepHandle,
    ReleaseDevice,
    SliceAborted,
    SliceRecord,
    SliceRunning,
    StepEffect,
)
from disagg.store.compositions import UPDATE_FAILED
from disagg.store.ports import SlicePort

log = logging.getLogger(__name__)

COMPOSE_OPS = ("attach-device", "launch-machine", "prepare-task", "launch-task")
TEARDOWN_OPS = ("stop-task", "detach-device", "destroy-machine")
#: How many times a step that failed with a retryable error is tried in all.
STEP_TRIES = 3


class StepFailed(RuntimeError):
    def __init__(self, op: str, target: str, cause: BaseException) -> None:
        super().__init__(f"{op} {target} failed: {cause}")
        self.op, self.target, self.cause = op, target, cause


@dataclass(frozen=True)
class SlicePlan:
    """What a slice is made of, read back from its stored placement: the engine's view of it."""

    slice_id: str
    job_id: str
    spec: SliceSpec

    @property
    def machines(self) -> tuple[SliceMachine, ...]:
        return self.spec.machines


StepObserver = Callable[[str, float], None]


def _nothing(_op: str, _seconds: float) -> None:
    return None


def _always() -> None:
    """A controller without replicas may always act."""


def plan_of(record: SliceRecord) -> SlicePlan:
    """The engine's spec of a stored slice: one slice machine per task, the job's command."""
    machines = record.placement.machines
    spec = SliceSpec(
        slice_id=record.id,
        job_id=record.job_id or "",  # a composition has no job
        command=record.command,
        machines=machines,
        tasks=len(machines),
        env={"DISAGG_ATTEMPT": str(record.attempt)},
        tenant=record.tenant,
    )
    return SlicePlan(record.id, spec.job_id, spec)


class SliceRunner:
    """Drives slices through their steps on a fabric and an engine, recording every step."""

    def __init__(
        self,
        store: SlicePort,
        fabric: FabricDriver,
        engine: Engine,
        observe: StepObserver = _nothing,
        parallel: bool = True,
    ) -> None:
        self.store = store
        self.fabric = fabric
        self.engine = engine
        self.observe = observe
        self.parallel = parallel
        #: Raises unless this controller may act in the world now (replicas: the lease is still ours).
        self.may_act: Callable[[], None] = _always

    # --- one step --------------------------------------------------------------------------
    def step(
        self,
        slice_id: str,
        op: str,
        target: str,
        action: Callable[[], object],
        effect: Callable[[], StepEffect] | None = None,
        guard: SliceState | None = None,
    ) -> None:
        """Run one step: record it started, act, record it done (with `effect` in that transaction).

        A step already `done` is skipped. `guard` names the slice state the step belongs to: if the
        slice has left it (a cancel, a failure), the step does not start and SliceAborted is raised.
        `effect` is asked for after the action (it may carry what the action returned).
        """
        if not self.store.begin_step(slice_id, op, target, guard):
            return
        self.may_act()  # a leader paused since its last write must not act once another leads
        t0 = time.perf_counter()
        tries = 0
        while True:
            tries += 1
            try:
                action()
                break
            except FabricError as exc:
                if exc.retryable and tries < STEP_TRIES:
                    continue
                self.store.step_failed(slice_id, op, target, str(exc))
                raise StepFailed(op, target, exc) from exc
            except Exception as exc:
                self.store.step_failed(slice_id, op, target, str(exc))
                raise StepFailed(op, target, exc) from exc
        elapsed = time.perf_counter() - t0
        self.store.step_done(slice_id, op, target, tries - 1, effect() if effect is not None else None)
        self.observe(op, elapsed)

    def _all(self, calls: list[Callable[[], None]]) -> None:
        """Run independent calls at once (or one by one when `parallel` is off); re-raise the first error."""
        if not calls:
            return
        if not self.parallel or len(calls) == 1:
            for call in calls:
                call()
            return
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            futures = [pool.submit(c) for c in calls]
            errors = [f.exception() for f in futures]
        for e in errors:
            if e is not None:
                raise e

    # --- composing -------------------------------------------------------------------------
    def compose(self, slice_id: str) -> None:
        """Compose the slice and start its job. On failure, the slice turns to tearing-down."""
        record = self.store.load_slice(slice_id)
        plan = plan_of(record)
        composing = SliceState.COMPOSING
        try:
            leaving = self.store.removals(slice_id) if record.job_id is None else set()
            self._all([self._machine_chain(plan, record, m, leaving) for m in plan.machines])
            if record.job_id is None:  # a composition: its machine and devices are all it is made of
                self.store.slice_composed(slice_id)
                return
            handle: list[str] = []

            def prepare() -> None:
                handle.append(self.engine.prepare_task(plan.spec))

            self.step(slice_id, "prepare-task", plan.job_id, prepare, lambda: KeepHandle(handle[-1]), composing)
            h = self.store.load_slice(slice_id).handle or plan.slice_id
            self.step(slice_id, "launch-task", plan.job_id, lambda: self.engine.launch_task(h), SliceRunning,
                      composing)
        except SliceAborted:
            return
        except StepFailed as exc:
            if record.job_id is None and exc.op == "attach-device" and self._undo_update(record, exc):
                return
            # an engine that refuses the job (no user it may run as) refuses every retry too: it fails
            outcome = SliceOutcome.FAILED if isinstance(exc.cause, TaskRefused) else SliceOutcome.REQUEUE
            self.abort(slice_id, outcome, str(exc), failed_device=_failed_device(exc, self.fabric))

    def _undo_update(self, record: SliceRecord, exc: StepFailed) -> bool:
        """An attach of an update of a composed composition failed: detach and drop every device whose attach
        is not done, and compose it again as it was, its detail saying why (the update's task then ends in an
        exception). False for a composition that was never composed (it fails whole, as a job's slice does)."""
        machine = plan_of(record).machines[0]
        if ("launch-machine", machine.name) not in self.store.begun_steps(record.id):
            return False
        done = {s.target for s in self.store.slice_steps(record.id) if s.op == "attach-device"
                and s.status == StepStatus.DONE}
        self._all([self._detach(record.id, d, machine, SliceState.COMPOSING) for d in machine.devices
                   if d not in done])
        log.warning("composition %s: update undone: %s", record.id, exc)
        return self.store.slice_composed(record.id, f"{UPDATE_FAILED}: {exc}")

    def _machine_chain(self, plan: SlicePlan, record: SliceRecord, machine: SliceMachine,
                       leaving: set[str]) -> Callable[[], None]:
        """Attach the machine's devices (at once), then launch it: one chain per slice machine. `leaving`: the
        devices an update of a composition removes: detached instead (their release drops them from it)."""

        def chain() -> None:
            attaches = []
            for dev in machine.devices:
                placed = record.placement.device(dev)
                gbps = placed.network_gbps if placed is not None else 0.0
                if dev in leaving:
                    attaches.append(self._detach(plan.slice_id, dev, machine, SliceState.COMPOSING))
                else:
                    attaches.append(self._attach(plan.slice_id, dev, machine, dev in machine.remote, gbps))
            self._all(attaches)

            def launch() -> None:
                self.fabric.compose(machine)
                self.engine.launch_machine(plan.spec, machine)

            self.step(plan.slice_id, "launch-machine", machine.name, launch, guard=SliceState.COMPOSING)

        return chain

    def _attach(self, slice_id: str, device: str, machine: SliceMachine, remote: bool, gbps: float
                ) -> Callable[[], None]:
        """Attach one device, reserving on its path the bandwidth the placement gave it."""
        mechanism: Mechanism = "pcie-over-ethernet" if remote else "local"

        def attach() -> None:
            self.step(
                slice_id,
                "attach-device",
                device,
                lambda: self.fabric.attach(device, machine.host, mechanism, gbps, slice_machine=machine),
                guard=SliceState.COMPOSING,
            )

        return attach

    def abort(self, slice_id: str, outcome: SliceOutcome, detail: str, failed_device: str | None = None) -> bool:
        """Send a composing or running slice to teardown with `outcome`. False if it already left."""
        return self.store.abort_slice(slice_id, outcome, detail, failed_device)

    # --- tearing down ----------------------------------------------------------------------
    def teardown(self, slice_id: str) -> None:
        """Compensate every step that was ever started, then settle the job. Safe to repeat."""
        record = self.store.load_slice(slice_id)
        if record.state == SliceState.DONE:
            return
        plan = plan_of(record)
        begun = self.store.begun_steps(slice_id)
        handle = record.handle
        if handle is None and ("prepare-task", record.job_id) in begun:
            # prepared, but the controller died before it kept the handle: same spec, same handle
            # (a job the engine refused was never staged: there is nothing to stop)
            try:
                handle = self.engine.prepare_task(plan.spec)
            except TaskRefused:
                handle = None
        if handle is not None:
            stop = handle
            self.step(slice_id, "stop-task", plan.job_id, lambda: self.engine.cancel(stop))
            self._keep_exit(record, handle)
        detaches = [self._detach(slice_id, dev, m) for m in plan.machines for dev in m.devices
                    if ("attach-device", dev) in begun]
        self._all(detaches)
        self._all([self._destroy(plan, m) for m in plan.machines if ("launch-machine", m.name) in begun])
        self.store.settle_slice(slice_id)

    def _keep_exit(self, record: SliceRecord, handle: str) -> None:
        """Finished work is final: a job torn down by a fault (or preempted) whose tasks had all ended
        before it — their exit record written — takes the outcome of that record, not a second run.
        Asked after the stop: an engine records no exit for a task it killed, so a record seen now was
        written before the fault (a task ending between a look and the stop is caught too)."""
        if record.job_id is None or record.outcome not in (SliceOutcome.REQUEUE, SliceOutcome.PREEMPTED):
            return
        try:
            st = self.engine.status(handle)
        except Exception as exc:  # the engine cannot tell now: the fault's outcome stands
            log.warning("slice %s: no exit status from the engine (%s); the job is re-queued", record.id, exc)
            return
        if st.state is RunState.FAILED and _killed(st.exit_code):
            return  # ended by our own stop (SIGTERM or SIGKILL reached it, in a sandbox as 128 + n): re-queued
        if st.state in (RunState.COMPLETED, RunState.FAILED):
            self.store.ended_before_teardown(record.id, JobState(st.state), st.exit_code)

    def _detach(self, slice_id: str, device: str, machine: SliceMachine, guard: SliceState | None = None
                ) -> Callable[[], None]:
        """Detach one device: at teardown (released), or composing, an update's removal (dropped as well)."""

        def detach() -> None:
            self.step(slice_id, "detach-device", device,
                      lambda: self.fabric.detach(device, machine.host, slice_machine=machine),
                      lambda: DropDevice(device) if guard is not None else ReleaseDevice(device), guard)

        return detach

    def _destroy(self, plan: SlicePlan, machine: SliceMachine) -> Callable[[], None]:
        def destroy() -> None:
            self.engine.destroy_machine(plan.spec, machine)
            self.fabric.decompose(machine)

        def step() -> None:
            self.step(plan.slice_id, "destroy-machine", machine.name, destroy)

        return step


def _killed(code: int | None) -> bool:
    """An exit code that a stop's signal gives (a preemption's SIGTERM, the kill after its grace): the task did
    not end by itself, so its record is not the job's outcome (a chaos soak failed a preempted job on 143)."""
    return code is None or code < 0 or code in (128 + signal.SIGTERM, 128 + signal.SIGKILL)


def _failed_device(exc: StepFailed, fabric: FabricDriver) -> str | None:
    """The device to mark failed after a failed attach, when the fabric says it is broken."""
    if exc.op == "attach-device" and not fabric.healthy(exc.target):
        return exc.target
    return None


def fair_pick(waiting: Sequence[tuple[str, SliceState, str]], busy: Mapping[str, int], free: int
              ) -> list[tuple[str, SliceState, str]]:
    """Which of the slices `waiting` for a worker (id, state, tenant; oldest first) the `free` idle workers
    take now: one at a time, the oldest slice of the tenant with the fewest slices in the workers' hands
    (`busy`, counting those just taken), so that one tenant's 1,000 slices never queue ahead of another's
    one. The loop hands a worker no more than it can start at once (no backlog in the pool), so a slice
    of a tenant with none in flight waits at most for one worker's current slice to end."""
    queues: dict[str, deque[tuple[int, tuple[str, SliceState, str]]]] = {}
    for at, item in enumerate(waiting):
        queues.setdefault(item[2], deque()).append((at, item))
    load = dict(busy)
    out: list[tuple[str, SliceState, str]] = []
    while len(out) < free and queues:
        tenant = min(queues, key=lambda t: (load.get(t, 0), queues[t][0][0]))
        out.append(queues[tenant].popleft()[1])
        load[tenant] = load.get(tenant, 0) + 1
        if not queues[tenant]:
            del queues[tenant]
    return out

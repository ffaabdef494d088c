"""The life of jobs, slices and slice steps: their states, and the transitions allowed between them.

This is the one module that names the states; everything else uses these enums. They are
`StrEnum`s, so a state is stored, compared and serialised as its plain name (`"queued"`), and the
store, the API and the CLI show the same words.

The transition tables are the contract the controller's writers keep: the store's guarded
`transition()` refuses any move that is not in them (`IllegalTransition` names both states), and
every move it makes is recorded as an event (from, to, when, why) — the history an operator reads.

    job:    queued → composing → running → completed | failed | cancelled
            composing | running → queued   (re-queued: a device failed, the engine lost the job, or it
                                            was preempted for a tenant within its quota)
            queued | composing | running → cancelled | failed
            queued → held → queued | cancelled   (an admin's hold and release)
    slice:  composing → running → tearing-down → done;  composing → tearing-down
            composing → composed → tearing-down   (a composition with no job: a Redfish client's system)
            composed → composing                   (its owner adds or removes a device: composed again after)
    step:   started → done | failed;  started | failed → started   (run again after a crash or a retry)
    device health:  healthy ⇄ failed        (the fabric reports a failure; an operator's repair)
    device drain:   in-service ⇄ drained    (the operator's flag: kept out of new slices)
    device holder:  none → a slice → none   (held by one slice at a time: a compare-and-set, no event of its
                                            own — the slice's events say when it was placed and torn down)
    link:           up ⇄ down               (the fabric drops it; it comes back, or an operator repairs it)

A down link cuts off everything behind it (`model.cluster.Reach`): a device behind it is `unreachable`,
which every view and the policies' snapshot derive from the links, never store.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Any, Final, Literal


class JobState(StrEnum):
    """Where a job stands, as the API shows it."""

    QUEUED = "queued"
    COMPOSING = "composing"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: Kept out of placement by an admin (`disagg hold`) until released (`disagg release`): back to queued.
    HELD = "held"

    @property
    def final(self) -> bool:
        """A job in a final state never changes again."""
        return self in JOB_FINAL

    @property
    def live(self) -> bool:
        """A job with a slice that holds (or is about to hold) resources."""
        return self in (JobState.COMPOSING, JobState.RUNNING)


class SliceState(StrEnum):
    """Where a slice is in its life (FlowOS-RM's six operations, grouped)."""

    COMPOSING = "composing"
    RUNNING = "running"
    #: A slice with no job (a Redfish client composed it): it holds its machine and devices, composed,
    #: until its owner decomposes it (`DELETE /redfish/v1/Systems/{id}`); an update (a device added or
    #: removed) sends it back to composing for the steps it needs.
    COMPOSED = "composed"
    TEARING_DOWN = "tearing-down"
    DONE = "done"


class SliceOutcome(StrEnum):
    """What a slice's teardown does to its job once the slice is gone."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REQUEUE = "requeue"
    PREEMPTED = "preempted"   # stopped for a tenant within its quota: re-queued, whatever its retries


class StepStatus(StrEnum):
    """One recorded step of a slice: written `started` before it runs, `done` or `failed` after."""

    STARTED = "started"
    DONE = "done"
    FAILED = "failed"


class RunState(StrEnum):
    """Where an engine says a job is (the engine's view, which the loop polls)."""

    PENDING = "pending"
    HELD = "held"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"

    @property
    def ended(self) -> bool:
        """The job's process is gone (finished, stopped, or never to be found again)."""
        return self in (RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED, RunState.LOST)


class JobReason(StrEnum):
    """The controller's own reason codes for a job's state (a waiting job's code is otherwise the policy's
    `placement.decisions.Reason`)."""

    NEW = "new"                              # submitted; not yet looked at by a round
    CANCELLED = "cancelled"                  # by its owner
    EXIT_CODE = "exit-code"                  # it ended with a non-zero exit code
    REQUEUED = "requeued"                    # its slice was torn down under it (a failure); waiting again
    RETRIES_EXHAUSTED = "retries-exhausted"  # re-queued more often than its max_retries allow
    PREEMPTED = "preempted"                  # stopped to give back what its tenant borrowed; waiting again
    REFUSED = "refused"                      # the engine would not run it (no Unix user it may run as)
    UNPLACEABLE = "unplaceable"              # planning it made a scheduling round fail: set aside
    OVER_LIMIT = "over-limit"                # its request is above what its tenant may ever hold (a lowered limit)
    NEVER_FITS = "never-fits"                # its request is above what the cluster has in all (the spec shrank)
    HELD = "held"                            # an admin holds it out of placement (`disagg hold`)


class DeviceState(StrEnum):
    """The one word the API shows for a device: failed > unreachable > attached > drained > free."""

    FREE = "free"
    ATTACHED = "attached"
    DRAINED = "drained"
    UNREACHABLE = "unreachable"
    FAILED = "failed"

    @staticmethod
    def of(health: str, attached: bool, drained: bool, reachable: bool = True) -> DeviceState:
        """From the stored columns and the derived reachability: a failed device is failed whoever holds
        it; one behind a down link is unreachable (not free: nothing can use it)."""
        if health == Health.FAILED:
            return DeviceState.FAILED
        if not reachable:
            return DeviceState.UNREACHABLE
        if attached:
            return DeviceState.ATTACHED
        if drained:
            return DeviceState.DRAINED
        return DeviceState.FREE


class Health(StrEnum):
    """A device's health as the fabric reports it (drained is the operator's word, not health)."""

    HEALTHY = "healthy"
    FAILED = "failed"


class Drain(StrEnum):
    """Whether the operator keeps a device out of new slices (the slice holding it keeps it)."""

    IN_SERVICE = "in-service"
    DRAINED = "drained"


class LinkState(StrEnum):
    """A network link as the fabric reports it."""

    UP = "up"
    DOWN = "down"


#: A device's health in a cluster snapshot (the policies' view: drained and unreachable devices are not
#: offered either).
DeviceHealth = Literal["healthy", "failed", "drained", "unreachable"]
#: The snapshot's words (typed for the snapshot's dataclasses).
DEVICE_HEALTHY: Final[DeviceHealth] = "healthy"
DEVICE_FAILED: Final[DeviceHealth] = "failed"
DEVICE_DRAINED: Final[DeviceHealth] = "drained"
DEVICE_UNREACHABLE: Final[DeviceHealth] = "unreachable"

#: Jobs that will not change any more.
JOB_FINAL: frozenset[JobState] = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})
#: Slices that still hold resources.
LIVE_SLICE_STATES: tuple[SliceState, ...] = (SliceState.COMPOSING, SliceState.RUNNING, SliceState.COMPOSED,
                                             SliceState.TEARING_DOWN)
#: Slices whose owner may decompose them: a composition with no job, composing or composed.
DECOMPOSABLE_SLICE_STATES: tuple[SliceState, ...] = (SliceState.COMPOSING, SliceState.COMPOSED)
#: Slices that a failed device or link, a cancel or an engine's loss may send to teardown. (A composed slice
#: has no job to re-queue: it stays until its owner decomposes it, its blocks' health showing the failure.)
ACTIVE_SLICE_STATES: tuple[SliceState, ...] = (SliceState.COMPOSING, SliceState.RUNNING)

#: The job moves the controller may make: from → the states it may go to.
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.COMPOSING, JobState.CANCELLED, JobState.FAILED}),
    JobState.COMPOSING: frozenset({JobState.RUNNING, JobState.QUEUED, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.QUEUED}),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}

# --- hold and release (issue 25: an admin's actions) ---------------------------------------------------
#: A queued job may be held (kept out of placement); a held one is released to the queue, or cancelled.
JOB_TRANSITIONS[JobState.QUEUED] = JOB_TRANSITIONS[JobState.QUEUED] | {JobState.HELD}
JOB_TRANSITIONS[JobState.HELD] = frozenset({JobState.QUEUED, JobState.CANCELLED})
#: The jobs `disagg hold` may hold, and `disagg release` release.
HOLDABLE: tuple[JobState, ...] = (JobState.QUEUED,)
RELEASABLE: tuple[JobState, ...] = (JobState.HELD,)
# --- end of hold and release ---------------------------------------------------------------------------

#: The slice moves: from → the states it may go to.
SLICE_TRANSITIONS: dict[SliceState, frozenset[SliceState]] = {
    SliceState.COMPOSING: frozenset({SliceState.RUNNING, SliceState.COMPOSED, SliceState.TEARING_DOWN}),
    SliceState.RUNNING: frozenset({SliceState.TEARING_DOWN}),
    SliceState.COMPOSED: frozenset({SliceState.TEARING_DOWN, SliceState.COMPOSING}),
    SliceState.TEARING_DOWN: frozenset({SliceState.DONE}),
    SliceState.DONE: frozenset(),
}


#: A device's health moves (the store's `lifecycle.set_health` keeps them).
HEALTH_TRANSITIONS: dict[Health, frozenset[Health]] = {
    Health.HEALTHY: frozenset({Health.FAILED}),
    Health.FAILED: frozenset({Health.HEALTHY}),
}

#: A device's drain moves (the store's `lifecycle.set_drain` keeps them).
DRAIN_TRANSITIONS: dict[Drain, frozenset[Drain]] = {
    Drain.IN_SERVICE: frozenset({Drain.DRAINED}),
    Drain.DRAINED: frozenset({Drain.IN_SERVICE}),
}

#: A link's moves (the store's `lifecycle.set_links` keeps them).
LINK_TRANSITIONS: dict[LinkState, frozenset[LinkState]] = {
    LinkState.UP: frozenset({LinkState.DOWN}),
    LinkState.DOWN: frozenset({LinkState.UP}),
}


class IllegalTransition(ValueError):
    """A move the transition table does not allow; names what moved and both states."""

    def __init__(self, what: str, ident: str, src: str, dst: str) -> None:
        super().__init__(f"{what} {ident}: {src} → {dst} is not an allowed transition")
        self.what, self.ident, self.src, self.dst = what, ident, src, dst


def _check_move(what: str, ident: str, table: Mapping[Any, Collection[Any]], s: Any, d: Any) -> None:
    """Raise IllegalTransition unless `table` lets `what` go from `s` to `d` (staying put is no move)."""
    if s is not d and d not in table[s]:
        raise IllegalTransition(what, ident, s, d)


def check_job_move(job_id: str, src: JobState | str, dst: JobState | str) -> None:
    """Raise IllegalTransition unless a job may go from `src` to `dst` (staying put is no move)."""
    _check_move("job", job_id, JOB_TRANSITIONS, JobState(src), JobState(dst))


def check_slice_move(slice_id: str, src: SliceState | str, dst: SliceState | str) -> None:
    """Raise IllegalTransition unless a slice may go from `src` to `dst`."""
    _check_move("slice", slice_id, SLICE_TRANSITIONS, SliceState(src), SliceState(dst))


def check_health_move(device_id: str, src: Health | str, dst: Health | str) -> None:
    """Raise IllegalTransition unless a device's health may go from `src` to `dst`."""
    _check_move("device", device_id, HEALTH_TRANSITIONS, Health(src), Health(dst))


def check_drain_move(device_id: str, src: Drain | str, dst: Drain | str) -> None:
    """Raise IllegalTransition unless a device's drain may go from `src` to `dst`."""
    _check_move("device", device_id, DRAIN_TRANSITIONS, Drain(src), Drain(dst))


def check_link_move(link_id: str, src: LinkState | str, dst: LinkState | str) -> None:
    """Raise IllegalTransition unless a link may go from `src` to `dst`."""
    _check_move("link", link_id, LINK_TRANSITIONS, LinkState(src), LinkState(dst))


__all__ = [
    "ACTIVE_SLICE_STATES",
    "DECOMPOSABLE_SLICE_STATES",
    "DEVICE_DRAINED",
    "DEVICE_FAILED",
    "DEVICE_HEALTHY",
    "DEVICE_UNREACHABLE",
    "DRAIN_TRANSITIONS",
    "HEALTH_TRANSITIONS",
    "HOLDABLE",
    "JOB_FINAL",
    "JOB_TRANSITIONS",
    "LINK_TRANSITIONS",
    "LIVE_SLICE_STATES",
    "RELEASABLE",
    "SLICE_TRANSITIONS",
    "DeviceHealth",
    "DeviceState",
    "Drain",
    "Health",
    "IllegalTransition",
    "JobReason",
    "JobState",
    "LinkState",
    "RunState",
    "SliceOutcome",
    "SliceState",
    "StepStatus",
    "check_drain_move",
    "check_health_move",
    "check_job_move",
    "check_link_move",
    "check_slice_move",
]

"""What a policy returns: placements, and for every job left waiting, a reason.

Decisions are plain data, to be treated as read-only. (The per-device and per-task records are not
`frozen`: a frozen dataclass costs five times as much to build, and a round at 12,500 machines
builds tens of thousands of them.) The caller (simulator, controller, `disagg place`) applies them; a
placed job's tasks list the machine for cpu/memory and every device with whether it is remote and
the links its traffic crosses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar, overload


class Reason(StrEnum):
    """Why a job was not placed this round."""

    NEVER_FITS = "never-fits"          # larger than the cluster even when empty
    NO_CAPACITY = "no-capacity"        # not enough free cpu/memory on any machine now
    NO_DEVICES = "no-devices"          # not enough free devices of a kind (within reach)
    NO_BANDWIDTH = "no-bandwidth"      # devices free, but the links to them are full
    SLO_AT_RISK = "slo-at-risk"        # NA policy: the placement would miss the SLO; postponed
    CONTENTION = "contention"          # resources went to jobs ahead of it this round
    POSTPONED = "postponed"            # waiting costs less than the best placement (U arc chosen)
    BLOCKED = "blocked"                # FIFO head-of-line: a job ahead of it is waiting
    QUOTA = "quota"                    # its tenant may not take more now (quota + borrow, the cohort)
    RECLAIMING = "reclaiming"          # within its tenant's quota; waits for preempted borrowers to stop


@dataclass(slots=True)
class DeviceGrant:
    """One device a task gets. Never changed once made (`dataclasses.replace` makes another): a round
    hands out the local grants that earlier rounds on the same inventory made (`InventoryArrays.
    local_grants`). Not frozen only because a frozen dataclass is made about twice as slowly, and a
    round at 12,500 machines makes tens of thousands on a new inventory."""

    id: str
    kind: str
    remote: bool
    location: str
    path: tuple[str, ...] = ()
    network_gbps: float = 0.0


@dataclass(slots=True)
class TaskPlacement:
    task: str
    machine: str
    cpus: float
    memory_gb: float
    devices: tuple[DeviceGrant, ...] = ()
    expected_s: float | None = None


@dataclass(slots=True)
class JobPlacement:
    job: str
    tasks: tuple[TaskPlacement, ...]
    #: Set when the policy places the job knowing it will likely miss its SLO (the network-aware policy,
    #: when waiting cannot help or its patience is spent): why, in words. Counted in `Decisions.stats`.
    slo_at_risk: str | None = None

    @property
    def remote_devices(self) -> int:
        return sum(1 for t in self.tasks for d in t.devices if d.remote)


@dataclass(slots=True)
class Unplaced:
    job: str
    reason: Reason
    message: str


#: What a `_MadeWhenRead` makes: a collection read as it was made.
C = TypeVar("C", tuple["Unplaced", ...], dict[str, int])


class _MadeWhenRead(Generic[C]):
    """What a round leaves to be made when first read (`LaterReasons`, `LaterStats`): `make` is called
    once, at the first read, and dropped (with the round it reads)."""

    __slots__ = ("_made", "_make")

    def __init__(self, make: Callable[[], C], empty: C) -> None:
        self._make: Callable[[], C] | None = make
        self._made: C = empty

    def _all(self) -> C:
        if self._make is not None:
            self._made, self._make = self._make(), None  # (drops the round it read them off)
        return self._made

    def __len__(self) -> int:
        return len(self._all())

    __hash__ = None  # type: ignore[assignment]  # (compares by content, as what it makes)


class LaterReasons(_MadeWhenRead[tuple[Unplaced, ...]], Sequence[Unplaced]):
    """A round's waiting jobs with why, made when first read. A simulated round leaves a queue of
    thousands waiting, round after round, and the simulator reads why only of its last round's (what
    a stalled run reports): making them each round was about a twentieth of a flow policy's run. A
    caller that reads them each round (the controller, `disagg place`) asks for them at once
    (`placement.base.WaitingQueue.reasons_later` is False, the default), so its round's time counts them."""

    __slots__ = ()

    def __init__(self, make: Callable[[], tuple[Unplaced, ...]]) -> None:
        super().__init__(make, ())

    @overload
    def __getitem__(self, i: int) -> Unplaced: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Unplaced, ...]: ...

    def __getitem__(self, i: int | slice) -> Unplaced | tuple[Unplaced, ...]:
        return self._all()[i]

    def __iter__(self) -> Iterator[Unplaced]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)


class LaterStats(_MadeWhenRead[dict[str, int]], Mapping[str, int]):
    """A round's stats made when first read, as `LaterReasons` are, for the same caller (the simulator,
    which never reads them): what they count may be known only once the reasons are (a flow round's last
    re-admission: `placement.flow`)."""

    __slots__ = ()

    def __init__(self, make: Callable[[], dict[str, int]]) -> None:
        super().__init__(make, {})

    def __getitem__(self, key: str) -> int:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        return self._all() == (dict(other) if isinstance(other, Mapping) else other)


@dataclass(frozen=True, slots=True)
class Preemption:
    """A running job to stop (SIGTERM, a grace period, then the kill) so that a queued job whose
    tenant is within its nominal quota gets back what the running job's tenant borrowed."""

    job: str
    tenant: str
    for_job: str
    for_tenant: str
    #: What stopping it gives back, by resource (cpus, memory_gb, gpu, ...).
    reclaims: dict[str, float]

    @property
    def why(self) -> str:
        """The event a victim's history shows: `preempted by j-…`."""
        return f"preempted by {self.for_job} (tenant {self.for_tenant} reclaims its quota lent to {self.tenant})"


@dataclass(frozen=True)
class Decisions:
    """The result of one scheduling round. `timings` holds build_s, solve_s, decode_s, round_s; `stats`
    what the policy counts (a flow round: `admitted`, `iterations`, `slo_at_risk`). `preempted`: running
    jobs to stop for queued ones (only a round with tenants has any)."""

    policy: str
    placed: tuple[JobPlacement, ...] = ()
    #: In queue order. A tuple, or (a simulated round's) `LaterReasons`: made when read.
    unplaced: Sequence[Unplaced] = ()
    timings: dict[str, float] = field(default_factory=dict)
    stats: Mapping[str, int] = field(default_factory=dict)
    preempted: tuple[Preemption, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The shape `disagg place --json` prints (`preempted` only when a round preempts)."""
        out: dict[str, Any] = {
            "policy": self.policy,
            "placed": [
                {
                    "job": p.job,
                    "tasks": [
                        {
                            "task": t.task,
                            "machine": t.machine,
                            "cpus": t.cpus,
                            "memory_gb": t.memory_gb,
                            "devices": [
                                {"id": d.id, "kind": d.kind, "remote": d.remote, "location": d.location,
                                 "path": list(d.path), "network_gbps": d.network_gbps}
                                for d in t.devices
                            ],
                            "expected_s": t.expected_s,
                        }
                        for t in p.tasks
                    ],
                    **({"slo_at_risk": p.slo_at_risk} if p.slo_at_risk else {}),
                }
                for p in self.placed
            ],
            "unplaced": [{"job": u.job, "reason": u.message, "code": str(u.reason)} for u in self.unplaced],
            "timings": {k: round(v, 6) for k, v in self.timings.items()},
            "stats": dict(self.stats),
        }
        if self.preempted:
            out["preempted"] = [{"job": p.job, "tenant": p.tenant, "for_job": p.for_job, "for_tenant": p.for_tenant,
                                 "reclaims": dict(p.reclaims)} for p in self.preempted]
        return out

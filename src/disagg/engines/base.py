"""Where a slice's tasks run: the engine interface (one base class, one module per backend).

The controller drives an engine through the slice lifecycle:
launch-machine → prepare-task → launch-task → (poll) → destroy-machine.
Every method is idempotent: calling it again after a crash with the same arguments must not run
anything twice or fail because the first call already happened. Handles are plain strings that
the controller persists, so a restarted controller can ask the engine about them again.
"""

from __future__ import annotations

import os
import signal
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from typing import BinaryIO

from disagg.model import Allocation, Cluster, SliceMachine
from disagg.model.states import RunState

#: Where an engine says a job is (kept as a name for the engines' own signatures).
TaskState = RunState


@dataclass(frozen=True)
class SliceSpec:
    """What an engine needs to run a job on a composed slice."""

    slice_id: str
    job_id: str
    command: tuple[str, ...]
    machines: tuple[SliceMachine, ...]
    tasks: int = 1
    env: dict[str, str] = field(default_factory=dict)
    tenant: str = ""  # whose job it is: the engine runs it as that tenant's user


class TaskRefused(RuntimeError):
    """The engine will not run this job as asked (e.g. no Unix user it may run as): the job fails with
    this message instead of being retried."""


@dataclass(frozen=True)
class LogPage:
    """A page of a job's output: `text` from byte `offset` to `next_offset` of `size` bytes written so far."""

    text: str
    offset: int
    next_offset: int
    size: int


@dataclass(frozen=True)
class TaskStatus:
    state: TaskState
    exit_code: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class ForeignHolding:
    """Resources an engine's jobs that were not submitted by disagg hold (a user's direct `sbatch`).

    The controller keeps `machine`'s `cpus` and `devices` away from the policy while they are held.
    """

    job: str                        # the engine's id for the foreign job
    node: str                       # the engine's node name
    machine: str | None             # the cluster machine behind the node, when known
    cpus: float = 0.0
    devices: tuple[str, ...] = ()   # disagg device ids


def with_foreign_holdings(snapshot: Cluster, holdings: Iterable[ForeignHolding]) -> Cluster:
    """The snapshot with what foreign jobs hold added as allocations, so no policy offers it (no double
    booking). Holdings on nodes or devices the cluster does not know are left out. Without any, the
    snapshot as it is (its index of 50,000 devices by id is not built for nothing each round)."""
    holdings = list(holdings)
    if not holdings:
        return snapshot
    known = snapshot.device_by_id
    extra = []
    for h in holdings:
        devices = tuple(d for d in h.devices if d in known)
        machine = h.machine if h.machine in snapshot.machine_index else None
        cpus = h.cpus if machine is not None else 0.0
        if machine is None and devices and snapshot.machines:
            # devices held through a node disagg cannot map to a machine (e.g. pool devices on a slice
            # node a user pinned a job to): held all the same, charged to no machine's CPUs
            machine = snapshot.machines[0].name
        if machine is None or (not devices and not cpus):
            continue
        extra.append(Allocation(job=f"foreign:{h.job}", machine=machine, cpus=cpus, memory_gb=0.0,
                                devices=devices))
    return replace(snapshot, allocations=snapshot.allocations + tuple(extra)) if extra else snapshot


class Engine(ABC):
    """Runs jobs on slices. Implementations: `local` (processes), `slurm`; by name in `ENGINES`."""

    name: str = "base"

    @abstractmethod
    def launch_machine(self, spec: SliceSpec, machine: SliceMachine) -> None:
        """Make the slice machine exist for the engine with its devices (e.g. a Slurm node joins)."""

    @abstractmethod
    def destroy_machine(self, spec: SliceSpec, machine: SliceMachine) -> None:
        """Make it leave. Safe when it never joined or already left."""

    @abstractmethod
    def prepare_task(self, spec: SliceSpec) -> str:
        """Stage the job (held, not running) and return its handle. Same spec → same handle."""

    @abstractmethod
    def launch_task(self, handle: str) -> None:
        """Start (release) a prepared job. Safe to repeat."""

    @abstractmethod
    def status(self, handle: str) -> TaskStatus:
        """Where the job is. An unknown handle is `lost`."""

    @abstractmethod
    def cancel(self, handle: str) -> None:
        """Stop the job if it runs. Safe to repeat."""

    def terminate(self, handle: str, sig: signal.Signals = signal.SIGTERM) -> bool:
        """Ask the job's tasks to stop (SIGTERM, or `sig`: `disagg cancel --signal`), leaving them their
        grace period before `cancel` kills them (a preemption, a graceful cancel). False when this engine
        cannot signal a job: it is killed at the end of the grace period all the same. Safe to repeat."""
        return False

    @abstractmethod
    def logs(self, handle: str) -> str:
        """The job's output so far (stdout and stderr)."""

    def log_page(self, handle: str, offset: int, limit: int) -> LogPage:
        """At most `limit` bytes of the job's output from byte `offset` (engines that keep it in a file
        read only that part; this default reads it whole)."""
        return page_of(self.logs(handle).encode(), offset, limit)

    def notes(self) -> list[str]:
        """What the controller says about this engine at start (how jobs are isolated, what is missing)."""
        return []

    def forget(self, handle: str) -> None:  # noqa: B027 - an optional hook, not abstract
        """Remove what the engine keeps of an ended job (its files, its working directory). Safe to repeat."""

    # --- reconciliation after a restart (the controller calls these before its loop runs) ------
    def handles(self) -> list[str]:
        """The handles of the jobs this engine has records of (audits; reconciliation uses `orphans`)."""
        return []

    def recorded_handles(self) -> list[str]:
        """The jobs this engine records in the controller's state directory (at start, one the store does
        not know tells a lost store). Engines whose records live elsewhere (Slurm's) have none here."""
        return []

    #: Whether every job this engine runs is recorded in the controller's state directory from its
    #: prepare-task on (`recorded_handles`): then a state directory that knows none of a store's live
    #: slices is another controller's (`control.recovery`), not a new one's.
    records_in_state_dir: bool = False

    def orphans(self, live: Collection[str]) -> list[str]:
        """Handles of jobs this engine may still run (running, pending or held) that no live slice
        accounts for (`live`: the live slices' handles); reconciliation cancels them. Engines that keep
        nothing across a restart have none."""
        return []

    def adopt(self, machines: Collection[str]) -> list[str]:
        """Keep the slice machines of live slices (`machines`); every other slice machine this engine
        knows leaves. Returns those that left. Engines whose slice machines live only as long as the
        controller's process (local processes) have nothing to adopt."""
        return []

    def foreign_holdings(self) -> list[ForeignHolding]:
        """What jobs not submitted by disagg hold now. Engines that run only disagg's jobs hold nothing."""
        return []

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Release what the engine holds (connections, threads). Running jobs are left alone."""


def page_of(data: bytes, offset: int, limit: int) -> LogPage:
    """Bytes `offset`..`offset+limit` of `data` as text, ending on a whole UTF-8 character (a character cut
    at the page's end starts the next page instead, unless the page would then be empty)."""
    start = min(max(offset, 0), len(data))
    chunk = data[start:start + max(limit, 0)]
    chunk = chunk[:_utf8_whole(chunk) or len(chunk)]
    return LogPage(chunk.decode("utf-8", errors="replace"), start, start + len(chunk), len(data))


def file_page(f: BinaryIO, offset: int, limit: int) -> LogPage:
    """`page_of` for an open file: reads only the page, not the whole file (a log may be large)."""
    size = os.fstat(f.fileno()).st_size
    start = min(max(offset, 0), size)
    f.seek(start)
    chunk = f.read(max(limit, 0))
    page = page_of(chunk, 0, len(chunk))
    return LogPage(page.text, start, start + page.next_offset, max(size, start + len(chunk)))


def _utf8_whole(chunk: bytes) -> int:
    """The length of `chunk` without a UTF-8 character cut off at its end."""
    for back in range(1, min(4, len(chunk)) + 1):
        lead = chunk[-back]
        if lead & 0xC0 != 0x80:  # the first byte of the last character (or an ASCII byte)
            need = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
            return len(chunk) - back if need > back else len(chunk)
    return len(chunk)


__all__ = [
    "Engine",
    "ForeignHolding",
    "LogPage",
    "SliceMachine",
    "SliceSpec",
    "TaskRefused",
    "TaskState",
    "TaskStatus",
    "file_page",
    "page_of",
    "with_foreign_holdings",
]

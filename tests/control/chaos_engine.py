"""An in-memory engine for the stateful chaos machine: a job runs until the test says it ended.

Its records outlive a controller (`FakeRuns` is shared by every engine built on the same state
directory), as the local engine's files do: a restarted controller finds what ran and what ended.
Every launch is recorded per job, so that the machine can tell a finished run that started again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from disagg.engines.base import Engine, SliceSpec, TaskStatus
from disagg.engines.registry import ENGINES, EngineOptions
from disagg.model import SliceMachine
from disagg.model.states import RunState

NAME = "chaos-fake"


@dataclass
class FakeRun:
    """One staged job: its spec, where it is (pending: prepared, running, completed, failed, cancelled)."""

    spec: SliceSpec
    state: RunState = RunState.PENDING
    exit_code: int | None = None


@dataclass
class FakeRuns:
    """What every engine on one state directory knows: the runs by handle, the launches per job."""

    runs: dict[str, FakeRun] = field(default_factory=dict)
    launches: dict[str, list[str]] = field(default_factory=dict)
    #: Jobs whose run ended with exit 0 (the exit record was written): (job → its handle).
    finished: dict[str, str] = field(default_factory=dict)

    def running(self) -> list[str]:
        return sorted(h for h, r in self.runs.items() if r.state == RunState.RUNNING)


#: The shared records, per state directory.
WORLDS: dict[Path, FakeRuns] = {}


class FakeEngine(Engine):
    """Engine over `FakeRuns`: nothing runs; `end(handle, code)` writes a run's exit record."""

    name = NAME

    def __init__(self, world: FakeRuns) -> None:
        self.world = world

    def launch_machine(self, spec: SliceSpec, machine: SliceMachine) -> None:
        pass

    def destroy_machine(self, spec: SliceSpec, machine: SliceMachine) -> None:
        pass

    def prepare_task(self, spec: SliceSpec) -> str:
        self.world.runs.setdefault(spec.slice_id, FakeRun(spec))
        return spec.slice_id

    def launch_task(self, handle: str) -> None:
        run = self.world.runs[handle]
        if run.state == RunState.PENDING:
            run.state = RunState.RUNNING
            self.world.launches.setdefault(run.spec.job_id, []).append(handle)

    def status(self, handle: str) -> TaskStatus:
        run = self.world.runs.get(handle)
        if run is None:
            return TaskStatus(RunState.LOST, detail="unknown handle")
        return TaskStatus(run.state, run.exit_code)

    def cancel(self, handle: str) -> None:
        run = self.world.runs.get(handle)
        if run is not None and not run.state.ended:  # an exit record, once written, stays
            run.state = RunState.CANCELLED

    def end(self, handle: str, code: int) -> None:
        """The run's tasks exit with `code` (its exit record is written)."""
        run = self.world.runs[handle]
        run.state, run.exit_code = (RunState.COMPLETED if code == 0 else RunState.FAILED), code
        if code == 0:
            self.world.finished[run.spec.job_id] = handle

    def logs(self, handle: str) -> str:
        return ""

    def handles(self) -> list[str]:
        return sorted(self.world.runs)

    def orphans(self, live: Collection[str]) -> list[str]:
        return sorted(h for h, r in self.world.runs.items() if not r.state.ended and h not in live)


def _fake(opts: EngineOptions) -> Engine:
    return FakeEngine(WORLDS.setdefault(opts.state_dir.resolve(), FakeRuns()))


ENGINES.setdefault(NAME, _fake)

"""A small exhaustive search for one job on an idle cluster: the liveness rule's last resort.

The policies decide with heuristics — phases one device kind at a time, tasks one at a time — that can
miss a placement on a tight cluster (a first kind's remote device uses the uplink a second kind then
needs). Where nothing else runs or waits, waiting cannot help, so a policy that found nothing asks
this search: tasks to machines (in order, each task on a machine at or after the previous one's: the
tasks are alike), each task's devices of each kind from its own machine first, then from other
locations in every split its links can carry, backtracking. `budget` bounds the steps tried, so a
large cluster costs at most that (the heuristics find those placements in practice).

Pure: reserves in a `FreeState` and gives back what a branch took.
"""

from __future__ import annotations

from collections.abc import Iterator

from disagg.model import Job
from disagg.placement.decisions import DeviceGrant
from disagg.placement.state import FreeState, Journal

#: Steps (a machine or a device location tried) the search may take before it gives up.
BUDGET = 20_000


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self) -> bool:
        self.left -= 1
        return self.left >= 0


def search(state: FreeState, job: Job, gbps: float, local_only: bool, budget: int = BUDGET
           ) -> list[tuple[int, tuple[DeviceGrant, ...]]] | None:
    """Every task of `job` on a machine with its devices (only its own machine's when `local_only`), as
    (machine, grants) per task, taken in `state`; None (nothing taken) when there is no such placement
    or the budget ran out first."""
    steps = _Budget(budget)
    journal = Journal()
    found = _tasks(state, job, gbps, local_only, steps, journal, 0, 0)
    if found is None:
        state.rollback(journal)
    return found


def _tasks(state: FreeState, job: Job, gbps: float, local_only: bool, steps: _Budget, journal: Journal,
           task: int, first: int) -> list[tuple[int, tuple[DeviceGrant, ...]]] | None:
    t = job.tasks
    if task == t.count:
        return []
    for m in range(first, state.n_machines):
        if not steps.spend():
            return None
        here = Journal()
        if not state.take_cpu(m, t.cpus, t.memory_gb, here):
            continue
        for grants in _devices(state, job, gbps, local_only, steps, here, m, list(t.kinds), ()):
            rest = _tasks(state, job, gbps, local_only, steps, here, task + 1, m)
            if rest is not None:
                _keep(journal, here)
                return [(m, grants), *rest]
        state.rollback(here)
    return None


def _devices(state: FreeState, job: Job, gbps: float, local_only: bool, steps: _Budget, journal: Journal,
             m: int, kinds: list[str], got: tuple[DeviceGrant, ...]) -> Iterator[tuple[DeviceGrant, ...]]:
    """Each way to give the task on `m` its devices of `kinds` (taken in `journal` while the caller looks
    further; given back before the next)."""
    if not kinds:
        yield got
        return
    kind, rest = kinds[0], kinds[1:]
    t = job.tasks
    model = t.models.get(kind)
    mark = _mark(journal)
    local: list[DeviceGrant] = []
    for _ in range(t.wants(kind)):
        dev = state.take_device(kind, m, model, journal)
        if dev is None:
            break
        local.append(DeviceGrant(state.cluster.devices[dev].id, kind, False, state.cluster.locations[m]))
    need = t.wants(kind) - len(local)
    if need == 0 or not local_only:
        others = [loc for loc in range(len(state.loc_rack)) if loc != m and state.free_count[kind][loc] > 0]
        for remote in _remote(state, job, gbps, steps, journal, m, kind, model, need, others, 0):
            yield from _devices(state, job, gbps, local_only, steps, journal, m, rest, got + tuple(local) + remote)
    _undo(state, journal, mark)


def _remote(state: FreeState, job: Job, gbps: float, steps: _Budget, journal: Journal, m: int, kind: str,
            model: str | None, need: int, others: list[int], at: int) -> Iterator[tuple[DeviceGrant, ...]]:
    """Each way to take `need` remote devices of `kind` for a task on `m` from `others[at:]`, as many
    from each location as its links carry, most first."""
    if need == 0:
        yield ()
        return
    if at == len(others) or not steps.spend():
        return
    loc = others[at]
    mark = _mark(journal)
    taken: list[DeviceGrant] = []
    path = state.path(m, loc)
    while len(taken) < need and state.take_traffic(path, gbps, journal):
        dev = state.take_device(kind, loc, model, journal)
        if dev is None:
            state.undo_last_traffic(journal)
            break
        taken.append(DeviceGrant(state.cluster.devices[dev].id, kind, True, state.cluster.locations[loc],
                                 tuple(state.link_names[p] for p in path), gbps))
    # Most from this location first, then one fewer each time (the rest from the locations after it).
    for count in range(len(taken), -1, -1):
        _undo(state, journal, _mark_after(mark, count))
        for more in _remote(state, job, gbps, steps, journal, m, kind, model, need - count, others, at + 1):
            yield tuple(taken[:count]) + more
    _undo(state, journal, mark)


def _mark(journal: Journal) -> tuple[int, int, int]:
    return len(journal.taken_cpu), len(journal.taken_devices), len(journal.taken_traffic)


def _mark_after(mark: tuple[int, int, int], count: int) -> tuple[int, int, int]:
    """The journal's length after `count` remote devices (one device and one path each) were taken."""
    return mark[0], mark[1] + count, mark[2] + count


def _undo(state: FreeState, journal: Journal, mark: tuple[int, int, int]) -> None:
    """Give back what the journal took after `mark`."""
    tail = Journal(journal.taken_cpu[mark[0]:], journal.taken_devices[mark[1]:], journal.taken_traffic[mark[2]:])
    del journal.taken_cpu[mark[0]:], journal.taken_devices[mark[1]:], journal.taken_traffic[mark[2]:]
    state.rollback(tail)


def _keep(journal: Journal, here: Journal) -> None:
    journal.taken_cpu += here.taken_cpu
    journal.taken_devices += here.taken_devices
    journal.taken_traffic += here.taken_traffic

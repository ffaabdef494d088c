"""The queue side of a round: order by total wait, then take the jobs that fit in what is free.

DRMaestro (Alg. 1): "Only the jobs that can fit in the currently available resources are gathered
from the queue, and to prevent starvation, the queue is sorted by the total wait time."
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
from numpy.typing import NDArray

from disagg.model import Job
from disagg.placement.decisions import Reason
from disagg.placement.state import FreeState


def order_queue(queue: Sequence[Job], now: float) -> list[Job]:
    """Longest total wait first; ties by submit time, then name (deterministic). The total wait
    `now - submit_s` falls as `submit_s` rises, so this is the order of (submit_s, name); `now` is
    kept in the signature because the order is defined by the wait."""
    return sorted(queue, key=attrgetter("submit_s", "name"))


@dataclass(frozen=True)
class Refusal:
    reason: Reason
    message: str


def task_fit_counts(state: FreeState, cpus: float, mem: float) -> NDArray[np.int64]:
    """How many tasks of this shape each machine can take now (cpu and memory only)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        by_cpu = np.floor((state.cpu + 1e-9) / cpus)
        by_mem = np.floor((state.mem + 1e-9) / mem)
    return np.maximum(np.minimum(by_cpu, by_mem), 0).astype(np.int64)


def admit(state: FreeState, ordered: Sequence[Job]) -> tuple[list[Job], dict[str, Refusal]]:
    """Split the ordered queue into the jobs this round considers and those refused, with why.

    A job is considered when (a) one of its tasks fits on some machine now, its gang fits in the
    sum of what machines can take, and (b) the cluster-wide free cpus, memory and devices left after
    the jobs ahead of it cover it. Necessary, not sufficient: the flow decides the rest.

    A long queue on a full cluster refuses thousands of jobs for the same few reasons, so refusals
    are made once per distinct reason and shared.
    """
    left_cpu = float(state.cpu.sum())
    left_mem = float(state.mem.sum())
    left_dev: dict[tuple[str, str | None], int] = {}
    free_dev: dict[tuple[str, str | None], int] = {}
    shape_fit: dict[tuple[float, float], tuple[int, float, float]] = {}
    said: dict[tuple[object, ...], Refusal] = {}
    # The devices a request needs in all, per (kind, model): requests repeat along a queue.
    requests: dict[tuple[object, ...], list[tuple[str, int, tuple[str, str | None]]]] = {}
    taken: list[Job] = []
    refused: dict[str, Refusal] = {}
    # What is left moves only when a job is taken, so until then a job asking for what an earlier one
    # was refused for is refused the same way (a queue on a full cluster is mostly such jobs).
    last: dict[tuple[object, ...], tuple[int, Refusal]] = {}
    asks: dict[int, tuple[object, ...]] = {}  # by id(): jobs often share one request object
    for job in ordered:
        t = job.tasks
        ask = asks.get(id(t))
        if ask is None:
            ask = asks[id(t)] = (t.count, t.cpus, t.memory_gb, tuple(t.devices.items()), tuple(t.models.items()))
        seen = last.get(ask)
        if seen is not None and seen[0] == len(taken):
            refused[job.name] = seen[1]
            continue
        shape = (t.cpus, t.memory_gb)
        if shape not in shape_fit:
            fits = task_fit_counts(state, t.cpus, t.memory_gb)
            shape_fit[shape] = (int(fits.sum()), float(state.cpu.max(initial=0)), float(state.mem.max(initial=0)))
        total_fit, best_cpu, best_mem = shape_fit[shape]
        need_cpu, need_mem = t.count * t.cpus, t.count * t.memory_gb
        wanted = requests.get(ask)
        if wanted is None:
            wanted = requests[ask] = [(kind, n * t.count, (kind, t.models.get(kind)))
                                      for kind, n in t.devices.items() if n > 0]
        short = None
        if total_fit < t.count:
            key: tuple[object, ...] = ("fit", t.count, shape)
            if key not in said:
                said[key] = Refusal(Reason.NO_CAPACITY, (
                    f"needs {t.count} task(s) of {t.cpus:g} cpus and {t.memory_gb:g} GB each on machines; "
                    f"{total_fit} fit now (most free on one machine: {best_cpu:g} cpus, {best_mem:g} GB)"))
            short = said[key]
        elif need_cpu > left_cpu + 1e-9 or need_mem > left_mem + 1e-9:
            key = ("left", need_cpu, need_mem, left_cpu, left_mem)
            if key not in said:
                said[key] = Refusal(Reason.CONTENTION, (
                    f"needs {need_cpu:g} cpus and {need_mem:g} GB; {left_cpu:g} cpus and {left_mem:g} GB "
                    f"are left after the jobs ahead of it in the queue"))
            short = said[key]
        else:
            for kind, need, dev in wanted:
                if dev not in left_dev:
                    left_dev[dev] = free_dev[dev] = state.total_free(kind, dev[1])
                if need > left_dev[dev]:
                    key = ("dev", need, dev, left_dev[dev])
                    if key not in said:
                        what = f"{kind} ({dev[1]})" if dev[1] else kind
                        total = free_dev[dev]
                        said[key] = Refusal(Reason.NO_DEVICES if need > total else Reason.CONTENTION,
                                            f"needs {need} {what}; {total} free, {left_dev[dev]} left after the "
                                            f"jobs ahead of it in the queue")
                    short = said[key]
                    break
        if short is not None:
            refused[job.name] = short
            last[ask] = (len(taken), short)
            continue
        left_cpu -= need_cpu
        left_mem -= need_mem
        for _, need, dev in wanted:
            left_dev[dev] -= need
        taken.append(job)
    return taken, refused

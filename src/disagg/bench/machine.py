"""How fast this machine runs the kind of code the benchmarks time, printed beside their figures.

The speed targets are absolute (simulated seconds per wall second, a round's milliseconds), but the
machines these benchmarks run on are not all alike: the same commit's `bench sim paper` gave drmaestro-na
1,029-1,068 simulated s per wall s on one session's machine and 390-600 on the next one's
(docs/benchmarks.md, "seventh session"). A figure is only comparable with another next to a measure of
the machine it ran on. Two fixed workloads stand for what the simulator and a round pay for:

- `python_ms`: a loop of dictionary reads, float arithmetic and comparisons, list appends and heap pushes
  (the engine's re-planning and the decoders are made of these);
- `numpy_call_us`: one small numpy call on 128 elements (a simulated round's phases make thousands; their
  fixed cost, not the work, is most of it).

Each is the best of `repeat` runs (the others only differ by what else the machine was doing)."""

from __future__ import annotations

import heapq
import os
import time

import numpy as np

#: Iterations of the Python loop (some 40-50 ms on the machine it was written on).
PYTHON_STEPS = 200_000
#: Numpy calls timed per run, on arrays of `NUMPY_SIZE` elements.
NUMPY_CALLS = 3_000
NUMPY_SIZE = 128


def _python_loop(steps: int) -> float:
    """The Python workload; returns a value that depends on every step (so none can be skipped)."""
    used = {f"link{i}": float(i % 7) for i in range(64)}
    names = list(used)
    heap: list[tuple[float, int]] = []
    total = 0.0
    for i in range(steps):
        share = (used[names[i & 63]] - 0.5) / 3.0
        load = share if share > 0.0 else 0.0
        total += 1.0 + 0.3 * (1.0 if load > 1.0 else load)
        if i & 15 == 0:
            heapq.heappush(heap, (total, i))
    return total + len(heap)


def _numpy_calls(calls: int) -> int:
    """The numpy workload: `calls` small calls, alternating an element-wise op and a reduction."""
    a = np.arange(NUMPY_SIZE, dtype=np.int64)
    b = a[::-1].copy()
    out = 0
    for _ in range(calls // 2):
        c = np.minimum(a, b)
        out += int(c.sum())
    return out


def machine_speed(repeat: int = 5) -> dict[str, float | int]:
    """This machine's speed on the two workloads (see the module docstring), the cores it has and the
    1-minute load average when measured."""
    python_s = numpy_s = float("inf")
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        _python_loop(PYTHON_STEPS)
        python_s = min(python_s, time.perf_counter() - start)
        start = time.perf_counter()
        _numpy_calls(NUMPY_CALLS)
        numpy_s = min(numpy_s, time.perf_counter() - start)
    return {"python_ms": round(python_s * 1e3, 1), "numpy_call_us": round(numpy_s / NUMPY_CALLS * 1e6, 2),
            "cores": os.cpu_count() or 0, "load_avg_1m": round(os.getloadavg()[0], 2)}

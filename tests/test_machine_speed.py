"""`bench.machine`: the yardstick printed beside the benchmarks' figures measures work that is done."""

from __future__ import annotations

import time

import pytest

from disagg.bench import machine
from disagg.bench.machine import _numpy_calls, _python_loop, machine_speed


def test_the_workloads_depend_on_every_step() -> None:
    # (A workload whose result ignored its steps could be cut short without the yardstick noticing.)
    assert _python_loop(1_000) != _python_loop(2_000)
    assert _numpy_calls(10) != _numpy_calls(20)


def test_more_work_reads_as_more_time(monkeypatch: pytest.MonkeyPatch) -> None:
    start = time.perf_counter()
    plain = machine_speed(repeat=3)
    took_ms = (time.perf_counter() - start) * 1e3
    assert 0 < plain["python_ms"] < took_ms and 0 < plain["numpy_call_us"] * machine.NUMPY_CALLS / 1e3 < took_ms
    assert plain["cores"] >= 1
    # Ten times the loop's steps take longer (best of three each: a shared machine's noise is not 10x).
    monkeypatch.setattr(machine, "PYTHON_STEPS", machine.PYTHON_STEPS * 10)
    assert machine_speed(repeat=3)["python_ms"] > 2 * plain["python_ms"]

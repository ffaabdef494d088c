"""Decisions as Rich tables (pure: builds renderables, prints nothing)."""

from __future__ import annotations

from rich.table import Table

from disagg.display import count
from disagg.placement.decisions import Decisions

#: Columns of names a user copies (jobs, tasks, machines, devices): never cut, never wrapped.
_WHOLE = ("job", "task", "machine", "devices")


def decisions_table(decisions: Decisions) -> list[Table]:
    """The placed jobs (one row per task), the waiting ones with why, and the round's timings.

    Names are whole at any width (`_WHOLE`); printed to a pipe (`disagg.cli.tables.console`) a table has
    its natural width, so two tasks of a job never become the same line."""
    placed = Table(title=f"{decisions.policy}: placed {count(len(decisions.placed), 'job')}", title_justify="left")
    for col in ("job", "task", "machine", "cpus", "memory GB", "devices", "expected s"):
        placed.add_column(col, justify="right" if col in ("cpus", "memory GB", "expected s") else "left",
                          no_wrap=col in _WHOLE)
    for p in decisions.placed:
        for t in p.tasks:
            devices = ", ".join(f"{d.id}{' (remote)' if d.remote else ''}" for d in t.devices) or "-"
            exp = f"{t.expected_s:.1f}" if t.expected_s is not None else "-"
            placed.add_row(p.job, t.task, t.machine, f"{t.cpus:g}", f"{t.memory_gb:g}", devices, exp)
    tables = [placed]
    if decisions.unplaced:
        waiting = Table(title=f"{decisions.policy}: waiting {count(len(decisions.unplaced), 'job')}",
                        title_justify="left")
        waiting.add_column("job", no_wrap=True)
        waiting.add_column("why")
        waiting.add_column("reason")
        for u in decisions.unplaced:
            waiting.add_row(u.job, str(u.reason), u.message)
        tables.append(waiting)
    timings = decisions.timings
    if timings:
        timing = Table(title="timings (s)", title_justify="left")
        for k in timings:
            timing.add_column(k, justify="right")
        timing.add_row(*(f"{v:.4f}" for v in timings.values()))
        tables.append(timing)
    return tables

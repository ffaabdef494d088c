"""Numbers and times as people read them, shared by the CLI's tables and the dashboard's pages."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime


def duration(seconds: float | None) -> str:
    """A duration: 0.42 s, 12 s, 3 min 05 s, 2 h 10 min, 3 d 4 h (empty for None)."""
    if seconds is None:
        return ""
    s = max(0.0, float(seconds))
    if s < 10:
        return f"{s:.2f} s" if s < 1 else f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    if s < 86400:
        return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"
    return f"{int(s // 86400)} d {int(s % 86400 // 3600)} h"


def clock(at: float | None, now: float | None = None) -> str:
    """A moment in UTC: the time of day, with the date when it is not the day of `now` (default: today)."""
    if at is None:
        return ""
    moment = datetime.fromtimestamp(at, UTC)
    today = datetime.fromtimestamp(now, UTC).date() if now is not None else datetime.now(UTC).date()
    return moment.strftime("%H:%M:%S" if moment.date() == today else "%Y-%m-%d %H:%M:%S") + " UTC"


def number(value: float | None, digits: int = 3) -> str:
    """A number without needless digits (12, 0.5, 1.25); empty for None."""
    return "" if value is None else f"{value:.{digits}g}"


__all__ = ["clock", "duration", "number"]


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`1 job`, `2 jobs`, `no jobs`: a number of things, in words that agree with it."""
    many = plural or noun + "s"
    if n == 0:
        return f"no {many}"
    return f"{n} {noun if n == 1 else many}"


def few(names: Sequence[str], shown: int = 5) -> str:
    """`a, b, c, …`: the first `shown` of some names, and an ellipsis where there are more (a log line or a
    message that names what it counts without listing thousands)."""
    return ", ".join(names[:shown]) + (", …" if len(names) > shown else "")

"""SQLite's write lock held by another process: a write waits for it in short polls, then in SQLite's
busy handler, and lands once it is free (`store.base._poll_write_lock`)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

import disagg.store.base as base
from disagg.store import Store
from disagg.store.models import JobRow


def _held_for(path: Path, seconds: float, taken: threading.Event) -> threading.Thread:
    """Another process's writer, as SQLite sees it: a connection of its own that holds the write lock."""
    def hold() -> None:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        taken.set()
        time.sleep(seconds)
        other.execute("COMMIT")
        other.close()

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


@pytest.mark.parametrize("poll_s", [base.POLL_WRITE_LOCK_S, 0.05])  # (0.05: the busy handler waits the rest)
def test_a_write_waits_for_another_writers_lock_and_lands_after_it(tmp_path: Path, poll_s: float,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "POLL_WRITE_LOCK_S", poll_s)
    path = tmp_path / "disagg.db"
    store = Store(f"sqlite:///{path}")
    store.migrate()
    try:
        taken = threading.Event()
        other = _held_for(path, 0.3, taken)
        assert taken.wait(10)
        started = time.monotonic()
        with store.write_core(fenced=False) as conn:
            waited = time.monotonic() - started
            conn.execute(JobRow.__table__.delete())  # type: ignore[attr-defined]
            # the connection's busy handler is back at its full wait for the statements that follow
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == base.BUSY_TIMEOUT_MS
        other.join(10)
        assert waited >= 0.2  # it waited for the lock (it did not write beside it)
        with store.read_core() as conn:
            assert conn.execute(select(JobRow.__table__.c.id)).all() == []  # type: ignore[attr-defined]
    finally:
        store.close()


class _Raw:
    """A DB-API connection whose `BEGIN IMMEDIATE` fails with `errors`, one per try, then succeeds."""

    def __init__(self, errors: list[str]) -> None:
        self.errors, self.statements = errors, []

    def execute(self, sql: str) -> None:
        self.statements.append(sql)
        if sql == "BEGIN IMMEDIATE" and self.errors:
            raise sqlite3.OperationalError(self.errors.pop(0))


def test_the_poll_retries_only_a_taken_lock_and_always_restores_the_busy_handler() -> None:
    locked = _Raw(["database is locked"] * 3)
    assert base._poll_write_lock(locked)
    assert locked.statements.count("BEGIN IMMEDIATE") == 4
    other = _Raw(["disk I/O error"])  # not a lock: left to SQLAlchemy, which raises it wrapped
    assert not base._poll_write_lock(other)
    assert other.statements.count("BEGIN IMMEDIATE") == 1
    for raw in (locked, other):
        assert raw.statements[0] == "PRAGMA busy_timeout=0"
        assert raw.statements[-1] == f"PRAGMA busy_timeout={base.BUSY_TIMEOUT_MS}"

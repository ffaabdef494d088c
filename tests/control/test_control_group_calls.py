"""`SliceOps.write_grouped` (`store/batch.GroupCalls`): the slice workers' short write transactions share
SQLite's single writer a group at a time; each caller still hears only of its own call, after commit."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import Connection, event, text

from disagg.store import Store
from disagg.store.batch import GroupCalls
from disagg.store.lease import FencedWrite
from disagg.store.pgtemp import TempPostgres


def _store(url: str) -> Store:
    store = Store(url)
    store.migrate()
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER NOT NULL)"))
    return store


def _rows(store: Store) -> list[int]:
    with store.read_core() as conn:
        return sorted(int(x) for (x,) in conn.execute(text("SELECT x FROM t")))


def _insert(x: int, fail: bool = False):  # type: ignore[no-untyped-def]
    def call(conn: Connection) -> int:
        conn.execute(text("INSERT INTO t (x) VALUES (:x)"), {"x": x})
        if fail:
            raise ValueError(f"call {x} refused")
        return x * 10
    return call


def _held_writer(store: Store) -> tuple[threading.Event, threading.Thread]:
    """A first call that holds the group writer until the event is set: the calls made meanwhile queue."""
    entered, release = threading.Event(), threading.Event()

    def hold(conn: Connection) -> None:
        entered.set()
        assert release.wait(30)

    first = threading.Thread(target=store.write_grouped, args=(hold,))
    first.start()
    assert entered.wait(30)
    return release, first


def _writer(store: Store) -> GroupCalls:
    assert store._grouped is not None  # (SQLite: the store's group writer)
    return store._grouped


def _queued(store: Store, n: int) -> None:
    """Wait until `n` calls wait in the group writer's queue."""
    for _ in range(3000):
        if _writer(store)._queue.qsize() >= n:
            return
        threading.Event().wait(0.01)
    raise AssertionError("the calls did not queue")


def test_calls_of_many_threads_share_transactions_and_each_gets_its_own_result(tmp_path: Path) -> None:
    store = _store(f"sqlite:///{tmp_path / 'd.db'}")
    commits: list[int] = []
    event.listen(store.engine, "commit", lambda _conn: commits.append(1))
    try:
        release, first = _held_writer(store)
        with ThreadPoolExecutor(max_workers=40) as pool:
            futures = [pool.submit(store.write_grouped, _insert(x)) for x in range(40)]
            _queued(store, 40)
            commits.clear()
            release.set()
            results = [f.result(timeout=30) for f in futures]
        first.join()
        assert results == [x * 10 for x in range(40)]  # each caller gets what its own call returned
        assert _rows(store) == list(range(40))
        assert len(commits) == 2  # the held call's own, then one transaction (one turn of the writer) for all forty
    finally:
        store.close()


def test_a_call_that_raises_fails_alone(tmp_path: Path) -> None:
    """The group's transaction is rolled back and every call runs again on its own: the others' rows
    are stored once each, the failing call's not at all, and only its caller hears of it."""
    store = _store(f"sqlite:///{tmp_path / 'd.db'}")
    try:
        release, first = _held_writer(store)
        with ThreadPoolExecutor(max_workers=10) as pool:
            futures = [pool.submit(store.write_grouped, _insert(x, fail=x == 4)) for x in range(10)]
            _queued(store, 10)
            release.set()
            for x, f in enumerate(futures):
                if x == 4:
                    with pytest.raises(ValueError, match="call 4 refused"):
                        f.result(timeout=30)
                else:
                    assert f.result(timeout=30) == x * 10
        first.join()
        assert _rows(store) == [x for x in range(10) if x != 4]
    finally:
        store.close()


def test_a_failure_of_the_transaction_itself_reaches_every_call(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale leader's group write is fenced off: every caller hears it, nothing is stored."""
    store = _store(f"sqlite:///{tmp_path / 'd.db'}")
    try:
        release, first = _held_writer(store)
        with ThreadPoolExecutor(max_workers=5) as pool:
            futures = [pool.submit(store.write_grouped, _insert(x)) for x in range(5)]
            _queued(store, 5)

            def fenced(_conn: Connection, _fenced: bool) -> None:
                raise FencedWrite(1, 2, "another replica")

            monkeypatch.setattr(store, "_fence", fenced)
            release.set()
            for f in futures:
                with pytest.raises(FencedWrite):
                    f.result(timeout=30)
        first.join()
        assert _rows(store) == []
    finally:
        store.close()


def test_closing_writes_what_is_queued_and_later_calls_run_on_their_own(tmp_path: Path) -> None:
    store = _store(f"sqlite:///{tmp_path / 'd.db'}")
    release, first = _held_writer(store)
    with ThreadPoolExecutor(max_workers=5) as pool:
        futures = [pool.submit(store.write_grouped, _insert(x)) for x in range(5)]
        _queued(store, 5)
        closing = threading.Thread(target=_writer(store).close)
        closing.start()
        release.set()
        closing.join(30)
        assert [f.result(timeout=30) for f in futures] == [0, 10, 20, 30, 40]
    first.join()
    assert store.write_grouped(_insert(7)) == 70  # after close: a transaction of its own, not a hang
    assert _rows(store) == [0, 1, 2, 3, 4, 7]
    store.close()


def test_a_forked_child_writes_with_a_writer_of_its_own(tmp_path: Path) -> None:
    """The loop process is forked from the API's: a writer thread of the parent's is not in the child."""
    store = _store(f"sqlite:///{tmp_path / 'd.db'}")
    try:
        assert store.write_grouped(_insert(1)) == 10  # the parent's writer runs
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports by its exit status
            code = 1
            try:
                signal.alarm(20)  # a call no writer takes would hang: the child dies of the alarm instead
                store.engine.dispose(close=False)
                code = 0 if store.write_grouped(_insert(2)) == 20 else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _rows(store) == [1, 2]
    finally:
        store.close()


def test_postgresql_writes_each_call_in_a_transaction_of_its_own(pg_server: TempPostgres) -> None:
    """PostgreSQL has no single writer: no group writer is made, and a call is its own transaction."""
    url = pg_server.create_database("t_group_calls")
    store = _store(url)
    try:
        assert [store.write_grouped(_insert(x)) for x in range(3)] == [0, 10, 20]
        assert store._grouped is None and _rows(store) == [0, 1, 2]
    finally:
        store.close()


def test_a_call_may_close_the_writer_that_runs_it(tmp_path: Path) -> None:
    """Closed from within one of its own calls (a shutdown that a write set off), the writer does not wait
    for itself: the call completes, and later calls run on their own."""
    store = _store(f"sqlite:///{tmp_path / 'd.db'}")
    try:
        def closing(conn: Connection) -> int:
            conn.execute(text("INSERT INTO t (x) VALUES (1)"))
            _writer(store).close()
            return 1

        assert store.write_grouped(closing) == 1
        assert store.write_grouped(_insert(2)) == 20
        assert _rows(store) == [1, 2]
    finally:
        store.close()

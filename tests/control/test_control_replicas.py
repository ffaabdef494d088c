"""Replicas of one controller (issue 24): the lease, fencing in the store, SQLite's single controller,
what /healthz and GET /v1/controller say, and a failover of real `disagg serve` replicas on PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_helpers import make_service, wait_for
from fastapi.testclient import TestClient
from sqlalchemy import text

from disagg.api import create_app
from disagg.control.leadership import Leadership, NotLeader, SingleControllerError, lock_sqlite
from disagg.store import Store
from disagg.store.lease import FencedWrite, Role
from disagg.store.pgtemp import TempPostgres


def _store(url: str) -> Store:
    store = Store(url)
    store.migrate()
    return store


def _two(url: str) -> Iterator[tuple[Store, Store]]:
    first, second = _store(url), _store(url)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


@pytest.fixture
def stores(db_url: str) -> Iterator[tuple[Store, Store]]:
    """Two handles on one store, as two replicas hold it."""
    yield from _two(db_url)


@pytest.fixture
def pg_stores(db_url: str) -> Iterator[tuple[Store, Store]]:
    """The same on PostgreSQL only: SQLite has one controller, one writer at a time, its lease taken at
    once."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite: one controller, one writer at a time")
    yield from _two(db_url)


def test_a_paused_leaders_write_is_refused_and_counted(stores: tuple[Store, Store]) -> None:
    """Two handles on one store: the first leads, the second takes the lease over (as a standby does when
    the first was paused past its lease); the first's next write raises FencedWrite and writes nothing."""
    old, new = stores
    first = old.acquire_lease("old", 0.5)
    assert first is not None and new.acquire_lease("new", 0.5) is None  # held: the standby waits
    old.epoch = first
    heard: list[BaseException] = []
    old.on_fenced = heard.append
    old.set_aside([], "a leader's write goes through while its epoch is current")
    time.sleep(0.6)  # the lease lapses (the database's clock): the old leader was paused
    second = new.acquire_lease("new", 5.0)
    assert second == first + 1
    with pytest.raises(FencedWrite):
        old.first_round(first)
    assert len(heard) == 1 and isinstance(heard[0], FencedWrite)
    lease = new.lease()
    assert lease is not None and lease.fenced_writes == 1 and lease.failovers == 1
    assert lease.first_round_at is None  # the refused write left nothing behind
    assert lease.role_of("new") == Role.LEADER and lease.role_of("old") == Role.STANDBY
    assert not old.renew_lease("old", first, 5.0)  # nor may it renew
    new.epoch = second
    new.first_round(second)  # the new leader writes
    after = new.lease()
    assert after is not None and after.first_round_at is not None


def test_a_leader_paused_inside_a_transaction_does_not_block_the_takeover(pg_stores: tuple[Store, Store]) -> None:
    """A leader stopped (SIGSTOP) in the middle of a write holds the lease row FOR SHARE: the standby must
    not wait on it forever. Its look gives up on the lock (lock_timeout) and PostgreSQL ends the idle
    session (idle_in_transaction_session_timeout), after which the standby takes over; the paused
    write never commits."""
    old, new = pg_stores
    first = old.acquire_lease("old", 1.0)
    assert first is not None
    old.epoch = first
    with pytest.raises(Exception), old.write_core() as conn:  # noqa: B017 - the server ended the session
        time.sleep(1.2)  # the lease lapses while the transaction is open, as if the process was stopped
        assert new.acquire_lease("new", 5.0) is None  # the row is locked: no wait, look again later
        wait_for(lambda: new.acquire_lease("new", 5.0) is not None, timeout=30,
                 what="the standby to take the lease from a paused transaction")
        conn.execute(text("SELECT 1"))
    lease = new.lease()
    assert lease is not None and lease.holder == "new" and lease.epoch == first + 1


def test_a_leaders_own_transactions_do_not_hold_its_renewal_back(db_url: str, pg_stores: tuple[Store, Store]) -> None:
    """A busy leader's transactions (a round's commit, the slice workers' steps) hold the lease row while
    they run; its renewal must not wait for them, or the lease lapses under load and the leader steps
    down with no other replica in sight (bench controller on PostgreSQL at 12,500 machines did). On
    SQLite the renewal waits its turn like any write."""
    import threading

    store, renewer = pg_stores
    epoch = store.acquire_lease("busy", 5.0)
    assert epoch is not None
    store.epoch = epoch
    renewed: list[bool] = []
    with store.write_core() as conn:  # a leader's transaction in flight, fenced (the lease row locked)
        conn.execute(text("SELECT 1"))
        t = threading.Thread(target=lambda: renewed.append(renewer.renew_lease("busy", epoch, 5.0)), daemon=True)
        t.start()
        t.join(timeout=10)
        assert renewed == [True], "the renewal waited for the leader's own transaction"
    taker = _store(db_url)
    try:
        assert taker.acquire_lease("other", 5.0) is None  # the lease is live: no takeover
    finally:
        taker.close()


def test_a_leader_stops_acting_once_its_lease_is_taken(tmp_path: Path) -> None:
    """An in-process controller whose lease is taken steps down: its loop stops, its slice runner may not act."""
    svc = make_service(tmp_path)
    try:
        assert svc.leadership is not None and svc.leadership.leading
        svc.controller.start()
        other = Store(svc.config.db)
        try:
            other.acquire_lease("intruder", 5.0, force=True)
            wait_for(lambda: not svc.leadership.leading, what="the leader to notice its lease was taken")  # type: ignore[union-attr]
            with pytest.raises(NotLeader):
                svc.controller.slices.may_act()
            wait_for(lambda: svc.controller._thread is not None and not svc.controller._thread.is_alive(),
                     what="the loop to stop")
        finally:
            other.close()
    finally:
        svc.close()


def test_a_second_serve_on_one_sqlite_file_is_refused(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'one.db'}"
    fd = lock_sqlite(db)
    assert fd is not None
    try:
        with pytest.raises(SingleControllerError, match="PostgreSQL"):
            lock_sqlite(db, wait_s=0.0)
        # A holder that lets go within the wait (a killed controller's runner closing what it inherited):
        # the lock is taken, not refused.
        threading.Timer(0.3, os.close, (fd,)).start()
        start = time.monotonic()
        second = lock_sqlite(db, wait_s=5.0)
        assert second is not None and 0.25 < time.monotonic() - start < 5.0
        os.close(second)
        fd = lock_sqlite(db)
        assert fd is not None
        done = subprocess.run([sys.executable, "-m", "disagg.cli", "serve", "--db", db, "--port", "0",
                               "--state-dir", str(tmp_path / "state")], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 1 and "PostgreSQL" in done.stderr, done.stderr
    finally:
        os.close(fd)
    assert lock_sqlite(db) is not None  # free again once the holder is gone


def test_healthz_and_controller_say_the_role_and_the_replicas(tmp_path: Path) -> None:
    svc = make_service(tmp_path, replica_name="alpha")
    try:
        token = svc.store.create_token("admin", admin=True)
        with TestClient(create_app(svc.jobs)) as client:
            health = client.get("/healthz").json()
            assert health["role"] == "leader" and health["replica"] == "alpha" and health["epoch"] >= 1
            assert [r["name"] for r in health["replicas"]] == ["alpha"]
            view = client.get("/v1/controller", headers={"Authorization": f"Bearer {token}"}).json()
            assert view["leader"] == "alpha" and view["lease_age_s"] is not None
            assert client.get("/v1/controller").status_code == 401
            metrics = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
            assert 'disagg_leader{replica="alpha"} 1.0' in metrics and "disagg_fenced_writes_total 0.0" in metrics
    finally:
        svc.close()


def test_a_standby_waits_while_the_lease_is_held(pg_stores: tuple[Store, Store]) -> None:
    """On PostgreSQL a second replica waits (it says so) until the first gives the lease back."""
    first, second = pg_stores
    a = Leadership(first, "a", "http://a", 3.0)
    a.acquire()
    b = Leadership(second, "b", "http://b", 3.0)
    said: list[str] = []
    import threading

    t = threading.Thread(target=b.acquire, args=(said.append,), daemon=True)
    t.start()
    wait_for(lambda: bool(said), what="the standby to say it waits")
    assert "standby" in said[0] and b.epoch is None
    a.release()
    t.join(timeout=10)
    assert b.epoch == (a.epoch or 0) + 1


def test_two_replicas_on_postgresql_fail_over_without_losing_or_repeating_a_job(
        pg_server: TempPostgres, tmp_path: Path) -> None:
    """Real `disagg serve` replicas: the leader is killed (kill -9), paused past its lease (SIGSTOP, then
    SIGCONT: it must be fenced and step down), or stopped with SIGTERM (it must exit 0, having given up the
    lease: it was killed by the signal, its lease left to lapse); jobs keep flowing, each completes exactly
    once."""
    from disagg.bench.failover import run_failover_trials
    from disagg.cli.serve import serve_main

    db = pg_server.create_database("failover_" + str(os.getpid()))
    result = run_failover_trials(tmp_path, serve_main, db, trials=4, replicas=2, seed=3)
    assert result["violations"] == [], result
    assert result["jobs"]["lost"] == 0 and result["jobs"]["run_twice"] == 0 and result["devices_leaked"] == 0
    assert result["jobs"]["completed"] == result["jobs"]["accepted"] > 0
    assert result["fenced_writes"]["accepted"] == 0
    assert result["takeovers"] == 4
    assert {t["how"] for t in result["trials_detail"]} == {"kill", "stop", "term"}
    assert [t["exit_code"] for t in result["trials_detail"] if t["how"] == "term"] == [0]



def test_a_takeover_is_marked_on_the_charts(tmp_path: Path) -> None:
    """The history samples carry the lease's epoch; where it rises the dashboard's charts draw a
    failover marker (issue 25), beside the faults' and repairs'."""
    from disagg.api.dashboard.timeline import marks

    svc = make_service(tmp_path, replica_name="alpha")
    try:
        token = svc.store.create_token("admin", admin=True)  # before the takeover: alpha's writes are fenced after
        before = svc.store.current_numbers()
        other = Store(svc.config.db)
        try:
            taken = other.acquire_lease("beta", 5.0, force=True)
            after = other.current_numbers()
            assert taken is not None and after["epoch"] == taken == before["epoch"] + 1
            now = time.time()
            for at, numbers in ((now - 30, before), (now - 20, before), (now - 10, after)):
                other.record_history(at, numbers)
        finally:
            other.close()
        assert marks(svc.store.history_samples(0.0, now)) == [(now - 10, "failover")]
        with TestClient(create_app(svc.jobs)) as client:
            client.post("/login", data={"token": token})
            page = client.get("/ui/history").text
        assert 'id="chart-queue-mark-failover-0"' in page and "failovers" in page, page[:2000]
    finally:
        svc.close()

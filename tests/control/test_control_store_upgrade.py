"""Upgrading a store that an older disagg wrote, with its jobs in it: the operator's day after a new release.

`data/store-0002.sql` is a real store, dumped (`sqlite3 .dump`) from the controller of commit ec3c91e^
(schema revision 0002) after it had run on the FlowOS-RM testbed: 8 jobs (completed, running and
queued), their slices, steps and events, an admin token, and the inventory, and then was killed with
kill -9. The migrations of every revision since run on it here, as `disagg serve` runs them on start;
on PostgreSQL, the same rows in a database that the migrations brought to revision 0002.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import MetaData, create_engine, func, select, text

from disagg.model.states import JobState
from disagg.store import Store
from disagg.store.base import StoreError
from disagg.store.pgtemp import TempPostgres

DUMP = Path(__file__).parent / "data" / "store-0002.sql"
TABLES = ("jobs", "slices", "slice_steps", "events", "tokens", "machines", "devices", "links")


def _old_store(path: Path, extra_sql: str = "") -> str:
    """A SQLite file holding the old store (and `extra_sql` run on it with foreign keys off)."""
    with sqlite3.connect(path) as conn:
        conn.executescript(DUMP.read_text())
        if extra_sql:
            conn.executescript(extra_sql)
    conn.close()
    return f"sqlite:///{path}"


def _old_postgres(url: str, tmp_path: Path) -> str:
    """A PostgreSQL database at revision 0002 holding the dump's rows, copied table by table (parents
    first) from the SQLite store."""
    Store(url).migrate("0002")
    source = create_engine(_old_store(tmp_path / "source.db"))
    target = create_engine(url)
    tables = MetaData()
    tables.reflect(source)
    with source.connect() as read, target.begin() as write:
        for table in tables.sorted_tables:
            if table.name != "alembic_version":
                rows = [dict(r._mapping) for r in read.execute(select(table))]
                if rows:
                    write.execute(table.insert(), rows)
    source.dispose()
    target.dispose()
    return url


def _counts(url: str) -> dict[str, int]:
    engine = create_engine(url)
    tables = MetaData()
    tables.reflect(engine, only=TABLES)
    with engine.connect() as conn:
        counts = {t: conn.execute(select(func.count()).select_from(tables.tables[t])).scalar_one() for t in TABLES}
    engine.dispose()
    return counts


def _revision(store: Store) -> str:
    with store.engine.connect() as conn:
        return str(conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one())


@pytest.fixture(params=["sqlite", "postgres"])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store of revision 0002, on each kind of database."""
    if request.param == "sqlite":
        return _old_store(tmp_path / "disagg.db")
    server = request.getfixturevalue("pg_server")
    return _old_postgres(server.create_database("up_" + tmp_path.name[-20:].lower().replace("-", "_")), tmp_path)


def test_a_store_with_jobs_in_it_upgrades_from_revision_0002_and_keeps_every_row(old_store: str) -> None:
    """Revision 0004 rebuilds `jobs` (SQLite changes columns by copying the table): with foreign keys
    enforced, dropping the old `jobs` failed while `slices` pointed at it, and `disagg serve` could not
    start on a store that had ever run a job ("FOREIGN KEY constraint failed", DROP TABLE jobs)."""
    url = old_store
    before = _counts(url)
    assert before["jobs"] == 8 and before["slices"] == 4 and before["events"] == 27  # the dump is what it says
    store = Store(url)
    store.migrate()
    assert _revision(store) == "i23_slice_changes"
    assert _counts(url) == before  # no row lost, none made up
    if url.startswith("sqlite"):
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1  # enforced again afterwards
    states = Counter(s.state for s in store.job_summaries())
    assert states == {JobState.COMPLETED: 1, JobState.RUNNING: 3, JobState.QUEUED: 4}
    queued = store.queued_jobs(window=100)  # the old rows' requests read as today's jobs
    assert [j.name for j in queued] == ["j-4509f2967d35", "j-3cf92d03927b", "j-6d9b90370def",
                                        "j-cffa03ab06b2"]  # q3 … q6, oldest first
    assert all(j.tasks.devices.get("gpu") == 2 for j in queued)
    history = [(e["subject"], e["to"]) for e in store.job_events("j-889fe1710394")]
    assert ("job", JobState.COMPLETED.value) in history and history[-1] == ("slice", "done")
    store.migrate()  # the next start finds nothing to do
    assert _counts(url) == before
    store.close()


def test_an_upgrade_that_would_leave_a_row_pointing_at_none_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """With the check off for the migration, a store that already held a dangling row (written with foreign
    keys off by some other tool) is not carried forward silently: the upgrade rolls back, naming the rows."""
    orphan = ("INSERT INTO slice_steps (slice_id, op, target, status, tries) "
              "VALUES ('s-nosuchslice', 'attach-device', 'iobox0/gpu0', 'done', 1);")
    url = _old_store(tmp_path / "disagg.db", orphan)
    before = _counts(url)
    store = Store(url)
    with pytest.raises(StoreError, match=r"1 rows pointing at none: slice_steps row \d+ → slices"):
        store.migrate()
    assert _revision(store) == "0002"  # every revision's change rolled back with it
    assert _counts(url) == before
    store.close()


def test_a_store_a_newer_disagg_migrated_is_refused_naming_its_revision(tmp_path: Path) -> None:
    url = _old_store(tmp_path / "disagg.db")
    store = Store(url)
    store.migrate()
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'i99_later'")
    with pytest.raises(StoreError, match="schema revision 'i99_later', which disagg .* does not know: a newer "
                                         r"disagg has upgraded it.*restore a backup taken before the upgrade"):
        store.migrate()
    assert _revision(store) == "i99_later"
    store.close()


def test_an_upgrade_under_running_replicas_is_refused_until_they_stop(pg_server: TempPostgres) -> None:
    """PostgreSQL replicas of an older disagg running while a new one starts (a rolling upgrade): the new
    one migrated the schema under them, and they read and wrote on with code that did not know it. Now
    the upgrade is refused, naming them, until each has stopped: a clean stop says so, a kill is past
    REPLICA_RECENT_S."""
    from disagg.store.lease import Role

    url = pg_server.create_database("upgrade_replicas")
    old = Store(url)
    old.migrate("i23_positions")  # the revision before the newest
    old.replica_seen("r0", "http://10.0.0.1:8080", Role.LEADER, 1)
    old.replica_seen("r1", "http://10.0.0.2:8080", Role.STANDBY, None)
    new = Store(url)
    with pytest.raises(StoreError, match=r"at schema revision 'i23_positions', and this disagg would upgrade it to "
                                         r"'i23_slice_changes' while replicas run on it: r0 \(leader, seen \d\.\d s "
                                         r"ago\), r1 \(standby, seen \d\.\d s ago\)\. .*stop every replica"):
        new.migrate()
    assert _revision(new) == "i23_positions"
    old.replica_seen("r0", "http://10.0.0.1:8080", Role.STOPPED, 1)  # r0 stopped cleanly
    with pytest.raises(StoreError, match=r"while replicas run on it: r1 \(standby"):
        new.migrate()
    with old.engine.begin() as conn:  # r1 was killed: its row ages past the window
        conn.exec_driver_sql("UPDATE replicas SET last_seen = last_seen - 60 WHERE name = 'r1'")
    new.migrate()
    assert _revision(new) == "i23_slice_changes"
    old.replica_seen("r2", "http://10.0.0.3:8080", Role.STANDBY, None)  # a replica of this version
    new.migrate()  # nothing to upgrade: replicas of the same schema start beside each other
    old.close()
    new.close()


def test_a_restore_while_replicas_run_is_refused(pg_server: TempPostgres, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from disagg.cli import app
    from disagg.store.lease import Role

    url = pg_server.create_database("restore_replicas")
    store = Store(url)
    store.migrate()
    store.replica_seen("r0", "http://10.0.0.1:8080", Role.LEADER, 1)
    (tmp_path / "any.dump").write_bytes(b"not a dump")
    r = CliRunner().invoke(app, ["restore", str(tmp_path / "any.dump"), "--db", url])
    assert r.exit_code == 1 and "replicas run on the store" in r.output and "r0 (leader, seen" in r.output, r.output
    store.replica_seen("r0", "http://10.0.0.1:8080", Role.STOPPED, 1)
    r = CliRunner().invoke(app, ["restore", str(tmp_path / "any.dump"), "--db", url])
    assert r.exit_code == 1 and "pg_restore failed" in r.output, r.output  # past the check: not a dump
    store.close()

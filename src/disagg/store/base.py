"""The store's foundation: the database engines and the transactions every operation runs in.

`StoreBase.write()` opens a transaction that commits on success and rolls back on any error, so a
request or a controller step either lands whole or not at all. On SQLite every write transaction
starts with `BEGIN IMMEDIATE` (it takes the write lock up front, so two writers queue on
`busy_timeout` instead of failing on a lock upgrade); reads use a second, deferred engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, select, text
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory

DEFAULT_URL = "sqlite:///disagg.db"
#: How long a SQLite statement waits for another connection's lock before it fails.
BUSY_TIMEOUT_MS = 30_000
#: PostgreSQL ends a session idle inside a transaction after this many seconds (below the lease's 3 s).
IDLE_IN_TRANSACTION_S = 2.5



def normalize_url(url: str) -> str:
    """Accept plain paths and `postgresql://` URLs; SQLAlchemy wants a driver for PostgreSQL."""
    if "://" not in url:
        return f"sqlite:///{url}"
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _sqlite_engine(url: str, immediate: bool) -> Engine:
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        if immediate and _poll_write_lock(conn.connection.dbapi_connection):
            return
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


#: How long `BEGIN IMMEDIATE` polls for the write lock in short sleeps before SQLite's busy handler waits.
POLL_WRITE_LOCK_S = 2.0
_POLL_SLEEP_S = 0.0005


def _poll_write_lock(raw: Any) -> bool:
    """Begin a write transaction, waiting for another process's writer in sleeps of 0.5 ms; False when the
    lock is still taken after `POLL_WRITE_LOCK_S` (or the failure is not a lock): the caller then asks
    SQLite, whose busy handler waits out the rest of `busy_timeout` (and raises what SQLAlchemy wraps).

    SQLite's handler backs off in sleeps of up to 100 ms (1, 2, 5, 10, 15, 20, 25, ... ms): a write in the
    loop process, behind the API process's insert of a batch (or the API's behind the loop's commit), slept
    on past the end of the other's hold, while holding its own process's writer slot (`_WriterQueue`), so
    every other writer of that process waited too."""
    raw.execute("PRAGMA busy_timeout=0")
    try:
        deadline = time.monotonic() + POLL_WRITE_LOCK_S
        while True:
            try:
                raw.execute("BEGIN IMMEDIATE")
                return True
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    return False
            time.sleep(_POLL_SLEEP_S)
    finally:
        raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")


def _lock_key(name: str) -> int:
    """A PostgreSQL advisory lock's key for `name`."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class StoreError(RuntimeError):
    """The store cannot be opened or migrated (a bad URL, a server that does not answer); says why."""


@contextmanager
def store_errors(url: str) -> Iterator[None]:
    """Turn the database library's errors into StoreError naming the store (callers need not know SQLAlchemy)."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot use the store at {url!r}: {store_words(exc, url)}") from exc


def store_words(exc: BaseException, url: str) -> str:
    """What the database said, in its own words (not SQLAlchemy's wrapping and its link), and, where SQLite
    says its disk is full, how much its filesystem has left: the operator's next step is there."""
    words = str(getattr(exc, "orig", None) or exc).strip() or type(exc).__name__
    if "disk is full" in words and url.startswith("sqlite:///"):
        folder = Path(url.removeprefix("sqlite:///")).parent
        with contextlib.suppress(OSError):
            st = os.statvfs(folder)
            words += f" ({st.f_bavail * st.f_frsize // 2**20} MiB free on {folder})"
    return words


@contextmanager
def _foreign_keys_deferred(conn: Connection, dialect: str) -> Iterator[None]:
    """SQLite changes a table's columns by copying it into a new table and dropping the old one
    (Alembic's batch mode); with foreign keys enforced, dropping `jobs` while `slices` rows point at it
    fails, so a store that held jobs could not be upgraded past revision 0004. The check is off for the
    migration (the pragma is a no-op inside a transaction, so it is set before one begins, on the DBAPI
    connection that SQLAlchemy would otherwise wrap in one) and `_check_foreign_keys` runs before the commit."""
    if dialect != "sqlite":
        yield
        return
    raw = conn.connection.dbapi_connection
    assert raw is not None
    raw.execute("PRAGMA foreign_keys=OFF")
    try:
        yield
    finally:
        raw.execute("PRAGMA foreign_keys=ON")


def _refuse_upgrade_under_replicas(conn: Connection, script: ScriptDirectory, revision: str, url: str) -> None:
    """An upgrade while replicas of an older disagg run on the store (a rolling upgrade, a forgotten standby)
    changes the schema under code that does not know it, which reads and writes on. Refused, naming them,
    until each has stopped: a clean stop says so in its row, a killed one is past REPLICA_RECENT_S."""
    from alembic.migration import MigrationContext

    from disagg.store.lease import running_replicas

    current = MigrationContext.configure(conn).get_current_revision()
    target = script.get_current_head() if revision == "head" else revision
    if current is None or current == target:
        return
    running = running_replicas(conn, "postgresql")
    if running:
        raise StoreError(f"the store at {url!r} is at schema revision {current!r}, and this disagg would upgrade "
                         f"it to {target!r} while replicas run on it: {', '.join(running)}. An upgrade changes the "
                         "schema under them: stop every replica, then start this version (docs/controller.md, "
                         "\"Upgrading disagg\")")


def _refuse_unknown_revision(conn: Connection, script: ScriptDirectory, url: str) -> None:
    """A store that a newer disagg has migrated (the package rolled back after an upgrade) is at a revision
    this one has no script for: say so, and what to do, instead of Alembic's "Can't locate revision"."""
    from alembic.migration import MigrationContext

    from disagg import __version__

    current = MigrationContext.configure(conn).get_current_revision()
    if current is not None and current not in {r.revision for r in script.walk_revisions()}:
        raise StoreError(f"the store at {url!r} is at schema revision {current!r}, which disagg {__version__} "
                         "does not know: a newer disagg has upgraded it. Run that version on it, or restore "
                         "a backup taken before the upgrade (disagg restore)")


def _check_foreign_keys(conn: Connection) -> None:
    """After a migration with SQLite's foreign keys off: refuse to commit one that left a row pointing at no
    row (the migration rolls back, and the store stays at its revision)."""
    dangling = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if dangling:
        where = ", ".join(f"{table} row {rowid} → {parent}" for table, rowid, parent, _ in dangling[:5])
        raise StoreError(f"the migration would leave {len(dangling)} rows pointing at none: {where}; "
                         "the store is left at its revision")


#: What a request meets when the database, not the request, is at fault for now: a server that is down or
#: restarting, a connection it ended (its idle-in-transaction timeout), a lock not had in time, a pool with no
#: free connection. The API answers these 503 with Retry-After (`disagg.api.errors`): trying again may work.
UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, PoolTimeout)


class DuplicateKey(ValueError):
    """A row broke a uniqueness rule (a concurrent submission with the same idempotency key)."""


class _WriterQueue:
    """One writer at a time, urgent writers first, then first come first served.

    The holder hands the lock directly to the next waiter (each waits on a lock of its own), so a
    release wakes exactly one thread, not every waiter. (SQLite allows one writer; this orders them.)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = False
        self._urgent: deque[threading.Lock] = deque()
        self._normal: deque[threading.Lock] = deque()

    @contextmanager
    def hold(self, urgent: bool) -> Iterator[None]:
        waiter: threading.Lock | None = None
        with self._lock:
            if self._held:
                waiter = threading.Lock()
                waiter.acquire()
                (self._urgent if urgent else self._normal).append(waiter)
            else:
                self._held = True
        if waiter is not None:
            waiter.acquire()  # released by the previous holder: the lock is ours now
        try:
            yield
        finally:
            with self._lock:
                queue = self._urgent or self._normal
                if queue:
                    queue.popleft().release()
                else:
                    self._held = False



class StoreBase:
    """The controller's database: engines, transactions, migrations. Thread-safe: every call opens its own session."""

    def __init__(self, url: str = DEFAULT_URL) -> None:
        with store_errors(url):
            self._open(url)

    def _open(self, url: str) -> None:
        self.url = normalize_url(url)
        self.dialect = self.url.split(":", 1)[0].split("+", 1)[0]
        if self.dialect == "sqlite":
            self.engine = _sqlite_engine(self.url, immediate=True)
            self.read_engine = _sqlite_engine(self.url, immediate=False)
        else:
            # a session left idle inside a transaction (its process paused: SIGSTOP, a VM freeze) is ended by
            # the server, so the row locks it holds cannot keep a standby from taking the lease over
            options = f"-c idle_in_transaction_session_timeout={int(IDLE_IN_TRANSACTION_S * 1000)}"
            self.engine = create_engine(self.url, pool_size=10, max_overflow=20, pool_recycle=300,
                                        connect_args={"options": options})
            self.read_engine = self.engine
        self._write = sessionmaker(self.engine, expire_on_commit=False)
        # SQLite has one writer at a time: queue this process's writers on a lock (a fair, quick
        # hand-over) instead of SQLite's busy handler, which backs off in sleeps of up to 100 ms.
        self._writers: _WriterQueue | None = _WriterQueue() if self.dialect == "sqlite" else None
        self._first_writers: set[int] = set()  # threads whose writes count as urgent (`write_first`)
        self._read = sessionmaker(self.read_engine, expire_on_commit=False)
        # fencing (`store/lease.py`): the epoch this store writes as leader under (None: not a leader —
        # the API's writes, a standby's), who hears of a refused write, and how many were refused here
        self.epoch: int | None = None
        self.on_fenced: Callable[[BaseException], None] | None = None
        self.fenced_count = 0

    # --- lifecycle -------------------------------------------------------------------------
    def migrate(self, revision: str = "head") -> None:
        """Bring the schema to the newest revision (Alembic; `revision`: to that one, for the tests that
        upgrade a store written by an older disagg). Safe to call on every start. StoreError when the
        database cannot be reached or written, or an upgrade would leave a row pointing at none."""
        with store_errors(self.url):
            self._migrate(revision)

    def _migrate(self, revision: str) -> None:
        # Alembic names each of its plugins as it loads (seven lines at INFO in the server's log at every
        # start); which revisions ran ("Running upgrade …") stays said
        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
        from alembic import command
        from alembic.config import Config
        from alembic.script import ScriptDirectory

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        with self.engine.connect() as conn, _foreign_keys_deferred(conn, self.dialect), conn.begin():
            if self.dialect == "postgresql":  # replicas starting at once: one migrates, the others wait for it
                # Alembic loads each revision's script between its statements: on a busy host that gap passed
                # the session's idle-in-transaction timeout (a CI run) and the server ended the migration.
                # The timeout is for a leader's row locks; a migration runs before this process leads.
                conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key("disagg-migrate")})
            cfg.attributes["connection"] = conn
            script = ScriptDirectory.from_config(cfg)
            _refuse_unknown_revision(conn, script, self.url)
            if self.dialect == "postgresql":
                _refuse_upgrade_under_replicas(conn, script, revision, self.url)
            command.upgrade(cfg, revision)
            if self.dialect == "sqlite":
                _check_foreign_keys(conn)

    def close(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()

    @contextmanager
    def write(self, urgent: bool = False, fenced: bool = True) -> Iterator[Session]:
        """A transaction that commits at the end of the block, or rolls back on error. Not re-entrant.

        `urgent` writers (API requests someone waits for) go ahead of the controller's background
        writers when both wait for SQLite's single write lock. While this store writes as a leader
        (`epoch` set), the transaction first checks that epoch is still the lease's (`fenced`: every
        write but the lease's own): a stale leader's write raises FencedWrite and commits nothing.
        """
        with self._fenced_errors(fenced), self._writer_slot(urgent), self._write() as session, session.begin():
            self._fence(session.connection(), fenced)
            yield session

    def write_first(self) -> None:
        """The calling thread's writes go ahead of the background writers' (the scheduling loop's: its
        commit and its poll are what every queued job waits for, while a slice worker's step is one of
        sixteen; behind them all, a loop with 10,000 compositions in flight waited 16 steps per write)."""
        self._first_writers.add(threading.get_ident())

    @contextmanager
    def _writer_slot(self, urgent: bool) -> Iterator[None]:
        if self._writers is None:
            yield
            return
        with self._writers.hold(urgent or threading.get_ident() in self._first_writers):
            yield

    def _fence(self, conn: Connection, fenced: bool) -> None:
        """Mark the transaction with the leader's epoch (events carry it) and check that it is current."""
        epoch = self.epoch if fenced else None
        conn.info["leader_epoch"] = epoch
        if epoch is not None:
            from disagg.store.lease import fence_check

            fence_check(conn, self.dialect, epoch)

    @contextmanager
    def _fenced_errors(self, fenced: bool) -> Iterator[None]:
        """After a refused leader write has rolled back: count it, and tell the leader (it steps down)."""
        from disagg.store.lease import FencedWrite

        try:
            yield
        except FencedWrite as exc:
            if fenced:
                self.fenced_count += 1
                with contextlib.suppress(SQLAlchemyError):  # out of reach: the refusal still stands
                    self.count_fenced()  # type: ignore[attr-defined]
                if self.on_fenced is not None:
                    self.on_fenced(exc)
            raise

    def serialize(self, session: Session, name: str) -> None:
        """Inside a `write()`: wait until no other transaction that serializes on `name` is open.

        For read-then-write sequences that must not interleave across processes (mirroring the
        fabric's health while an admin repairs a link). SQLite's write transactions are serial
        already (one writer, BEGIN IMMEDIATE); PostgreSQL's are not, so a transaction-scoped
        advisory lock orders them there.
        """
        if self.dialect == "postgresql":
            session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(name)})

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._read() as session, session.begin():
            yield session

    @contextmanager
    def write_core(self, urgent: bool = False, fenced: bool = True) -> Iterator[Connection]:
        """`write()` on a bare connection (SQLAlchemy Core, no ORM session): for the hot paths
        (submissions, slice step records), where an ORM session costs more than the statements."""
        with self._fenced_errors(fenced), self._writer_slot(urgent), self.engine.begin() as conn:
            self._fence(conn, fenced)
            yield conn

    @contextmanager
    def read_core(self) -> Iterator[Connection]:
        with self.read_engine.begin() as conn:
            yield conn

    def ping(self) -> None:
        """Raise unless the store answers a query (the liveness probe: no table is read)."""
        with self.read_core() as conn:
            conn.execute(select(1))

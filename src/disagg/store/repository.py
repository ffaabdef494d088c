"""The store: one database (SQLite in WAL mode by default, PostgreSQL by URL) and the queries on it.

`Store.write()` opens a transaction that commits on success and rolls back on any error, so a
request or a controller step either lands whole or not at all. On SQLite every write transaction
starts with `BEGIN IMMEDIATE` (it takes the write lock up front, so two writers queue on
`busy_timeout` instead of failing on a lock upgrade); reads use a second, deferred engine.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, insert, select, text
from sqlalchemy.orm import Session, sessionmaker

from disagg.model import Allocation, Cluster, Device, Machine, Pool
from disagg.store.models import (
    DeviceRow,
    LinkRow,
    MachineRow,
    SliceRow,
    TokenRow,
)

DEFAULT_URL = "sqlite:///disagg.db"
#: Slices that still hold resources.
LIVE_SLICE_STATES = ("composing", "running", "tearing-down")


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
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


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


@dataclass(frozen=True)
class Principal:
    """Who a request comes from."""

    tenant: str
    admin: bool


class IdempotencyConflict(ValueError):
    """The same idempotency key was used with a different request body."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class Store:
    """The controller's database. Thread-safe: every call opens its own session."""

    def __init__(self, url: str = DEFAULT_URL) -> None:
        self.url = normalize_url(url)
        self.dialect = self.url.split(":", 1)[0].split("+", 1)[0]
        if self.dialect == "sqlite":
            self.engine = _sqlite_engine(self.url, immediate=True)
            self.read_engine = _sqlite_engine(self.url, immediate=False)
        else:
            self.engine = create_engine(self.url, pool_size=10, max_overflow=20, pool_recycle=300)
            self.read_engine = self.engine
        self._write = sessionmaker(self.engine, expire_on_commit=False)
        # SQLite has one writer at a time: queue this process's writers on a lock (a fair, quick
        # hand-over) instead of SQLite's busy handler, which backs off in sleeps of up to 100 ms.
        self._writers: _WriterQueue | None = _WriterQueue() if self.dialect == "sqlite" else None
        self._read = sessionmaker(self.read_engine, expire_on_commit=False)

    # --- lifecycle -------------------------------------------------------------------------
    def migrate(self) -> None:
        """Bring the schema to the newest revision (Alembic). Safe to call on every start."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def close(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()

    @contextmanager
    def write(self, urgent: bool = False) -> Iterator[Session]:
        """A transaction that commits at the end of the block, or rolls back on error. Not re-entrant.

        `urgent` writers (API requests someone waits for) go ahead of the controller's background
        writers when both wait for SQLite's single write lock.
        """
        if self._writers is None:
            with self._write() as session, session.begin():
                yield session
            return
        with self._writers.hold(urgent), self._write() as session, session.begin():
            yield session

    def serialize(self, session: Session, name: str) -> None:
        """Inside a `write()`: wait until no other transaction that serializes on `name` is open.

        For read-then-write sequences that must not interleave across processes (mirroring the
        fabric's health while an admin repairs a link). SQLite's write transactions are serial
        already (one writer, BEGIN IMMEDIATE); PostgreSQL's are not, so a transaction-scoped
        advisory lock orders them there.
        """
        if self.dialect == "postgresql":
            key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
            session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._read() as session, session.begin():
            yield session

    @contextmanager
    def write_core(self, urgent: bool = False) -> Iterator[Connection]:
        """`write()` on a bare connection (SQLAlchemy Core, no ORM session): for the hot paths
        (submissions, slice step records), where an ORM session costs more than the statements."""
        if self._writers is None:
            with self.engine.begin() as conn:
                yield conn
            return
        with self._writers.hold(urgent), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read_core(self) -> Iterator[Connection]:
        with self.read_engine.begin() as conn:
            yield conn

    # --- tokens ----------------------------------------------------------------------------
    def create_token(self, tenant: str, admin: bool = False) -> str:
        """A new bearer token for `tenant`; only its hash is stored, so it is shown once."""
        token = "dg_" + secrets.token_urlsafe(24)
        with self.write() as s:
            s.add(TokenRow(token_hash=hash_token(token), tenant=tenant, admin=admin, created_at=time.time()))
        return token

    def principal(self, token: str) -> Principal | None:
        with self.read() as s:
            row = s.scalars(select(TokenRow).where(TokenRow.token_hash == hash_token(token))).first()
            return None if row is None else Principal(row.tenant, row.admin)

    def has_admin(self) -> bool:
        with self.read() as s:
            return s.scalars(select(TokenRow).where(TokenRow.admin.is_(True))).first() is not None

    # --- inventory -------------------------------------------------------------------------
    def sync_inventory(self, cluster: Cluster) -> None:
        """Add the spec's machines, pools, devices and links that the store lacks; keep health.

        Rows go in as bulk INSERTs and only the key columns are read back: one ORM object per row
        took 11 s for a 12,500-machine spec (78,000 rows).
        """
        nodes = [
            {"name": m.name, "kind": "machine", "rack": m.rack, "cpus": m.cpus, "memory_gb": m.memory_gb,
             "uplink_gbps": m.uplink_gbps, "position": i}
            for i, m in enumerate(cluster.machines)
        ] + [
            {"name": p.name, "kind": "pool", "rack": p.rack, "cpus": 0.0, "memory_gb": 0.0,
             "uplink_gbps": p.uplink_gbps, "position": len(cluster.machines) + i}
            for i, p in enumerate(cluster.pools)
        ]
        devices = [
            {"id": d.id, "kind": d.kind, "model": d.model, "location": d.location, "index": d.index,
             "capacity": d.capacity, "health": "failed" if d.health == "failed" else "healthy", "drained": False,
             "slice_id": None, "position": i}
            for i, d in enumerate(cluster.devices)
        ]
        links = [{"id": lk.id, "gbps": lk.gbps, "up": True} for lk in cluster.links]
        with self.write() as s:
            for model, key, rows in ((MachineRow, "name", nodes), (DeviceRow, "id", devices), (LinkRow, "id", links)):
                have = set(s.scalars(select(getattr(model, key))))
                missing = [r for r in rows if r[key] not in have]
                if missing:
                    s.execute(insert(model), missing)

    def cluster(self, session: Session | None = None) -> Cluster:
        """The inventory as a snapshot (health included) with what live slices hold as allocations."""
        if session is None:
            with self.read() as s:
                return self.cluster(s)
        s = session
        # columns, not ORM objects: a snapshot is read every round (1.3 s as objects at 52,500 devices)
        mrows = s.execute(select(MachineRow.name, MachineRow.kind, MachineRow.rack, MachineRow.cpus,
                                 MachineRow.memory_gb, MachineRow.uplink_gbps).order_by(MachineRow.position)).all()
        links = s.execute(select(LinkRow.id, LinkRow.gbps, LinkRow.up)).all()
        down = {r.id for r in links if not r.up}
        rack_gbps = next((r.gbps for r in links if r.id.startswith("rack:")), 100.0)
        machines = tuple(
            Machine(r.name, r.rack, r.cpus, r.memory_gb, r.uplink_gbps) for r in mrows if r.kind == "machine"
        )
        pools = tuple(Pool(r.name, r.rack, r.uplink_gbps) for r in mrows if r.kind == "pool")
        devices = []
        columns = (DeviceRow.id, DeviceRow.kind, DeviceRow.model, DeviceRow.location, DeviceRow.index,
                   DeviceRow.capacity, DeviceRow.health, DeviceRow.drained)
        # unpacked by position: a row's `.index` is the tuple method, not the column
        for dev_id, kind, model, location, index, capacity, stored, drained in s.execute(
            select(*columns).order_by(DeviceRow.position)
        ):
            health = "failed" if stored == "failed" else "drained" if drained else "healthy"
            if f"up:{location}" in down:  # unreachable behind a dropped uplink
                health = "failed"
            devices.append(Device(dev_id, kind, model, location, index, capacity, health))  # type: ignore[arg-type]
        return Cluster(
            machines=machines,
            pools=pools,
            devices=tuple(devices),
            rack_uplink_gbps=rack_gbps,
            allocations=tuple(_live_allocations(s)),
        )

    def room_left(self, session: Session) -> tuple[dict[str, float], dict[str, float]]:
        """The cpus and memory each machine has left after what the live slices hold (applying a
        round's decisions re-checks against these; a whole snapshot would read every device too)."""
        cpu: dict[str, float] = {}
        mem: dict[str, float] = {}
        for name, cpus, memory in session.execute(
            select(MachineRow.name, MachineRow.cpus, MachineRow.memory_gb).where(MachineRow.kind == "machine")
        ):
            cpu[name], mem[name] = cpus, memory
        for a in _live_allocations(session):
            cpu[a.machine] -= a.cpus
            mem[a.machine] -= a.memory_gb
        return cpu, mem

    def ping(self) -> None:
        """Raise unless the store answers a query (the liveness probe: no table is read)."""
        with self.read_core() as conn:
            conn.execute(select(1))


def _live_allocations(session: Session) -> list[Allocation]:
    """What the live slices hold, as allocations (the snapshot's warm part, and what applying a
    round's decisions re-checks against)."""
    out: list[Allocation] = []
    for sl in session.scalars(select(SliceRow).where(SliceRow.state.in_(LIVE_SLICE_STATES))):
        out += allocations_of(sl.job_id, sl.placement)
    return out


def allocations_of(job_id: str, placement: dict[str, Any]) -> list[Allocation]:
    """What a slice's placement holds, as the policy's Allocation records (one per task)."""
    out = []
    for t in placement.get("tasks", []):
        gbps = sum(float(d.get("network_gbps", 0.0)) for d in t.get("devices", []))
        out.append(
            Allocation(
                job_id,
                t["machine"],
                float(t["cpus"]),
                float(t["memory_gb"]),
                tuple(d["id"] for d in t.get("devices", [])),
                gbps,
            )
        )
    return out

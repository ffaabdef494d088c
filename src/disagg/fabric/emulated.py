"""The emulated fabric: the default driver, standing in for PCIe-over-Ethernet hardware.

It behaves like the FlowOS-RM testbed (seed 000: ExpEther HBAs, I/O boxes of GPUs and NVMe behind a
40 GbE switch): every operation takes time, links have a bandwidth and can drop, devices can fail,
attaches can time out. An attachment reserves the bandwidth it is given on every link of its path,
and an attach that would take a link past its bandwidth is refused. Its state (what is attached
where, with what bandwidth, which faults are active) lives in its own SQLite file, apart from the
controller's store, like the hardware it replaces: a controller killed with SIGKILL finds the
fabric as the fabric left it, and reconciles against it.

Latency defaults (seconds) are estimates from the seed's measurements, not a datasheet: the seed
reports that slice construction and destruction took 32–45% of a short MNIST run (104.57–366.36 s
of run-task), that launch-machine is dominated by fetching a ~3 GB container image over GbE
(≈ 24 s at 1 Gbit/s, plus boot), and that attach/detach and launch-task grow with the number of
GPUs because they ran one after another.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path

from disagg.fabric.base import AttachmentInfo, FabricDriver, FabricError, FaultInjection, Mechanism
from disagg.model import Cluster, SliceMachine

#: The six slice operations, in the order of a slice's life.
OPERATIONS = (
    "attach-device",
    "launch-machine",
    "prepare-task",
    "launch-task",
    "detach-device",
    "destroy-machine",
)


@dataclass(frozen=True)
class OperationLatencies:
    """How long each slice operation takes on the emulated testbed (seconds, before `scale`)."""

    attach_device: float = 4.0  # ExpEther hot-plug of one remote PCIe device
    launch_machine: float = 30.0  # boot with a ~3 GB container image over GbE
    prepare_task: float = 2.0  # hand the task to the node's agent
    launch_task: float = 3.0  # start the task (running state)
    detach_device: float = 2.0  # hot-unplug
    destroy_machine: float = 10.0  # shut down, leave the active nodes
    attach_local: float = 0.0  # a device in the machine itself needs no fabric operation

    def scaled(self, factor: float) -> OperationLatencies:
        """The same latencies times `factor` (tests and benchmarks run the testbed faster)."""
        return replace(self, **{f.name: getattr(self, f.name) * factor for f in fields(self)})

    def of(self, op: str) -> float:
        return float(getattr(self, op.replace("-", "_")))


_SCHEMA = """
CREATE TABLE IF NOT EXISTS attachments (device TEXT PRIMARY KEY, machine TEXT NOT NULL,
    mechanism TEXT NOT NULL, attached_at REAL NOT NULL, gbps REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS failed_devices (device TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS down_links (link TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


class EmulatedFabric(FabricDriver, FaultInjection):
    """PCIe-over-Ethernet fabric emulated on a state file. Thread-safe; operations run in parallel."""

    name = "emulated"

    def __init__(
        self,
        state_path: str | Path,
        cluster: Cluster,
        latencies: OperationLatencies | None = None,
        scale: float = 1.0,
    ) -> None:
        self.path = Path(state_path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster
        self.latencies = (latencies or OperationLatencies()).scaled(scale)
        self._local = threading.local()
        #: The lease epoch this driver acts for (`fence`); None: unfenced (one controller, tests).
        self.epoch: int | None = None
        conn = self._conn()
        conn.executescript(_SCHEMA)
        columns = {r[1] for r in conn.execute("PRAGMA table_info(attachments)")}
        if "gbps" not in columns:  # a state file from before links had bandwidth
            conn.execute("ALTER TABLE attachments ADD COLUMN gbps REAL NOT NULL DEFAULT 0")

    # --- plumbing --------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _device(self, device: str) -> str:
        d = self.cluster.device_by_id.get(device)
        if d is None:
            raise FabricError(f"device {device!r} does not exist on this fabric", retryable=False)
        return d.location

    def _down_on_path(self, db: sqlite3.Connection, device: str, machine: str) -> list[str]:
        path = self.cluster.path(self._device(device), machine)
        down = {r[0] for r in db.execute("SELECT link FROM down_links")}
        return [lk for lk in path if lk in down]

    # --- the driver interface --------------------------------------------------------------
    def attach(self, device: str, machine: str, mechanism: Mechanism, gbps: float = 0.0,
               slice_machine: SliceMachine | None = None) -> AttachmentInfo:
        """Give `device` to `machine`, taking the attach latency. Idempotent for the same pair.

        `gbps`: the bandwidth the attachment reserves on every link of its path (the placement's
        `network_gbps` for the device). An attach that would take a link past its bandwidth is
        refused, as a switch port that is full would refuse it.
        """
        location = self._device(device)
        if machine not in self.cluster.machine_index:
            raise FabricError(f"machine {machine!r} does not exist on this fabric", retryable=False)
        with self._tx() as db:
            row = db.execute(
                "SELECT machine, mechanism FROM attachments WHERE device=?", (device,)
            ).fetchone()
            if row is not None and row[0] == machine:
                return AttachmentInfo(device, machine, row[1])
            self._check(db, device, machine, row, gbps)
            timeouts = db.execute("SELECT value FROM counters WHERE name='attach_timeouts'").fetchone()
            timing_out = bool(timeouts and timeouts[0] > 0)
            if timing_out:
                db.execute("UPDATE counters SET value=value-1 WHERE name='attach_timeouts'")
        local = location == machine
        time.sleep(self.latencies.attach_local if local else self.latencies.attach_device)
        if timing_out:
            raise FabricError(f"attach of {device} to {machine} timed out", retryable=True)
        with self._tx() as db:
            row = db.execute(
                "SELECT machine, mechanism FROM attachments WHERE device=?", (device,)
            ).fetchone()
            if row is not None and row[0] == machine:
                return AttachmentInfo(device, machine, row[1])
            self._fenced(db, f"attach {device} to {machine}")
            self._check(db, device, machine, row, gbps)  # the world may have changed while we waited
            mech: Mechanism = "local" if local else mechanism
            db.execute(
                "INSERT INTO attachments (device, machine, mechanism, attached_at, gbps) VALUES (?, ?, ?, ?, ?)",
                (device, machine, mech, time.time(), 0.0 if local else gbps),
            )
        return AttachmentInfo(device, machine, mech)

    def fence(self, epoch: int, force: bool = False) -> None:
        """Keep `epoch` as the fabric's fencing token (the highest told wins); refused if a newer one
        was told already (this driver's controller lost its lease), unless `force`."""
        with self._tx() as db:
            newest = self._token(db)
            if newest is not None and newest > epoch and not force:
                raise FabricError(f"fenced: the fabric acts for lease epoch {newest}, not {epoch}", retryable=False)
            db.execute("INSERT INTO counters VALUES ('epoch', ?) ON CONFLICT(name) DO UPDATE SET value=excluded.value",
                       (epoch,))
        self.epoch = epoch

    @staticmethod
    def _token(db: sqlite3.Connection) -> int | None:
        row = db.execute("SELECT value FROM counters WHERE name='epoch'").fetchone()
        return None if row is None else int(row[0])

    def _fenced(self, db: sqlite3.Connection, what: str) -> None:
        """Refuse the change when another controller was given a newer epoch since this one's (in the
        change's own transaction, so a takeover cannot slip in between)."""
        newest = self._token(db)
        if self.epoch is not None and newest is not None and newest > self.epoch:
            raise FabricError(f"fenced: {what} refused, the fabric acts for lease epoch {newest} and this "
                              f"controller's was {self.epoch} (another replica leads)", retryable=False)

    def _check(
        self, db: sqlite3.Connection, device: str, machine: str, row: tuple[str, str] | None, gbps: float
    ) -> None:
        if row is not None:
            raise FabricError(f"device {device} is attached to {row[0]}, not {machine}", retryable=False)
        if db.execute("SELECT 1 FROM failed_devices WHERE device=?", (device,)).fetchone():
            raise FabricError(f"device {device} has failed", retryable=False)
        down = self._down_on_path(db, device, machine)
        if down:
            raise FabricError(f"link {down[0]} between {device} and {machine} is down", retryable=False)
        if gbps > 0:
            load = self._load(db)
            for lk in self.cluster.path(self._device(device), machine):
                cap = self.cluster.link_by_id[lk].gbps
                if load.get(lk, 0.0) + gbps > cap + 1e-9:
                    raise FabricError(
                        f"link {lk} carries {load.get(lk, 0.0):g} of its {cap:g} Gbit/s; "
                        f"attaching {device} to {machine} needs {gbps:g} more",
                        retryable=False,
                    )

    def _load(self, db: sqlite3.Connection) -> dict[str, float]:
        load: dict[str, float] = {}
        for device, machine, gbps in db.execute("SELECT device, machine, gbps FROM attachments WHERE gbps > 0"):
            for lk in self.cluster.path(self._device(device), machine):
                load[lk] = load.get(lk, 0.0) + gbps
        return load

    def detach(self, device: str, machine: str, slice_machine: SliceMachine | None = None) -> None:
        """Take `device` back from `machine`, taking the detach latency. Idempotent."""
        conn = self._conn()
        row = conn.execute("SELECT machine, mechanism FROM attachments WHERE device=?", (device,)).fetchone()
        if row is None or row[0] != machine:
            return
        time.sleep(self.latencies.attach_local if row[1] == "local" else self.latencies.detach_device)
        with self._tx() as db:
            self._fenced(db, f"detach {device} from {machine}")
            db.execute("DELETE FROM attachments WHERE device=? AND machine=?", (device, machine))

    def attachments(self) -> list[AttachmentInfo]:
        rows = self._conn().execute("SELECT device, machine, mechanism FROM attachments ORDER BY device")
        return [AttachmentInfo(d, m, mech) for d, m, mech in rows]

    def healthy(self, device: str) -> bool:
        return (
            self._conn().execute("SELECT 1 FROM failed_devices WHERE device=?", (device,)).fetchone() is None
        )

    # --- health and load, as the controller's monitor reads them ----------------------------
    def failed_devices(self) -> set[str]:
        return {r[0] for r in self._conn().execute("SELECT device FROM failed_devices")}

    def down_links(self) -> set[str]:
        return {r[0] for r in self._conn().execute("SELECT link FROM down_links")}

    def link_load(self) -> dict[str, float]:
        """Gbit/s that the remote attachments reserve on each link (every link listed)."""
        return {lk.id: 0.0 for lk in self.cluster.links} | self._load(self._conn())

    # --- fault injection -------------------------------------------------------------------
    @property
    def faults(self) -> FaultInjection:
        return self

    def fail_device(self, device: str) -> None:
        """The device breaks. It stays attached (hardware does not detach itself) until detached."""
        self._device(device)
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO failed_devices VALUES (?)", (device,))

    def repair_device(self, device: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM failed_devices WHERE device=?", (device,))

    def drop_link(self, link: str) -> None:
        if link not in self.cluster.link_by_id:
            raise FabricError(
                f"link {link!r} does not exist (links look like up:<node> or rack:<rack>)", retryable=False
            )
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO down_links VALUES (?)", (link,))

    def restore_link(self, link: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM down_links WHERE link=?", (link,))

    def inject_attach_timeouts(self, count: int) -> None:
        """The next `count` attaches time out (after their latency), as a flaky HBA would."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO counters VALUES ('attach_timeouts', ?) "
                "ON CONFLICT(name) DO UPDATE SET value=excluded.value",
                (count,),
            )

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

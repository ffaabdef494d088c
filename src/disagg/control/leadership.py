"""Leadership of a replicated controller: who runs the loop, and for how long it may act.

Several `disagg serve` on one PostgreSQL store are one controller. Each serves the API; exactly one,
the holder of the store's lease (`disagg.store.lease`), runs the loop, the slice workers,
reconciliation and the samplers. Its numbers:
  - LEASE_S (3 s, `lease_s`): how long a lease lasts past its last renewal, in the database's clock;
  - RENEW_S (1 s): how often the leader renews it — two renewals may fail before it lapses;
  - POLL_S (0.25 s): how often a standby looks at it.
A standby takes the lease once it has expired (epoch + 1) and then reconciles as after a restart.
Takeover after a leader's death: at most LEASE_S + POLL_S until the lease is taken, plus
reconciling and the first round.

The leader acts in the world (attaches devices, starts tasks) only while its lease is valid by its
own monotonic clock: until the send time of its last successful renewal + LEASE_S - MARGIN_S. That
needs the clocks' rates to agree over seconds, never their readings; the expiry a standby waits for
is the database's. A leader that cannot renew in time, or whose write the store fences
(`FencedWrite`), steps down at once: `on_lost` — `disagg serve` exits (its supervisor restarts it as
a standby), an in-process controller stops its loop.

SQLite is single-controller: `disagg serve` takes an exclusive lock on `<db>.lock` first (a second
`serve` on the same file is refused, naming PostgreSQL), and so takes the lease at once, whoever held
it before (only a dead process can have).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from disagg.model import SpecError
from disagg.store import Store
from disagg.store.base import StoreError, store_words
from disagg.store.lease import Role
from disagg.store.ports import ApiPort

log = logging.getLogger(__name__)

LEASE_S = 3.0
RENEW_S = 1.0
POLL_S = 0.25
#: The leader stops acting this long before its lease would lapse by its own clock.
MARGIN_S = 0.2
#: `disagg serve`'s exit code after it stepped down (its supervisor restarts it as a standby).
STEPPED_DOWN = 3


class NotLeader(RuntimeError):
    """This replica may not act as the controller (its lease lapsed or was taken)."""


def replica_name(configured: str, host: str, port: int) -> str:
    """The replica's name: as configured, else host:port (the host's name for a wildcard address)."""
    if configured:
        return configured
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    return f"{shown}:{port}" if port else f"{shown}:pid{os.getpid()}"


class SingleControllerError(SpecError):
    """A second `disagg serve` on the same SQLite file."""


#: How long `lock_sqlite` waits for the lock before it says another serve holds it. A controller killed
#: with -9 can leave the lock to a child it was starting for a moment: a job's runner forked, already in
#: a session of its own, not yet past closing its inherited files. A restart at once (systemd's, the
#: kill -9 trials') met it about once in a suite run of 2,000 tests.
LOCK_WAIT_S = 5.0


def lock_sqlite(url: str, wait_s: float = LOCK_WAIT_S) -> int | None:
    """For an SQLite store: hold an exclusive lock on `<db>.lock` for this process's life (its fd; None
    for PostgreSQL). SingleControllerError when another `serve` still holds it after `wait_s`."""
    if not url.startswith("sqlite"):
        return None
    path = url.split(":///", 1)[1] if ":///" in url else ""
    if not path or path == ":memory:":
        return None
    lock = Path(os.path.realpath(path) + ".lock")  # a symlink to the file is the same store
    try:
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:  # /proc, a read-only filesystem, a file where the directory should be
        raise SpecError("db", [f"cannot make the lock file {lock} beside the SQLite file: "
                               f"{exc.strerror or exc}"]) from None
    end = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() < end:
                time.sleep(0.05)
                continue
            os.close(fd)
            raise SingleControllerError("store", [
                f"another disagg serve runs on the SQLite file {path} (it holds {lock}); SQLite is single-"
                "controller: to run several replicas of one controller, give them the same PostgreSQL store "
                "(--db postgresql://…, docs/controller.md, 'Replicas')"]) from None


class Leadership:
    """One replica's side of the lease: wait for it, keep it, lose it, give it back."""

    def __init__(self, store: Store, name: str, address: str, lease_s: float = LEASE_S,
                 single: bool = False) -> None:
        self.store, self.name, self.address, self.lease_s = store, name, address, lease_s
        self.single = single  # SQLite: no other controller can run (the lock file), take the lease at once
        self.epoch: int | None = None
        self.valid_until = 0.0  # monotonic
        self.on_lost: Callable[[str], None] = lambda why: None
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen = 0.0

    # --- becoming the leader -------------------------------------------------------------------
    def acquire(self, waiting: Callable[[str], None] | None = None) -> int:
        """Block until this replica holds the lease; `waiting(note)` is called once if it must wait."""
        told = False
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                epoch = self.store.acquire_lease(self.name, self.lease_s, force=self.single)
            except Exception as exc:  # the store out of reach for a moment, a connection the server ended
                if self.single:  # nobody else can hold it: the store cannot be written (its disk is full, …)
                    raise StoreError(f"cannot take the lease of the store at {self.store.url!r}: "
                                     f"{store_words(exc, self.store.url)}") from exc
                log.warning("replica %s: a look at the lease failed (%s); looking again", self.name, exc)
                epoch = None
            if epoch is not None:
                self._became(epoch, sent)
                return epoch
            self._heartbeat(Role.STANDBY)
            if not told and waiting is not None:
                lease = self.store.lease()
                holder = lease.holder if lease is not None else "?"
                waiting(f"standby: replica {self.name} waits for the lease ({holder} leads)")
                told = True
            time.sleep(POLL_S)
        raise NotLeader("stopped while waiting for the lease")

    def _became(self, epoch: int, sent: float) -> None:
        self.epoch = epoch
        self.valid_until = sent + self.lease_s - MARGIN_S
        self.store.epoch = epoch  # every write of this store now carries the epoch and is fenced
        self.store.on_fenced = lambda exc: self.lose(str(exc))
        self._heartbeat(Role.LEADER, force=True)
        log.info("replica %s leads: epoch %d", self.name, epoch)

    def keep(self) -> None:
        """Renew the lease every RENEW_S in a thread of its own; lose it when a renewal is refused or
        none succeeded before it would lapse."""
        self._thread = threading.Thread(target=self._renew_loop, name="lease", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        epoch = self.epoch
        assert epoch is not None
        failed = ""  # the last renewal's error, for the step-down's words
        while not self._stop.wait(RENEW_S if time.monotonic() + RENEW_S < self.valid_until else 0.1):
            if self._lost.is_set():
                return
            sent = time.monotonic()
            try:
                ours = self.store.renew_lease(self.name, epoch, self.lease_s)
            except Exception as exc:  # the store is out of reach: retry until the lease would lapse
                ours = None
                failed = store_words(exc, self.store.url)
                log.warning("lease renewal failed: %s", failed)
            if ours:
                failed = ""
                self.valid_until = sent + self.lease_s - MARGIN_S
                self._heartbeat(Role.LEADER)
            elif ours is False:
                self.lose(f"the lease of epoch {epoch} was taken by another replica")
                return
            if time.monotonic() >= self.valid_until:
                self.lose(f"the lease of epoch {epoch} lapsed: no renewal for {self.lease_s:.1f} s"
                          + (f" (the store: {failed})" if failed else ""))
                return

    # --- acting, losing, giving back -------------------------------------------------------------
    @property
    def leading(self) -> bool:
        return self.epoch is not None and not self._lost.is_set() and time.monotonic() < self.valid_until

    def may_act(self) -> None:
        """Before an action in the world (attach, launch, stop): NotLeader unless the lease is still ours."""
        if not self.leading:
            if self.epoch is not None and not self._lost.is_set():
                self.lose(f"the lease of epoch {self.epoch} lapsed before an action")
            raise NotLeader(f"replica {self.name} no longer leads (epoch {self.epoch})")

    def lose(self, why: str) -> None:
        """Step down at once (once): nothing more is written or done as leader."""
        if self._lost.is_set():
            return
        self._lost.set()
        log.error("replica %s steps down: %s", self.name, why)
        self.on_lost(why)

    def _heartbeat(self, role: Role, force: bool = False) -> None:
        if not force and time.monotonic() - self._seen < RENEW_S:
            return
        self._seen = time.monotonic()
        with contextlib.suppress(Exception):  # the replicas table is for people; never fatal
            self.store.replica_seen(self.name, self.address, role, self.epoch)

    def release(self) -> None:
        """Stop renewing; a leader that still holds the lease gives it up (a standby takes over at once)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self.epoch is not None and not self._lost.is_set():
            self._lost.set()
            with contextlib.suppress(Exception):
                self.store.release_lease(self.name, self.epoch)
        with contextlib.suppress(Exception):  # no longer on the store: an upgrade need not wait for it
            self.store.replica_seen(self.name, self.address, Role.STOPPED, self.epoch)




def controller_view(store: ApiPort, name: str) -> dict[str, object]:
    """What `GET /v1/controller` and `/healthz` say: this replica's role, the lease (its epoch, its age:
    seconds since its last renewal, the database's clock), and every replica the store knows."""
    lease = store.lease()
    if lease is None:
        return {"replica": name, "role": Role.STANDBY, "epoch": 0, "leader": None, "lease_age_s": None,
                "lease": None, "replicas": []}
    info = lease.as_dict()
    return {"replica": name, "role": lease.role_of(name), "epoch": lease.epoch, "leader": info["holder"],
            "leader_since": info["acquired_at"] if lease.live else None, "lease_age_s": info["age_s"],
            "lease": info, "replicas": store.replicas()}


class LeaseCollector(Collector):
    """Prometheus, read from the store at scrape time: disagg_leader (1 on the replica that leads),
    disagg_lease_epoch, disagg_failovers_total, disagg_fenced_writes_total (the store's counts, so every
    replica shows them, and a fenced replica's refusals outlive it)."""

    def __init__(self, store: Store, name: str) -> None:
        self.store, self.name = store, name

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        lease = self.store.lease()
        if lease is None:
            return
        leader = GaugeMetricFamily("disagg_leader", "1 when this replica holds the lease, else 0.",
                                   labels=["replica"])
        leader.add_metric([self.name], 1 if lease.role_of(self.name) == Role.LEADER else 0)
        yield leader
        epoch = GaugeMetricFamily("disagg_lease_epoch", "The lease's epoch (raised by every acquisition).")
        epoch.add_metric([], lease.epoch)
        yield epoch
        failovers = CounterMetricFamily("disagg_failovers", "Leases taken from a holder that had not released it.")
        failovers.add_metric([], lease.failovers)
        yield failovers
        fenced = CounterMetricFamily("disagg_fenced_writes", "Leader writes refused: their epoch was no longer "
                                     "the lease's.")
        fenced.add_metric([], lease.fenced_writes)
        yield fenced


__all__ = [
    "LEASE_S",
    "POLL_S",
    "RENEW_S",
    "STEPPED_DOWN",
    "Leadership",
    "LeaseCollector",
    "NotLeader",
    "SingleControllerError",
    "controller_view",
    "lock_sqlite",
    "replica_name",
]

"""Leadership as a lease in the store, and the replicas the store knows.

One row of `controller_lease` says who leads: `holder`, `epoch`, `expires_at`. Every time is the
database's own clock (`clock_timestamp()` on PostgreSQL, SQLite's `julianday('now')`), read and
compared inside the statement that uses it, so the replicas' clocks never meet: a replica whose clock
is minutes off still sees the same expiry as the others. (What a leader does keep locally is a
*duration* on its monotonic clock: after a renewal sent at t it acts only until t + lease, which needs
the clocks' rates to agree over a few seconds, not their readings.)

  - acquire: in one transaction, the row is locked (`FOR UPDATE`; SQLite's writers are serial) and
    taken if its lease has expired or was released — `epoch + 1`, expiry `now + lease`;
  - renew: `UPDATE … WHERE epoch = mine AND holder = me` — no row: the lease was taken, step down;
  - release: a leader that stops sets `released`, so a standby takes over at its next look;
  - fence (`StoreBase.write`/`write_core`, `fence_check`): every transaction of a leader first reads the
    row `FOR KEY SHARE` and goes on only while the epoch is still its own. An acquisition's `FOR UPDATE`
    waits for those transactions and they for it, so a write under epoch e commits before epoch e+1
    exists or not at all: a late write of a paused or partitioned leader raises `FencedWrite`. KEY
    SHARE, not SHARE: a renewal (an UPDATE of no key column) does not wait for them. Under FOR SHARE a
    busy leader's own transactions (a round committing 2,000 jobs, 16 slice workers) held the renewal
    back past the lease, and the leader stepped down with no other replica in sight.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, select, text, update
from sqlalchemy.exc import OperationalError

from disagg.store.models import LeaseRow, ReplicaRow


class Role(StrEnum):
    """What a replica is now: the leader runs the loop; a standby serves the API and watches the lease; a
    stopped one has ended cleanly."""

    LEADER = "leader"
    STANDBY = "standby"
    STOPPED = "stopped"  # a clean stop said so: no longer runs on the store (an upgrade may go ahead)


class FencedWrite(RuntimeError):
    """A leader's write refused: its epoch is no longer the lease's (another replica took over)."""

    def __init__(self, mine: int, current: int | None, holder: str | None) -> None:
        super().__init__(f"fenced: this replica wrote as leader of epoch {mine}, but the lease is at epoch "
                         f"{current} (held by {holder!r}); it steps down")
        self.mine, self.current, self.holder = mine, current, holder


@dataclass(frozen=True)
class LeaseView:
    """The lease as the store has it, with the database's clock when it was read."""

    holder: str
    epoch: int
    expires_at: float
    acquired_at: float
    renewed_at: float
    first_round_at: float | None
    released: bool
    fenced_writes: int
    failovers: int
    now: float

    @property
    def live(self) -> bool:
        """Held: not released and not expired (by the database's clock)."""
        return not self.released and self.expires_at > self.now

    def role_of(self, name: str) -> Role:
        return Role.LEADER if self.live and self.holder == name else Role.STANDBY

    def as_dict(self) -> dict[str, Any]:
        return {"holder": self.holder if self.live else None, "last_holder": self.holder or None,
                "epoch": self.epoch, "live": self.live, "acquired_at": self.acquired_at or None,
                "age_s": round(self.now - self.renewed_at, 3) if self.renewed_at else None,
                "expires_in_s": round(self.expires_at - self.now, 3) if self.live else 0.0,
                "first_round_at": self.first_round_at, "fenced_writes": self.fenced_writes,
                "failovers": self.failovers, "now": self.now}


def db_now(dialect: str) -> str:
    """The database's clock, seconds since 1970 as a float, as an SQL expression."""
    if dialect == "postgresql":
        return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
    return "((julianday('now') - 2440587.5) * 86400.0)"


#: A replica seen this recently (the database's clock) may still run: twice the default lease, and six
#: heartbeats (a live replica writes its row every second).
REPLICA_RECENT_S = 6.0


def running_replicas(conn: Connection, dialect: str) -> list[str]:
    """The replicas that may still run on the store: seen within REPLICA_RECENT_S and not stopped cleanly;
    each as "name (role, seen N s ago)". What an upgrade or a restore must not change the store under.
    None in a store without the replicas table yet (an old or an empty one)."""
    from sqlalchemy import inspect

    if not inspect(conn).has_table("replicas"):
        return []
    now = db_now(dialect)
    rows = conn.execute(text(
        f"SELECT name, role, {now} - last_seen FROM replicas WHERE role <> :stopped "
        f"AND last_seen > {now} - :recent ORDER BY name"),
        {"stopped": str(Role.STOPPED), "recent": REPLICA_RECENT_S}).all()
    return [f"{name} ({role}, seen {float(ago):.1f} s ago)" for name, role, ago in rows]


_COLUMNS = ("holder, epoch, expires_at, acquired_at, renewed_at, first_round_at, released, fenced_writes, "
            "failovers")


def read_lease(conn: Connection, dialect: str, lock: str = "") -> LeaseView | None:
    """The lease row (None before the migration made it); `lock`: FOR UPDATE / FOR KEY SHARE on PostgreSQL."""
    suffix = f" {lock}" if lock and dialect == "postgresql" else ""
    row = conn.execute(text(f"SELECT {_COLUMNS}, {db_now(dialect)} AS now FROM controller_lease "
                            f"WHERE id = 1{suffix}")).first()
    if row is None:
        return None
    return LeaseView(str(row.holder), int(row.epoch), float(row.expires_at), float(row.acquired_at),
                     float(row.renewed_at), row.first_round_at, bool(row.released), int(row.fenced_writes),
                     int(row.failovers), float(row.now))


def fence_check(conn: Connection, dialect: str, epoch: int) -> None:
    """Inside a leader's transaction: go on only while `epoch` is the lease's (FencedWrite otherwise).
    The row is read FOR KEY SHARE, so no acquisition (FOR UPDATE) can commit until this transaction has
    ended, while renewals (FOR NO KEY UPDATE) go on."""
    lease = read_lease(conn, dialect, "FOR KEY SHARE")
    if lease is None or lease.epoch != epoch:
        raise FencedWrite(epoch, None if lease is None else lease.epoch, None if lease is None else lease.holder)


class LeaseOps:
    """The lease and the replicas (a mixin of `Store`; see the module docstring)."""

    dialect: str

    def lease(self) -> LeaseView | None:
        with self.read_core() as conn:  # type: ignore[attr-defined]
            return read_lease(conn, self.dialect)

    def acquire_lease(self, holder: str, lease_s: float, force: bool = False) -> int | None:
        """Take the lease if it expired or was released (or `force`: a single controller that knows no other
        runs, SQLite's case); the new epoch, or None while another replica holds it (or holds its row
        locked: a leader's transaction in flight, or one of a paused leader until the server ends it)."""
        try:
            return self._acquire(holder, lease_s, force)
        except OperationalError as exc:
            if getattr(exc.orig, "sqlstate", None) == "55P03":  # lock_not_available: look again later
                return None
            raise

    def _acquire(self, holder: str, lease_s: float, force: bool) -> int | None:
        with self.write_core(fenced=False) as conn:  # type: ignore[attr-defined]
            if self.dialect == "postgresql":
                conn.execute(text("SET LOCAL lock_timeout = '500ms'"))
            lease = read_lease(conn, self.dialect, "FOR UPDATE")
            if lease is None:
                raise RuntimeError("the store has no controller_lease row: migrate it first")
            if lease.live and not force:
                return None
            failover = not lease.released and bool(lease.holder)
            now = db_now(self.dialect)
            conn.execute(text(
                f"UPDATE controller_lease SET holder = :holder, epoch = epoch + 1, expires_at = {now} + :d, "
                f"acquired_at = {now}, renewed_at = {now}, first_round_at = NULL, released = :f, "
                "failovers = failovers + :fo WHERE id = 1"),
                {"holder": holder, "d": lease_s, "f": False, "fo": int(failover)})
            return lease.epoch + 1

    def renew_lease(self, holder: str, epoch: int, lease_s: float) -> bool:
        """Extend the lease by `lease_s` from the database's now; False: it is no longer ours."""
        now = db_now(self.dialect)
        # urgent: behind a loop and sixteen slice workers queued for SQLite's writer, a lone controller's
        # renewal waited past the lease under 1,000 jobs/s and the controller stepped down (bench controller)
        with self.write_core(urgent=True, fenced=False) as conn:  # type: ignore[attr-defined]
            result = conn.execute(text(
                f"UPDATE controller_lease SET expires_at = {now} + :d, renewed_at = {now} "
                "WHERE id = 1 AND epoch = :e AND holder = :h AND released = :f"),
                {"d": lease_s, "e": epoch, "h": holder, "f": False})
            return bool(result.rowcount)

    def release_lease(self, holder: str, epoch: int) -> None:
        """Give the lease up (a leader that stops): a standby takes over at its next look."""
        with self.write_core(fenced=False) as conn:  # type: ignore[attr-defined]
            conn.execute(update(LeaseRow).where(LeaseRow.id == 1, LeaseRow.epoch == epoch,
                                                LeaseRow.holder == holder).values(released=True))

    def first_round(self, epoch: int) -> None:
        """The leader of `epoch` committed its first round (a takeover's end, for `bench failover`)."""
        with self.write_core() as conn:  # type: ignore[attr-defined]
            conn.execute(text(f"UPDATE controller_lease SET first_round_at = {db_now(self.dialect)} "
                              "WHERE id = 1 AND epoch = :e AND first_round_at IS NULL"), {"e": epoch})

    def count_fenced(self) -> None:
        """One more leader write refused (after its transaction rolled back)."""
        with self.write_core(fenced=False) as conn:  # type: ignore[attr-defined]
            conn.execute(update(LeaseRow).where(LeaseRow.id == 1)
                         .values(fenced_writes=LeaseRow.fenced_writes + 1))

    def replica_seen(self, name: str, address: str, role: Role, epoch: int | None) -> None:
        """Record that replica `name` lives, in which role (the database's clock)."""
        now = db_now(self.dialect)
        with self.write_core(fenced=False) as conn:  # type: ignore[attr-defined]
            done = conn.execute(text(
                f"UPDATE replicas SET address = :a, role = :r, epoch = :e, last_seen = {now} WHERE name = :n"),
                {"a": address, "r": str(role), "e": epoch, "n": name}).rowcount
            if not done:
                conn.execute(text(f"INSERT INTO replicas (name, address, role, epoch, started_at, last_seen) "
                                  f"VALUES (:n, :a, :r, :e, {now}, {now})"),
                             {"a": address, "r": str(role), "e": epoch, "n": name})

    def live_replicas(self) -> list[str]:
        """`running_replicas` of this store; none when it cannot be read (then what comes next says why, in
        its own words)."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            with self.read_core() as conn:  # type: ignore[attr-defined]
                return running_replicas(conn, self.dialect)
        except SQLAlchemyError:
            return []

    def replicas(self) -> list[dict[str, Any]]:
        """Every replica the store knows, with how long ago it was last seen (the database's clock)."""
        with self.read_core() as conn:  # type: ignore[attr-defined]
            now = conn.execute(text(f"SELECT {db_now(self.dialect)}")).scalar_one()
            rows = conn.execute(select(ReplicaRow).order_by(ReplicaRow.name)).all()
        return [{"name": r.name, "address": r.address, "role": r.role, "epoch": r.epoch,
                 "started_at": r.started_at, "last_seen": r.last_seen,
                 "seen_s_ago": round(float(now) - r.last_seen, 3)} for r in rows]

    def stale_writes(self) -> int:
        """Transitions written under an epoch after one of a later epoch: fenced writes that were accepted
        (must be 0). An acquisition waits for every transaction of the old epoch, so an old epoch's event
        with a higher id than a newer epoch's can only be a write the fence let through."""
        with self.read_core() as conn:  # type: ignore[attr-defined]
            return int(conn.execute(text(
                "SELECT COUNT(*) FROM events a WHERE a.epoch IS NOT NULL AND EXISTS "
                "(SELECT 1 FROM events b WHERE b.epoch > a.epoch AND b.id < a.id)")).scalar_one())


__all__ = ["FencedWrite", "LeaseOps", "LeaseView", "Role", "db_now", "fence_check", "read_lease"]

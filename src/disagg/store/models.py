"""The controller's persistent state as SQLAlchemy 2 tables.

One table per concept: tokens, jobs, slices, slice steps, events, machines, pools, devices, links, tenants
(overrides), tenant usage, preemptions. The schema is
created by the Alembic migrations shipped in `disagg.store.migrations` (never by `create_all` at
run time), so SQLite and PostgreSQL databases evolve the same way.
"""

from __future__ import annotations

from typing import Any, Protocol

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from disagg.model.states import DeviceState, Health


class Base(DeclarativeBase):
    pass


class TokenRow(Base):
    """A bearer token, stored hashed. `tenant` owns jobs; `admin` may see and touch everything."""

    __tablename__ = "tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str] = mapped_column(String(128))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: never


class JobRow(Base):
    """A submitted job and where it stands. `reason` explains a waiting job."""

    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, index=True)  # submission order (ns clock)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str] = mapped_column(String(128))
    image: Mapped[str] = mapped_column(String(256))
    command: Mapped[list[str]] = mapped_column(JSON)
    tasks: Mapped[dict[str, Any]] = mapped_column(JSON)
    slo_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    importance: Mapped[float] = mapped_column(Float)
    max_retries: Mapped[int] = mapped_column(Integer, default=2)
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    reason_code: Mapped[str | None] = mapped_column(String(32), nullable=True)
    wait_rounds: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    slice_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    submitted_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    idempotency_key: Mapped[str | None] = mapped_column(String(256), nullable=True)
    request_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: None (a row written without it) reads as True.
    preemptible: Mapped[bool | None] = mapped_column(Boolean, nullable=True, default=True)
    __table_args__ = (UniqueConstraint("tenant", "idempotency_key", name="uq_jobs_tenant_idem"),)


class SliceRow(Base):
    """A job's composed environment. `placement` is the decision it was built from (JSON).

    A composition (a Redfish client's system) is a slice with no job: `tenant` owns it, `name` is its name."""

    __tablename__ = "slices"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id"), index=True, nullable=True)
    tenant: Mapped[str | None] = mapped_column(String(128), nullable=True)
    name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), index=True)
    outcome: Mapped[str | None] = mapped_column(String(16), nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    placement: Mapped[dict[str, Any]] = mapped_column(JSON)
    handle: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    #: SQLite: the number of the slice's last change (`slice_changes.seq`, set by triggers); None elsewhere.
    seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)


class SliceChangesRow(Base):
    """How many changes to slices SQLite's triggers have numbered (`seq`) and how many slices were deleted
    (`gone`): one row (id 1). Migration `i23_slice_changes` says why."""

    __tablename__ = "slice_changes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(BigInteger)
    gone: Mapped[int] = mapped_column(BigInteger)


class StepRow(Base):
    """One step of a slice's life, recorded before (`started`) and after (`done`/`failed`) it runs."""

    __tablename__ = "slice_steps"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    slice_id: Mapped[str] = mapped_column(ForeignKey("slices.id"), index=True)
    op: Mapped[str] = mapped_column(String(32))
    target: Mapped[str] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(16))
    tries: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    __table_args__ = (UniqueConstraint("slice_id", "op", "target", name="uq_steps_slice_op_target"),)


class MachineRow(Base):
    """A server node of the inventory (from the cluster spec)."""

    __tablename__ = "machines"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # machine | pool
    rack: Mapped[str] = mapped_column(String(128))
    cpus: Mapped[float] = mapped_column(Float)
    memory_gb: Mapped[float] = mapped_column(Float)
    uplink_gbps: Mapped[float] = mapped_column(Float)
    position: Mapped[int] = mapped_column(Integer, index=True)  # the inventory's version reads its max


class DeviceRow(Base):
    """A device of the inventory. `health`: a `Health`; `drained`: left out of new slices; `slice_id`: the
    slice holding it. Written by `store.lifecycle` only (guarded moves, each health and drain move an event)."""

    __tablename__ = "devices"
    id: Mapped[str] = mapped_column(String(160), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(64))
    location: Mapped[str] = mapped_column(String(128))
    index: Mapped[int] = mapped_column(Integer)
    capacity: Mapped[float] = mapped_column(Float)
    health: Mapped[str] = mapped_column(String(16), default=Health.HEALTHY)
    drained: Mapped[bool] = mapped_column(Boolean, default=False)
    slice_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    position: Mapped[int] = mapped_column(Integer, index=True)  # the inventory's version reads its max


class EventRow(Base):
    """One transition of a job, a slice, a device or a link (`subject`: job | slice | device | link): from, to,
    when and why; a device's or a link's id is `target`.

    Written by the store's guarded transitions only, in the transaction that makes the move."""

    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    subject: Mapped[str] = mapped_column(String(8))
    job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)  # none for a composition's slice
    slice_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    from_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_state: Mapped[str] = mapped_column(String(16))
    why: Mapped[str | None] = mapped_column(Text, nullable=True)
    target: Mapped[str | None] = mapped_column(String(160), nullable=True)  # a device's or a link's id
    epoch: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # the leader's; None: an API write


class LeaseRow(Base):
    """Leadership of the controller: one row (id 1). Times are the database's clock (`store/lease.py`)."""

    __tablename__ = "controller_lease"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    holder: Mapped[str] = mapped_column(String(256))
    epoch: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[float] = mapped_column(Float)
    acquired_at: Mapped[float] = mapped_column(Float)
    renewed_at: Mapped[float] = mapped_column(Float)
    first_round_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    released: Mapped[bool] = mapped_column(Boolean)
    fenced_writes: Mapped[int] = mapped_column(BigInteger)
    failovers: Mapped[int] = mapped_column(BigInteger)


class ReplicaRow(Base):
    """A `disagg serve` that opened the store as a controller: its role as it last said, when (DB clock)."""

    __tablename__ = "replicas"
    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    address: Mapped[str] = mapped_column(String(512))
    role: Mapped[str] = mapped_column(String(16))
    epoch: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    started_at: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)


class MetaRow(Base):
    """What the store says of itself (`store_id`: made once, when the schema was created)."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class LinkRow(Base):
    """A network link's state as the controller last saw it (`up` false: `LinkState.DOWN`). Written by
    `store.lifecycle.set_links` only (each move an event)."""

    __tablename__ = "links"
    id: Mapped[str] = mapped_column(String(160), primary_key=True)
    gbps: Mapped[float] = mapped_column(Float)
    up: Mapped[bool] = mapped_column(Boolean, default=True)


class TenantRow(Base):
    """An admin's override of one tenant's entry in the tenants spec (`PUT /v1/tenants/{name}`)."""

    __tablename__ = "tenants"
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Float)


class TenantUsageRow(Base):
    """A tenant's usage per resource, decayed with the half-life (written by the loop for fair share)."""

    __tablename__ = "tenant_usage"
    tenant: Mapped[str] = mapped_column(String(128), primary_key=True)
    usage: Mapped[dict[str, float]] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Float)


class PreemptionRow(Base):
    """A slice being preempted: signalled at `signalled_at`, killed at `deadline` (its grace period)."""

    __tablename__ = "preemptions"
    slice_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    tenant: Mapped[str] = mapped_column(String(128))
    for_job: Mapped[str] = mapped_column(String(32))
    for_tenant: Mapped[str] = mapped_column(String(128))
    reclaims: Mapped[dict[str, float]] = mapped_column(JSON)
    signalled_at: Mapped[float] = mapped_column(Float)
    deadline: Mapped[float] = mapped_column(Float)


Index("ix_jobs_state_seq", JobRow.state, JobRow.seq)
Index("ix_events_job_id", EventRow.job_id, EventRow.id)
Index("ix_events_target", EventRow.target, EventRow.id)


class DeviceFields(Protocol):
    """What the API shows of a device: a DeviceRow, or a row of just these columns (listing 52,500
    devices as ORM objects took 1.1 s; as column rows a fraction of that)."""

    id: str
    kind: str
    model: str
    location: str
    health: str
    drained: bool
    slice_id: str | None


#: The columns of DeviceFields, for a select that reads only those.
DEVICE_FIELDS = (DeviceRow.id, DeviceRow.kind, DeviceRow.model, DeviceRow.location, DeviceRow.health,
                 DeviceRow.drained, DeviceRow.slice_id)


def device_state(row: DeviceFields, reachable: bool = True) -> DeviceState:
    """The one word the API shows: failed > unreachable > attached > drained > free (`reachable`: no
    down link cuts its location off, `model.cluster.Reach`)."""
    return DeviceState.of(row.health, row.slice_id is not None, bool(row.drained), reachable)


def device_state_of(health: str, attached: bool, drained: bool, reachable: bool = True) -> DeviceState:
    """`device_state` from the columns it reads (for counting by state in SQL)."""
    return DeviceState.of(health, attached, drained, reachable)

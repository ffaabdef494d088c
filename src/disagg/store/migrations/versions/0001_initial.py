"""The first schema: tokens, jobs, slices, slice steps, machines, devices, links.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False, index=True),
        sa.Column("tenant", sa.String(128), nullable=False, index=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("image", sa.String(256), nullable=False),
        sa.Column("command", sa.JSON, nullable=False),
        sa.Column("tasks", sa.JSON, nullable=False),
        sa.Column("slo_s", sa.Float, nullable=True),
        sa.Column("importance", sa.Float, nullable=False),
        sa.Column("max_retries", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("reason_code", sa.String(32), nullable=True),
        sa.Column("wait_rounds", sa.Integer, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("slice_id", sa.String(32), nullable=True),
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("idempotency_key", sa.String(256), nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=True),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_jobs_tenant_idem"),
    )
    op.create_index("ix_jobs_state_seq", "jobs", ["state", "seq"])
    op.create_table(
        "slices",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False, index=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("placement", sa.JSON, nullable=False),
        sa.Column("handle", sa.String(128), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "slice_steps",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("slice_id", sa.String(32), sa.ForeignKey("slices.id"), nullable=False, index=True),
        sa.Column("op", sa.String(32), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.UniqueConstraint("slice_id", "op", "target", name="uq_steps_slice_op_target"),
    )
    op.create_table(
        "machines",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("rack", sa.String(128), nullable=False),
        sa.Column("cpus", sa.Float, nullable=False),
        sa.Column("memory_gb", sa.Float, nullable=False),
        sa.Column("uplink_gbps", sa.Float, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
    )
    op.create_table(
        "devices",
        sa.Column("id", sa.String(160), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("model", sa.String(64), nullable=False),
        sa.Column("location", sa.String(128), nullable=False),
        sa.Column("index", sa.Integer, nullable=False),
        sa.Column("capacity", sa.Float, nullable=False),
        sa.Column("health", sa.String(16), nullable=False),
        sa.Column("drained", sa.Boolean, nullable=False),
        sa.Column("slice_id", sa.String(32), nullable=True, index=True),
        sa.Column("position", sa.Integer, nullable=False),
    )
    op.create_table(
        "links",
        sa.Column("id", sa.String(160), primary_key=True),
        sa.Column("gbps", sa.Float, nullable=False),
        sa.Column("up", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    for table in ("links", "devices", "machines", "slice_steps", "slices", "jobs", "tokens"):
        op.drop_table(table)

"""Tenants: an admin's overrides of the tenants spec, each tenant's decayed usage, preemptions in
their grace period, and whether a job may be preempted.

Revision ID: 0004
Revises: 0006 (merged after 0005 and 0006)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "tenant_usage",
        sa.Column("tenant", sa.String(128), primary_key=True),
        sa.Column("usage", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "preemptions",
        sa.Column("slice_id", sa.String(32), primary_key=True),
        sa.Column("job_id", sa.String(32), nullable=False, index=True),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("for_job", sa.String(32), nullable=False),
        sa.Column("for_tenant", sa.String(128), nullable=False),
        sa.Column("reclaims", sa.JSON, nullable=False),
        sa.Column("signalled_at", sa.Float, nullable=False),
        sa.Column("deadline", sa.Float, nullable=False),
    )
    with op.batch_alter_table("jobs") as batch:
        # nullable: a row written without it (older writers) reads as preemptible
        batch.add_column(sa.Column("preemptible", sa.Boolean, nullable=True, server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("preemptible")
    op.drop_table("preemptions")
    op.drop_table("tenant_usage")
    op.drop_table("tenants")

"""Events: every transition of a job or a slice (from, to, when, why), the history an operator reads.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("subject", sa.String(8), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("slice_id", sa.String(32), nullable=True),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("why", sa.Text, nullable=True),
    )
    op.create_index("ix_events_job_id", "events", ["job_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_events_job_id", "events")
    op.drop_table("events")

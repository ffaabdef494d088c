"""History: the controller's numbers sampled every few seconds (queue, devices in use, link load, rounds),
kept for a retention window, for the dashboard's charts and GET /v1/history.

Revision ID: 0006
Revises: 0005 (re-chained after merging main, which has 0005)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_index("ix_history_at", "history", ["at"])


def downgrade() -> None:
    op.drop_index("ix_history_at", "history")
    op.drop_table("history")

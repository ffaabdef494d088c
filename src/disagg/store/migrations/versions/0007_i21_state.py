"""Device and link events: the events table records a device's health and drain moves and a link's
up/down moves (`subject` device | link) with the moved thing's id in `target`.

Revision ID: i21_state (the branch i21-state: Alembic allows no "-" in an id)
Revises: 0003 (the head on main: 0004 → 0003)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "i21_state"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("target", sa.String(160), nullable=True))
    op.create_index("ix_events_target", "events", ["target", "id"])


def downgrade() -> None:
    op.drop_index("ix_events_target", "events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("target")

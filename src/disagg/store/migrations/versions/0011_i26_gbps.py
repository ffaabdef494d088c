"""Each profile observation keeps what its remote devices drew (`profile_observations.gbps`, NULL: no
remote device, or stored before this revision).

A learned profile's bandwidth is the median of its remote runs' draws (`profiles.learn.drawn_gbps`):
the network-aware policy reserves it on a remote device's path and prices the path's load with it.

Revision ID: i26_gbps
Revises: i26_slo
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "i26_gbps"
down_revision = "i26_slo"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("profile_observations") as batch:
        batch.add_column(sa.Column("gbps", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("profile_observations") as batch:
        batch.drop_column("gbps")

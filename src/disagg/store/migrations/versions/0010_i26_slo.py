"""Each profile observation keeps its job's SLO (`profile_observations.slo_s`, NULL: none was given).

The SLO is the one statement of a job's own size the scheduler is told; the fit brings runs of one
image to a common size by it where the SLOs track the run times (`profiles.learn.sized_runs`).
Observations stored before this revision have none and are fitted as before.

Revision ID: i26_slo
Revises: i24_ha
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "i26_slo"
down_revision = "i24_ha"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("profile_observations") as batch:
        batch.add_column(sa.Column("slo_s", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("profile_observations") as batch:
        batch.drop_column("slo_s")

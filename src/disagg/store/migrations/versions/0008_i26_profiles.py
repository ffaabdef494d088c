"""Profiles: what finished tasks say of their image (observations) and the learned or pinned profiles.

Revision ID: i26_profiles
Revises: i21_state
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "i26_profiles"
down_revision = "i21_state"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("image", sa.String(256), primary_key=True),
        sa.Column("pinned", sa.Boolean, nullable=False, default=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_profiles_updated_at", "profiles", ["updated_at"])
    op.create_table(
        "profile_observations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("slice_id", sa.String(32), nullable=False, unique=True),
        sa.Column("image", sa.String(256), nullable=False),
        sa.Column("run_s", sa.Float, nullable=True),
        sa.Column("remote_share", sa.Float, nullable=False),
        sa.Column("load", sa.Float, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )
    op.create_index("ix_profile_observations_image", "profile_observations", ["image"])


def downgrade() -> None:
    op.drop_index("ix_profile_observations_image", "profile_observations")
    op.drop_table("profile_observations")
    op.drop_index("ix_profiles_updated_at", "profiles")
    op.drop_table("profiles")

"""Security (issue 13): tokens expire (`expires_at`), and the store knows its own identity (`meta`).

The store's id (`meta.store_id`, made once here) lets a controller tell its own store from another
one: the state directory records the id and how far the store had got (`disagg.store.marks`), so a
start on a replaced or rolled-back store is refused instead of silently losing jobs.

Revision ID: 0003
Revises: 0004 (merged after 0005, 0006 and 0004)
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("expires_at", sa.Float, nullable=True))
    meta = op.create_table(
        "meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.bulk_insert(meta, [{"key": "store_id", "value": uuid.uuid4().hex}])


def downgrade() -> None:
    op.drop_table("meta")
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("expires_at")

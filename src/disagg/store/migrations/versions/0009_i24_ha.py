"""Replicas: leadership as a lease in the store, the replicas the store knows, and the epoch of each event.

`controller_lease` has one row (id 1), made here so that no two replicas race to insert it: who holds
the lease (`holder`), its `epoch` (raised by one at every acquisition: the fencing token every leader
write carries), when it expires, was acquired and renewed, and when the holder committed its first
round — all in the database's clock (seconds since 1970), never a replica's. `fenced_writes` counts the
leader writes refused because their epoch was no longer current; `failovers` the acquisitions from a
holder that had not released the lease. `replicas`: every `disagg serve` that ever opened the store as
a controller, its address, its role and when it was last seen (the database's clock). `events.epoch`:
the leader epoch a transition was written under (none for an API's write), so a benchmark can prove
that no stale leader's write was accepted.

Revision ID: i24_ha
Revises: i26_profiles (0001→0002→0005→0006→0004→0003→i21_state→i26_profiles)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "i24_ha"
down_revision = "i26_profiles"
branch_labels = None
depends_on = None


def upgrade() -> None:
    lease = op.create_table(
        "controller_lease",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("holder", sa.String(256), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("acquired_at", sa.Float, nullable=False),
        sa.Column("renewed_at", sa.Float, nullable=False),
        sa.Column("first_round_at", sa.Float, nullable=True),
        sa.Column("released", sa.Boolean, nullable=False),
        sa.Column("fenced_writes", sa.BigInteger, nullable=False),
        sa.Column("failovers", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(lease, [{"id": 1, "holder": "", "epoch": 0, "expires_at": 0.0, "acquired_at": 0.0,
                            "renewed_at": 0.0, "first_round_at": None, "released": True, "fenced_writes": 0,
                            "failovers": 0}])
    op.create_table(
        "replicas",
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("address", sa.String(512), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
    )
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("epoch", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("epoch")
    op.drop_table("replicas")
    op.drop_table("controller_lease")

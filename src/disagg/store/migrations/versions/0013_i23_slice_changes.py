"""Number the changes to slices (SQLite): a round's snapshot reads only the slices changed since its last.

Each snapshot read every live slice (12,000 under `bench controller`: half its time). On SQLite, whose
writers take turns, triggers give every inserted slice, and every slice whose state, job or placement
changes, the next number of `slice_changes.seq` (one row): numbers in the order of the commits, so the
slices numbered past what a reader saw are all that changed since. A deleted slice (retention) counts
in `gone`: the reader then reads every live slice again. PostgreSQL commits in any order: no triggers,
its snapshots read every live slice as before (`store.snapshot.PlacementCache`).

Revision ID: i23_slice_changes
Revises: i23_positions
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "i23_slice_changes"
down_revision = "i23_positions"
branch_labels = None
depends_on = None

_NUMBER = ("UPDATE slice_changes SET seq = seq + 1 WHERE id = 1; "
           "UPDATE slices SET seq = (SELECT seq FROM slice_changes WHERE id = 1) WHERE rowid = NEW.rowid;")
_TRIGGERS = {
    "slices_numbered_on_insert": f"AFTER INSERT ON slices BEGIN {_NUMBER} END",
    "slices_numbered_on_change": f"AFTER UPDATE OF state, job_id, placement ON slices BEGIN {_NUMBER} END",
    "slices_counted_on_delete": ("AFTER DELETE ON slices BEGIN "
                                 "UPDATE slice_changes SET gone = gone + 1 WHERE id = 1; END"),
}


def upgrade() -> None:
    changes = op.create_table(
        "slice_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("gone", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(changes, [{"id": 1, "seq": 0, "gone": 0}])
    with op.batch_alter_table("slices") as batch:
        batch.add_column(sa.Column("seq", sa.BigInteger, nullable=True))
    op.create_index("ix_slices_seq", "slices", ["seq"])
    if op.get_bind().dialect.name == "sqlite":
        for name, body in _TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {body}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in _TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_index("ix_slices_seq", table_name="slices")
    with op.batch_alter_table("slices") as batch:
        batch.drop_column("seq")
    op.drop_table("slice_changes")

"""Compositions: slices with no job (a Redfish client's composed system), owned by a tenant.

`slices.job_id` and `events.job_id` may be empty (a composition has no job); `slices.tenant` names the
owner of a composition and `slices.name` the name its client gave it (Redfish `Name`).

Revision ID: 0005
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0002"
branch_labels = None
depends_on = None


def _steps_table() -> None:
    """slice_steps as revision 0001 made it."""
    op.create_table(
        "slice_steps",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("slice_id", sa.String(32), sa.ForeignKey("slices.id"), nullable=False, index=True),
        sa.Column("op", sa.String(32), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.UniqueConstraint("slice_id", "op", "target", name="uq_steps_slice_op_target"),
    )


def _alter_slices(nullable: bool, columns: bool) -> None:
    """Change `slices` in place (PostgreSQL) or re-create it (SQLite, which cannot alter a column).

    On SQLite the old `slices` can only be dropped while no row of slice_steps refers to it (the store
    enforces foreign keys), so slice_steps is set aside in a plain copy and re-created after.
    """
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.execute("CREATE TABLE _steps_hold AS SELECT * FROM slice_steps")
        op.drop_table("slice_steps")
    with op.batch_alter_table("slices") as batch:
        batch.alter_column("job_id", existing_type=sa.String(32), nullable=nullable)
        if columns:
            batch.add_column(sa.Column("tenant", sa.String(128), nullable=True))
            batch.add_column(sa.Column("name", sa.String(255), nullable=True))
        else:
            batch.drop_column("name")
            batch.drop_column("tenant")
    if sqlite:
        _steps_table()
        op.execute("INSERT INTO slice_steps SELECT * FROM _steps_hold")
        op.drop_table("_steps_hold")


def upgrade() -> None:
    _alter_slices(nullable=True, columns=True)
    with op.batch_alter_table("events") as batch:
        batch.alter_column("job_id", existing_type=sa.String(32), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM events WHERE job_id IS NULL")
    op.execute("DELETE FROM slice_steps WHERE slice_id IN (SELECT id FROM slices WHERE job_id IS NULL)")
    op.execute("DELETE FROM slices WHERE job_id IS NULL")
    with op.batch_alter_table("events") as batch:
        batch.alter_column("job_id", existing_type=sa.String(32), nullable=False)
    _alter_slices(nullable=False, columns=False)

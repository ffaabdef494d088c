"""How far the store has got: its identity and a counter that only grows, for telling a lost store.

`progress()` is (the store's id, the highest event id it has ever held): every job or slice move
writes an event, so the number grows with every change the store commits. The controller keeps the
last value it saw in its state directory (`disagg.control.recovery`); a store found behind that
value at the next start lost changes it had confirmed (a deleted or truncated WAL, an old backup),
and a store with another id is not the one the state directory belongs to. Deleting old events
(`disagg.store.gc`) raises `events_floor`, so the number never goes back by a deletion.
"""

from __future__ import annotations

from sqlalchemy import Connection, func, insert, inspect, select, update

from disagg.store.base import StoreBase
from disagg.store.models import EventRow, MetaRow

#: The meta key of the highest event id ever deleted.
EVENTS_FLOOR = "events_floor"


def store_id(conn: Connection) -> str:
    value = conn.execute(select(MetaRow.value).where(MetaRow.key == "store_id")).scalar()
    return str(value or "")


def raise_floor(conn: Connection, deleted_up_to: int) -> None:
    """After deleting events up to id `deleted_up_to`: keep the store's progress from going back."""
    current = conn.execute(select(MetaRow.value).where(MetaRow.key == EVENTS_FLOOR)).scalar()
    if current is None:
        conn.execute(insert(MetaRow), [{"key": EVENTS_FLOOR, "value": str(deleted_up_to)}])
    elif int(current) < deleted_up_to:
        conn.execute(update(MetaRow).where(MetaRow.key == EVENTS_FLOOR).values(value=str(deleted_up_to)))


class MarkOps(StoreBase):
    """The store's identity and progress."""

    def progress(self) -> tuple[str, int]:
        """(the store's id, the highest event id it has held): see the module docstring."""
        with self.read_core() as conn:
            top = conn.execute(select(func.max(EventRow.id))).scalar() or 0
            floor = conn.execute(select(MetaRow.value).where(MetaRow.key == EVENTS_FLOOR)).scalar()
            return store_id(conn), max(int(top), int(floor or 0))

    def has_schema(self) -> bool:
        """Whether the database holds a disagg store (its migrations ran), without changing anything. A file
        that is no database at all (or a server that does not answer) is a StoreError naming it: `gc`,
        `backup` and `token create --db` on one had been SQLAlchemy's traceback."""
        from disagg.store.base import store_errors

        with store_errors(self.url), self.read_core() as conn:
            return inspect(conn).has_table("alembic_version")

    def slice_ids(self, ids: list[str]) -> set[str]:
        """Which of `ids` the store has a slice for (in any state)."""
        from disagg.store.models import SliceRow

        found: set[str] = set()
        with self.read_core() as conn:
            for i in range(0, len(ids), 500):
                query = select(SliceRow.id).where(SliceRow.id.in_(ids[i:i + 500]))
                found |= {str(r) for r in conn.execute(query).scalars()}
        return found


__all__ = ["EVENTS_FLOOR", "MarkOps", "raise_floor", "store_id"]

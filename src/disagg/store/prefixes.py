"""Ids by prefix: a user may type any unique beginning of a job's or a slice's id (`j-b642`), as with
git or docker. Tenant-scoped: another tenant's ids are never matched, so they neither resolve nor make
a prefix ambiguous.
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import Select, select

from disagg.store.base import StoreBase
from disagg.store.models import JobRow, SliceRow
from disagg.store.tokens import Principal

#: How many matches an ambiguous prefix reports (enough to pick from; the rest are counted).
SHOWN_MATCHES = 10


def _escape_like(text: str) -> str:
    """`text` as a literal LIKE prefix (its `%`, `_` and the escape character taken as themselves)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class PrefixOps(StoreBase):
    """Resolve what a user typed to whole ids."""

    def ids_by_prefix(self, kind: Literal["job", "slice"], prefix: str, who: Principal,
                      limit: int = SHOWN_MATCHES + 1) -> list[str]:
        """The ids of `kind` that `who` may see and that are `prefix` or start with it, in id order, at
        most `limit`. An exact id comes back alone, even when it is also the prefix of another."""
        column = JobRow.id if kind == "job" else SliceRow.id
        query: Select[tuple[str]] = select(column)
        if kind == "slice":
            query = query.join(JobRow, JobRow.id == SliceRow.job_id)
        if not who.admin:
            query = query.where(JobRow.tenant == who.tenant)
        with self.read() as s:
            if s.execute(query.where(column == prefix)).first() is not None:
                return [prefix]
            like = query.where(column.like(_escape_like(prefix) + "%", escape="\\"))
            return [str(i) for i in s.scalars(like.order_by(column).limit(limit))]


__all__ = ["SHOWN_MATCHES", "PrefixOps"]

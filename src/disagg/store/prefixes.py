"""Ids by prefix: a user may type any unique beginning of an id (`j-b642`, `iobox0/gp`, `up:no`), as
with git or docker. One rule for every kind: an id typed whole comes back alone (even when it also
begins another, as `node1` begins `node10`); else every id that begins with what was typed.

Jobs and slices are tenant-scoped: another tenant's ids are never matched, so they neither resolve
nor make a prefix ambiguous. The inventory (devices, links) is the same for everyone; no route or
command takes a machine's name, so none is resolved here. Tenant names are not a table of their own
(the spec, the jobs and the tokens name them): their caller hands the names to `matching`, the same
rule on a list.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from sqlalchemy import Select, select

from disagg.store.base import StoreBase
from disagg.store.models import DeviceRow, JobRow, LinkRow, SliceRow
from disagg.store.tokens import Principal

#: How many matches an ambiguous prefix reports (enough to pick from; the rest are counted).
SHOWN_MATCHES = 10

#: What a user may name by a prefix of its id, and the column that holds the ids.
IdKind = Literal["job", "slice", "device", "link"]
_ID_COLUMNS: dict[str, Any] = {"job": JobRow.id, "slice": SliceRow.id, "device": DeviceRow.id, "link": LinkRow.id}


def _escape_like(text: str) -> str:
    """`text` as a literal LIKE prefix (its `%`, `_` and the escape character taken as themselves)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def matching(prefix: str, ids: Iterable[str], limit: int = SHOWN_MATCHES + 1) -> list[str]:
    """`ids_by_prefix`'s rule on a list: `[prefix]` when it is one of `ids`, else the ids that begin with
    it, sorted, at most `limit`."""
    known = sorted(set(ids))
    if prefix in known:
        return [prefix]
    return [i for i in known if i.startswith(prefix)][:limit]


class PrefixOps(StoreBase):
    """Resolve what a user typed to whole ids."""

    def ids_by_prefix(self, kind: IdKind, prefix: str, who: Principal, limit: int = SHOWN_MATCHES + 1) -> list[str]:
        """The ids of `kind` that `who` may see and that are `prefix` or start with it, in id order, at
        most `limit`. An exact id comes back alone, even when it is also the prefix of another."""
        column = _ID_COLUMNS[kind]
        query: Select[tuple[str]] = select(column)
        if kind in ("job", "slice") and not who.admin:
            if kind == "slice":
                query = query.join(JobRow, JobRow.id == SliceRow.job_id)
            query = query.where(JobRow.tenant == who.tenant)
        with self.read() as s:
            if s.execute(query.where(column == prefix)).first() is not None:
                return [prefix]
            like = query.where(column.like(_escape_like(prefix) + "%", escape="\\"))
            return [str(i) for i in s.scalars(like.order_by(column).limit(limit))]


__all__ = ["SHOWN_MATCHES", "IdKind", "PrefixOps", "matching"]

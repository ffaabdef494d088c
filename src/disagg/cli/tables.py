"""Tables the CLI prints, made so that nothing a user must copy is ever cut.

Three kinds of column: an `id` (a job or slice id, a device or link name) and a `num` never wrap and
are never shorter than their longest cell; `text` (reasons, lists) folds onto more lines. Piped (not a
terminal), a table is printed at its natural width, so `disagg jobs | grep` sees whole ids and whole
reasons on one line. On a terminal too narrow for a table of ids and numbers (`disagg simulate`'s
many columns), `print_table` splits it into several tables, each repeating the key columns, instead
of cutting numbers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.console import Console
from rich.table import Table

#: The width of a table printed to a pipe or a file: its own (no terminal to fit).
UNLIMITED = 100_000


@dataclass(frozen=True)
class Col:
    """A column: its header (say per task or in all, and the unit) and what it holds."""

    header: str
    kind: Literal["id", "num", "text"] = "text"


def console() -> Console:
    """A console for stdout: the terminal's width on a terminal, unlimited otherwise (`COLUMNS`, when
    set, is the width either way, as Rich has it)."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=UNLIMITED)


def make_table(title: str | None, columns: Sequence[Col], rows: Sequence[Sequence[str]]) -> Table:
    """A Rich table whose id and number columns never wrap and never shrink below their longest cell."""
    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        longest = max([len(str(r[i])) for r in rows] + [1])
        if col.kind == "text":
            table.add_column(col.header, overflow="fold")
        else:
            table.add_column(col.header, no_wrap=True, min_width=longest,
                             justify="right" if col.kind == "num" else "left")
    for row in rows:
        table.add_row(*(str(c) for c in row))
    if not rows:  # an empty listing says so, not a bare header
        table.caption = f"no {title or 'rows'}"
        table.caption_justify = "left"
    return table


def _needed(table: Table, i: int) -> int:
    """The width column `i` needs: its longest cell or its header, and padding."""
    col = table.columns[i]
    return max([len(str(c)) for c in col._cells] + [len(str(col.header))]) + 3


def split_to_fit(table: Table, width: int, keys: int = 1) -> list[Table]:
    """`table` as one or more tables no wider than `width`, each with the first `keys` columns
    (policy, id) and as many of the others as fit; cells are copied as they are, never cut."""
    n = len(table.columns)
    need = [_needed(table, i) for i in range(n)]
    if n <= keys:
        return [table]
    base = sum(need[:keys]) + 1
    groups: list[list[int]] = [[]]
    for i in range(keys, n):
        if groups[-1] and base + sum(need[j] for j in groups[-1]) + need[i] > width:
            groups.append([])
        groups[-1].append(i)
    parts = []
    for g, group in enumerate(groups):
        title = f"{table.title} ({g + 1}/{len(groups)})" if table.title and len(groups) > 1 else table.title
        part = Table(title=title, title_justify="left")
        chosen = list(range(keys)) + group
        for i in chosen:
            col = table.columns[i]
            part.add_column(col.header, justify=col.justify, no_wrap=True, min_width=need[i] - 3)
        for r in range(table.row_count):
            part.add_row(*(table.columns[i]._cells[r] for i in chosen))
        parts.append(part)
    return parts


def print_table(table: Table, out: Console | None = None, keys: int = 1) -> None:
    """Print `table`, split into narrower tables when the terminal is too narrow for it."""
    out = out or console()
    for part in split_to_fit(table, out.width, keys):
        out.print(part)


__all__ = ["UNLIMITED", "Col", "console", "make_table", "print_table", "split_to_fit"]

"""Errors about user input that name the file, the field, the value and what is allowed."""

from __future__ import annotations


class SpecError(ValueError):
    """Bad input. `problems` lists every problem found, each a full sentence."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))

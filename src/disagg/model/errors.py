"""Errors about user input that name the file, the field, the value and what is allowed."""

from __future__ import annotations


class SpecError(ValueError):
    """Bad input. `problems` lists every problem found, each a full sentence."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


def not_utf8(exc: UnicodeDecodeError) -> str:
    """What a file that is not UTF-8 text (binary, UTF-16, Latin-1) is told: the byte, where it stands."""
    byte = exc.object[exc.start:exc.start + 1].hex()
    return f"not UTF-8 text: byte 0x{byte} at offset {exc.start} ({exc.reason})"

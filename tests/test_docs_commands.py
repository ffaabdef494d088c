"""The README's and the docs' commands are commands of the CLI: every `disagg ...` line of a code block names
a command that exists, and each `--option` it passes is one that command takes. Docs drift when an option is
renamed or a command moves; a reader's copy-paste then fails on a fresh machine. (Read off the click tree
that Typer builds, not by running `--help` per line. Typer keeps its own copy of click, so a command
is told from a group by the subcommands it has.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer.main

from disagg.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: `disagg` (or `.venv/bin/disagg`) and what follows it up to the end of that shell command.
_COMMAND = re.compile(r"(?:^|[\s;&|(`$])(?:\.venv/bin/)?disagg((?:\s+[^;&|#`)]*)?)")


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """The lines inside fenced code blocks, with their line numbers."""
    out, inside = [], False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            out.append((n, line))
    return out


def _invocations(line: str) -> list[list[str]]:
    """Each `disagg` command of a shell line, as its words: a line may chain several (`;`, `&&`, `|`)."""
    return [m.group(1).split() for m in _COMMAND.finditer(line.split(" # ")[0])]


def _subcommands(command: Any) -> dict[str, Any]:
    """A group's subcommands by name; a command has none."""
    return dict(getattr(command, "commands", {}))


def _resolve(root: Any, words: list[str]) -> tuple[Any, list[str]]:
    """The deepest command the leading words name, and the words it was not named by."""
    command = root
    while words and words[0] in _subcommands(command):
        command, words = _subcommands(command)[words[0]], words[1:]
    return command, words


def _options(command: Any) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}


def _problems(root: Any, path: Path) -> list[str]:
    problems = []
    for n, line in _code_lines(path):
        for words in _invocations(line):
            if not words or words[0].startswith(("-", "<", "$")):
                continue  # `disagg --version`, a placeholder
            command, rest = _resolve(root, words)
            where = f"{path.name}:{n}: disagg {' '.join(words)}"
            if command is root:
                problems.append(f"{where}: no command {words[0]!r}")
                continue
            if _subcommands(command) and not getattr(command, "invoke_without_command", False):
                problems.append(f"{where}: {command.name} needs one of {sorted(_subcommands(command))}")
                continue
            for word in rest[:rest.index("--")] if "--" in rest else rest:  # (after `--`: the job's command)
                option = word.split("=", 1)[0]
                if option.startswith("--") and option not in _options(command):
                    problems.append(f"{where}: {command.name} takes no {option}")
    return problems


@pytest.fixture(scope="module")
def cli() -> Any:
    group = typer.main.get_command(app)
    assert "bench" in _subcommands(group)
    return group


def test_every_command_of_the_docs_is_one_the_cli_takes(cli: Any) -> None:
    seen = sum(len(_invocations(line)) for path in DOCS for _, line in _code_lines(path))
    assert seen > 50  # the README and docs show the CLI at work: a parser that finds none is broken
    problems = [p for path in DOCS for p in _problems(cli, path)]
    assert not problems, "\n".join(problems)


def test_the_check_fails_a_renamed_option_and_a_missing_command(cli: Any, tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("```sh\n.venv/bin/disagg bench sim paper --workers 1 --no-such-flag\n"
                   "disagg jobs; disagg frobnicate --now\ndisagg bench\ndisagg submit t -- sh --no-flag-of-ours\n"
                   "disagg tenants\n```\n"
                   "disagg frobnicate outside a code block is prose\n")
    problems = _problems(cli, doc)
    assert len(problems) == 3, problems
    assert "takes no --no-such-flag" in problems[0]
    assert "no command 'frobnicate'" in problems[1]
    assert "bench needs one of" in problems[2]

"""The shape of the code, checked by reading it with `ast` (issue 12's "done when").

Each rule is a function over a source root (the directory that holds the `disagg` package) that returns
its offences, one line each naming the module, the function or the line; the test asserts the list is
empty. Each rule also has a self-test on a tiny synthetic tree with one offence, so the rule can fail.

  - no import cycle among disagg's modules (module-level and function-level imports alike: a function
    that imports a module depends on it; imports under `if TYPE_CHECKING:` are for the type checker only);
  - the CLI is the outermost layer: no module outside `disagg/cli/` imports it (the benchmarks return
    data, the CLI prints it);
  - SQL only in `disagg/store/`: no import of SQLAlchemy and no SQL statement in a string elsewhere;
  - no function longer than 80 lines (Alembic migrations excepted);
  - job, slice, device (health, drain, the one word the API shows) and link state names as string literals
    in `disagg/model/states.py` only (the step, engine-run and outcome words that are the same names too).
"""

from __future__ import annotations

import ast
import gc
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from disagg.model.states import DeviceState, Drain, Health, JobState, LinkState, SliceState

SRC = Path(__file__).resolve().parent.parent / "src"
MAX_FUNCTION_LINES = 80
CLI = "disagg.cli"
STORE = "disagg.store"
MIGRATIONS = "disagg.store.migrations"
STATES_MODULE = "disagg.model.states"
#: The job and slice state names. Steps, engine runs and slice outcomes share most of these words
#: (failed, running, completed, cancelled, done), and their enums live in the same module: use those.
STATE_NAMES = frozenset(str(s) for enum in (JobState, SliceState, Health, Drain, LinkState, DeviceState)
                        for s in enum)


# --- reading the tree ---------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _collector_off() -> Iterator[None]:
    """Reading the tree makes about a million short-lived AST nodes. Late in the suite the heap that the
    live tests leave behind (FastAPI's bounded caches keep the endpoints of some tens of apps) is large,
    and the full collections these allocations set off walked all of it: 31 s for this module in the
    suite against 1 s alone. ASTs hold no reference cycles, so reference counting frees them all."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@cache
def _parsed(path: Path, text: str) -> ast.Module:
    """A module's tree, parsed once for all the rules that read it (keyed by its text too, so an edited
    file is parsed again)."""
    return ast.parse(text, str(path))


def parse(path: Path) -> ast.Module:
    return _parsed(path, path.read_text())


def modules(root: Path, package: str = "disagg") -> dict[str, Path]:
    """Every module of `package` under `root` by dotted name (a package by its own name, for its __init__)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of `tree`, in source order, except the bodies of `if TYPE_CHECKING:` (their `else:` is real code)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(reversed(node.orelse))
        else:
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of a module and of each class and function in it."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                ids.add(id(first.value))
    return ids


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str | None]]:
    """(module, name imported from it) for each import of `node`, relative imports resolved."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
        return
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    for alias in node.names:
        yield base, alias.name


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """module → {disagg module it imports: line of the first such import}.

    `from disagg.x import y` depends on `disagg.x.y` where that is a module, else on `disagg.x`; an import
    of a name the tree does not hold depends on the closest enclosing module that exists.
    """
    known = modules(root)
    graph: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        edges: dict[str, int] = {}
        tree = parse(path)
        for node in _nodes(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for base, item in _imported(name, path.name == "__init__.py", node):
                target = f"{base}.{item}" if item and f"{base}.{item}" in known else base
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


# --- the rules ----------------------------------------------------------------------------------
def import_cycles(root: Path) -> list[str]:
    """One cycle per strongly connected group of modules, as `a:line → b:line → … → a`."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_cycle_path(graph, group) for group in groups]


def _cycle_path(graph: dict[str, dict[str, int]], group: set[str]) -> str:
    """A shortest cycle through the first module of `group` (breadth first inside the group)."""
    start = min(group)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in came:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w in group and w not in came:
                    came[w] = v
                    nxt.append(w)
        frontier = nxt
    back = []  # the cycle walked backwards from start's predecessor
    v = came[start]
    while v != start:
        back.append(v)
        v = came[v]
    cycle = [start, *reversed(back)]
    hops = [f"{a} (line {graph[a][b]})" for a, b in zip(cycle, [*cycle[1:], start], strict=True)]
    return "import cycle: " + " → ".join([*hops, start])


def cli_importers(root: Path) -> list[str]:
    """Imports of `disagg.cli` (or a module of it) from a module outside it."""
    return [f"{module}:{line} imports {target} (only the CLI imports the CLI)"
            for module, edges in sorted(import_graph(root).items()) if not _within(module, CLI)
            for target, line in sorted(edges.items()) if _within(target, CLI)]


SQL = re.compile(
    r"^\s*(?:(?:SELECT|INSERT|UPDATE|DELETE|BEGIN|PRAGMA|CREATE|DROP|ALTER|VACUUM)\s"
    r"|(?i:select\s.+\sfrom\s|insert\s+into\s|update\s+\S+\s+set\s|delete\s+from\s|pragma\s+\w))",
    re.DOTALL)


#: The one module outside the store allowed SQL, and why: the emulated fabric stands in for hardware, and its
#: SQLite file is that hardware's own memory (what is attached, what is broken), which the controller
#: reconciles against after a crash exactly as against a real fabric. It must not share the controller's
#: database or its code: a real fabric's state is never in disagg's store.
SQL_ALLOWED = frozenset({"disagg.fabric.emulated"})


def sql_outside_store(root: Path, allowed: frozenset[str] = SQL_ALLOWED) -> list[str]:
    """Imports of SQLAlchemy and string literals that read as SQL statements, outside `disagg/store/`."""
    bad = []
    for name, path in modules(root).items():
        if _within(name, STORE) or name in allowed:
            continue
        tree = parse(path)
        docs = _docstrings(tree)
        for node in _nodes(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
                for base, _ in _imported(name, False, node):
                    if _within(base, "sqlalchemy"):
                        bad.append(f"{name}:{node.lineno} imports {base}")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                  and SQL.match(node.value)):
                bad.append(f"{name}:{node.lineno} issues SQL: {node.value.strip()[:60]!r}")
    return bad


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Functions (methods, nested functions) longer than `limit` lines, decorators not counted."""
    bad = []
    for name, path in modules(root).items():
        if _within(name, MIGRATIONS):
            continue
        tree = parse(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    bad.append(f"{name}:{node.lineno} {node.name}() is {lines} lines (at most {limit})")
    return bad


#: The words of a state that some module uses for something else, and why (module, word).
STATE_WORDS_ALLOWED = frozenset({
    ("disagg.sim.report", "done"),  # the simulator's table heads its completed-jobs column "done" (e.g. 89/120)
    # the columns devices.drained and links.up (booleans: the enums are Drain and LinkState), and the API's
    # `drained` field of a device, named where they are written, read or shown
    ("disagg.store.lifecycle", "drained"), ("disagg.store.lifecycle", "up"),
    ("disagg.store.repository", "drained"), ("disagg.store.repository", "up"),
    ("disagg.store.views", "drained"), ("disagg.cli.inventory", "drained"),
    ("disagg.api.dashboard.fabric", "down"),  # the fabric page's list of the down links
    ("disagg.engines.slurm_cluster", "up"), ("disagg.engines.slurm_node", "up"),  # `ip link set <if> up`
    ("disagg.fabric.redfish_client", "unreachable"),  # an AssertionError's text for code never reached
    ("disagg.engines.slurm", "held"),  # Slurm's own word for a job it holds (the engine's RunState)
    ("disagg.sim.tenants", "held"),  # what a tenant holds (its usage), not the job state `held`
})


def state_literals(root: Path, names: frozenset[str] = STATE_NAMES,
                   allowed: frozenset[tuple[str, str]] = STATE_WORDS_ALLOWED) -> list[str]:
    """String literals equal to a state name outside the states module (docstrings and f-strings aside)."""
    found: list[tuple[str, int, int, str]] = []
    for name, path in modules(root).items():
        if name == STATES_MODULE or _within(name, MIGRATIONS):
            continue
        tree = parse(path)
        skip = _docstrings(tree)
        for node in _nodes(tree):
            if isinstance(node, ast.JoinedStr):
                skip.update(id(v) for v in node.values)
        found += [(name, node.lineno, node.col_offset, node.value) for node in _nodes(tree)
                  if isinstance(node, ast.Constant) and node.value in names and id(node) not in skip]
    return [f"{name}:{line} names the state {value!r} (use the enum in {STATES_MODULE})"
            for name, line, _, value in sorted(found) if (name, value) not in allowed]


# --- the tree as it is ----------------------------------------------------------------------------
def test_no_import_cycle_among_disagg_modules() -> None:
    cycles = import_cycles(SRC)
    assert not cycles, "\n".join(cycles)


def test_nothing_outside_the_cli_imports_it() -> None:
    bad = cli_importers(SRC)
    assert not bad, "\n".join(bad)


def test_only_the_store_speaks_sql() -> None:
    bad = sql_outside_store(SRC)
    assert not bad, "\n".join(bad)


def test_no_function_longer_than_80_lines() -> None:
    bad = long_functions(SRC)
    assert not bad, "\n".join(bad)


def test_state_names_are_literals_in_the_states_module_only() -> None:
    bad = state_literals(SRC)
    assert not bad, "\n".join(bad)


# --- each rule finds what it is meant to find ------------------------------------------------------
def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_through_relative_and_function_level_imports_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "disagg/__init__.py": "",
        "disagg/a/__init__.py": "",
        "disagg/a/one.py": "from ..b import two\n",                      # a.one → b.two (a submodule)
        "disagg/b/__init__.py": "",
        "disagg/b/two.py": "def f():\n    from disagg.a.one import g\n",  # b.two → a.one, inside a function
        "disagg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import disagg.a.one\n",
    })
    cycles = import_cycles(root)
    assert cycles == ["import cycle: disagg.a.one (line 1) → disagg.b.two (line 2) → disagg.a.one"]
    assert import_graph(root)["disagg.c"] == {}, "imports for the type checker alone are no dependency"


def test_no_cycle_is_reported_for_a_chain(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"disagg/__init__.py": "", "disagg/a.py": "from disagg import b\n",
                            "disagg/b.py": "from disagg.c import X\n", "disagg/c.py": "X = 1\n"})
    assert import_cycles(root) == []
    assert import_graph(root)["disagg.a"] == {"disagg.b": 1}
    assert import_graph(root)["disagg.b"] == {"disagg.c": 1}


def test_an_import_of_the_cli_from_the_library_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "disagg/__init__.py": "",
        "disagg/cli/__init__.py": "from disagg.cli import serve\n",
        "disagg/cli/serve.py": "from disagg.bench import crash\n",
        "disagg/bench/__init__.py": "",
        "disagg/bench/crash.py": "def start():\n    from disagg.cli.serve import main\n",
    })
    assert cli_importers(root) == ["disagg.bench.crash:2 imports disagg.cli.serve (only the CLI imports the CLI)"]


def test_sqlalchemy_and_sql_strings_are_found_outside_the_store_only(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "disagg/__init__.py": "",
        "disagg/api.py": ('"""SELECT is fine in a docstring."""\n'
                          "def f():\n    from sqlalchemy.exc import SQLAlchemyError\n"
                          "    return 'UPDATE jobs SET state = 1', 'update the slice', 'select a device'\n"),
        "disagg/store/__init__.py": "import sqlalchemy\nQ = 'SELECT 1'\n",
    })
    assert sql_outside_store(root) == ["disagg.api:3 imports sqlalchemy.exc",
                                       "disagg.api:4 issues SQL: 'UPDATE jobs SET state = 1'"]


def test_a_long_function_is_found_but_not_in_migrations(tmp_path: Path) -> None:
    body = "def long():\n" + "    x = 1\n" * 80
    root = _tree(tmp_path, {"disagg/__init__.py": "", "disagg/m.py": "def short():\n    pass\n\n\n" + body,
                            "disagg/store/migrations/v1.py": body})
    assert long_functions(root) == ["disagg.m:5 long() is 81 lines (at most 80)"]


def test_state_literals_are_found_outside_the_states_module(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "disagg/__init__.py": "",
        "disagg/model/states.py": "QUEUED = 'queued'\n",
        "disagg/loop.py": ('"""Jobs go from queued to running."""\n'
                           "def f(job):\n    '''running'''\n"
                           "    print(f'{job}' f'queued')\n"
                           "    return job.state == 'tearing-down' or job.step == 'done'\n"),
    })
    assert state_literals(root) == [
        "disagg.loop:5 names the state 'tearing-down' (use the enum in disagg.model.states)",
        "disagg.loop:5 names the state 'done' (use the enum in disagg.model.states)",
    ]


def test_the_loop_the_slice_runner_and_the_api_see_the_store_through_their_ports() -> None:
    """Issue 24: each part gets a narrow port of the store (`store/ports.py`), never the whole `Store`:
    mypy then refuses an operation outside the port, and the leader's fenced writes are the loop's and
    the slice runner's ports only."""
    loop = (SRC / "disagg" / "control" / "loop.py").read_text()
    assert "self.store: LoopPort = store" in loop
    runner = (SRC / "disagg" / "control" / "slice.py").read_text()
    assert re.search(r"class SliceRunner:.*?store: SlicePort,", runner, re.S)
    for path in sorted((SRC / "disagg" / "api").rglob("*.py")):
        text = path.read_text()
        assert not re.search(r"store: Store\b(?!Dep)", text.replace("store: Store = request.app.state.store", "")), path

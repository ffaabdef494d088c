"""The CLI as a new operator meets it offline (issue 25): whole ids from `disagg place` piped, help that
is never cut, the same default policy as `disagg serve`, counts in words, and the demo's real URL."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from disagg.cli import simulate
from disagg.cli.place import DEFAULT_POLICY
from disagg.control.config import Config
from disagg.display import count
from disagg.profiles.learn import EXPLORE

ROOT = Path(__file__).resolve().parents[1]


def disagg(*args: str) -> subprocess.CompletedProcess[str]:
    """`disagg ARGS` with its stdout a pipe (as `disagg ... | cat`)."""
    return subprocess.run([sys.executable, "-m", "disagg.cli", *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, timeout=120, cwd=ROOT)


def test_place_piped_keeps_every_id_whole() -> None:
    out = disagg("place", "--cluster", "examples/drmaestro-testbed.yaml", "--jobs", "examples/drmaestro-jobs.yaml")
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout
    tasks = re.findall(r"\b(hotspot-1/\d)\b", out.stdout)
    assert sorted(tasks) == ["hotspot-1/0", "hotspot-1/1"]  # two tasks, two lines, never one cut name
    assert "pathfinder-1/0" in out.stdout


#: What a client command has no use for; each of them cost tens to hundreds of ms of every command (the CLI
#: took 0.9 s to list jobs, 0.5 s of it imports and a CA bundle read for a plain-HTTP URL).
HEAVY = ("numpy", "ortools", "sqlalchemy", "alembic", "fastapi", "starlette", "uvicorn", "matplotlib", "yaml")


@pytest.mark.parametrize("args", [("--help",), ("jobs",), ("machines", "-o", "wide"), ("submit", "x", "--", "true"),
                                  ("logs", "j-1")])
def test_the_help_and_the_client_commands_load_no_heavy_library(args: tuple[str, ...]) -> None:
    """Every `disagg` command imports the whole CLI for its help: the command modules keep the simulator,
    the policies, the store, the API and the specs' readers inside the commands that use them."""
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print('LOADED', *sorted({m.split('.')[0] for m in sys.modules}"
             f" & set({HEAVY!r})), file=sys.stderr))\n"
             "from disagg.cli import main\n"
             "main()\n")
    where = [] if args == ("--help",) else ["--url", "http://127.0.0.1:9", "--token", "t"]
    out = subprocess.run([sys.executable, "-c", probe, args[0], *where, *args[1:]], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    loaded = next(line for line in out.stderr.splitlines() if line.startswith("LOADED"))
    assert loaded == "LOADED", (loaded, out.stderr[-500:])
    if args != ("--help",):  # it did try the controller (nothing listens on port 9)
        assert out.returncode == 1 and "cannot reach the controller" in out.stderr, out.stderr


def test_simulates_explore_default_is_the_learners() -> None:
    assert simulate.EXPLORE == EXPLORE


def test_place_defaults_to_the_policy_serve_uses_and_counts_in_words() -> None:
    assert Config().policy == DEFAULT_POLICY
    out = disagg("place", "--cluster", "examples/drmaestro-testbed.yaml", "--jobs", "examples/drmaestro-jobs.yaml")
    assert out.stdout.startswith(f"{Config().policy}: placed 6 jobs")
    assert re.search(r"waiting 1 job\s*\n", out.stdout)
    assert "job(s)" not in out.stdout
    assert (count(0, "job"), count(1, "job"), count(2, "job")) == ("no jobs", "1 job", "2 jobs")


def test_help_is_never_cut_and_a_flag_has_no_type() -> None:
    top = disagg("--help").stdout
    assert "<bool>" not in top and "--version" in top
    assert "One scheduling round on a cluster spec and a jobs spec, as a dry run: decisions and reasons." in top
    sub = disagg("submit", "--help").stdout
    assert "--not-preemptible" in sub and "…" not in sub
    simulate = disagg("simulate", "--help").stdout
    assert "drmaestro,drmaestro-na,firmament,greedy,random-remote,fifo" in simulate


def test_demo_names_no_port_of_its_own() -> None:
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    said = demo[demo.index("cat <<'MSG'"):demo.index("\nMSG\n")]
    assert not re.search(r"127\.0\.0\.1:\d+", said)  # the serve banner's `clients:` line names the real URL


def test_every_links_example_of_the_docs_names_one_link_of_the_shipped_cluster() -> None:
    from disagg.model import load_cluster

    cluster = load_cluster(ROOT / "src" / "disagg" / "control" / "default_cluster.yaml")
    links = [f"up:{m.name}" for m in cluster.machines] + [f"up:{p.name}" for p in cluster.pools] + [
        f"rack:{r}" for r in {m.rack for m in cluster.machines}]
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "src" / "disagg" / "cli" / "inventory.py"]
    examples = [(p.name, ex) for p in texts for ex in re.findall(r"disagg links (?:fail|repair)(?:\|repair)? ([^\s`]+)",
                                                                  p.read_text())]
    assert examples
    for where, ex in examples:
        if ex.startswith("<"):
            continue  # a placeholder, not an example
        matches = [lk for lk in links if lk.startswith(ex)]
        assert len(matches) == 1, f"{where}: `disagg links fail {ex}` matches {matches}"

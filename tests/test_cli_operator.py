"""The CLI as a new operator meets it offline (issue 25): whole ids from `disagg place` piped, help that
is never cut, the same default policy as `disagg serve`, counts in words, and the demo's real URL."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from disagg.cli.place import DEFAULT_POLICY
from disagg.control.config import Config
from disagg.display import count

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

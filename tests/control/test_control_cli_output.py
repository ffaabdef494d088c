"""The CLI as a user in an ordinary terminal meets it: whole ids in piped and narrow output, any
unique beginning of an id, an ambiguous one exiting 2 with the matches, `--version`, the devices a
job asks for per task, the serve banner's real URL, and `simulate` tables that fit."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_helpers import Server, admin_token, wait_for
from typer.testing import CliRunner

from disagg.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    root = tmp_path_factory.mktemp("cli")
    srv = Server(root, f"sqlite:///{root / 'd.db'}", ["--latency-scale", "0.002", "--tick-s", "0.02",
                                                      "--round-gap-s", "0.02"])
    srv.start()
    try:
        srv.ready()
        token = admin_token(root)
        yield srv, token
    finally:
        srv.kill()


def cli(server: tuple[Server, str], *args: str, columns: int | None = None) -> tuple[int, str, str]:
    """`disagg ARGS` as a user runs it: its own process, its stdout a pipe (or a terminal's width)."""
    srv, token = server
    env = {"DISAGG_URL": srv.url, "DISAGG_TOKEN": token, "PATH": "/usr/bin:/bin"}
    if columns:
        env["COLUMNS"] = str(columns)
    out = subprocess.run([sys.executable, "-m", "disagg.cli", *args], capture_output=True, text=True, env=env,
                         timeout=60)
    return out.returncode, out.stdout, out.stderr


def test_version() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and re.fullmatch(r"disagg \d+\.\d+\.\d+\S*\n", r.stdout)


def test_ids_are_whole_piped_and_in_a_narrow_terminal_and_prefixes_work(server: tuple[Server, str]) -> None:
    code, out, err = cli(server, "submit", "a-job-with-a-rather-long-name", "--gpus", "1", "--nvme", "1",
                         "--fpga", "0", "--memory", "0", "--json", "--", "sleep", "30")
    assert code == 0, err
    first = json.loads(out)
    assert (first["tasks"]["gpu"], first["tasks"]["nvme"], first["tasks"]["fpga"], first["tasks"]["memory"]) == (
        1, 1, 0, 0)
    second = json.loads(cli(server, "submit", "b", "--json", "--", "true")[1])["id"]
    for columns in (None, 60):  # piped (natural width), then a 60-column terminal
        code, out, _ = cli(server, "jobs", columns=columns)
        assert code == 0 and first["id"] in out and second in out, out
    code, out, _ = cli(server, "jobs")
    header = next(line for line in out.splitlines() if "devices per task" in line)
    assert "waited (time / rounds)" in header
    row = next(line for line in out.splitlines() if first["id"] in line)
    assert "1 gpu, 1 nvme" in row and "a-job-with-a-rather-long-name" in row
    # any unique beginning of an id, in every command that takes one
    short = next(first["id"][:n] for n in range(3, 15) if not second.startswith(first["id"][:n]))
    code, out, _ = cli(server, "jobs", short, "--json")
    assert code == 0 and json.loads(out)["id"] == first["id"]
    assert cli(server, "events", short)[0] == 0 and "submitted" in cli(server, "events", short)[1]
    code, out, err = cli(server, "jobs", "j-")
    assert code == 2 and "ambiguous" in err and first["id"] in err and second in err
    code, out, _ = cli(server, "cancel", short)
    assert code == 0 and f"job {first['id']} is cancelled" in out
    wide = cli(server, "jobs", "-o", "wide")[1]
    assert "cpus per task" in wide and "gpus in all" in wide


def test_device_and_link_names_are_whole_when_piped(server: tuple[Server, str]) -> None:
    code, out, _ = cli(server, "devices")
    assert code == 0 and all(f"iobox0/gpu{i}" in out for i in range(5)) and "…" not in out
    code, out, _ = cli(server, "links")
    assert code == 0 and "up:iobox0" in out and "use %" in out and "…" not in out


def test_serve_names_the_port_it_really_listens_on(tmp_path: Path) -> None:
    srv = Server(tmp_path, f"sqlite:///{tmp_path / 'd.db'}", ["--latency-scale", "0.002", "--port", "0"])
    srv.start()
    try:
        log_file = tmp_path / "server.log"
        wait_for(lambda: log_file.exists() and "disagg controller on http://127.0.0.1:" in log_file.read_text(),
                 what="the banner")
        log = (tmp_path / "server.log").read_text()
        port = int(re.search(r"disagg controller on http://127\.0\.0\.1:(\d+) ", log).group(1))  # type: ignore[union-attr]
        assert port not in (0, srv.port)  # `--port 0` came last: the system chose a port, and the banner says it
        import httpx

        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        srv.kill()


def test_simulate_tables_fit_a_narrow_terminal_without_cutting_numbers() -> None:
    env = {"COLUMNS": "80", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "disagg.cli", "simulate", "--scenario", "paper-4m-128j",
                          "--policies", "drmaestro,fifo"], capture_output=True, text=True, env=env, timeout=300,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "…" not in out.stdout and max(len(line) for line in lines if "│" in line) <= 80
    assert "(1/2)" in out.stdout and "wall s" in out.stdout and "makespan s" in out.stdout

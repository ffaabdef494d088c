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
    # sleep 600: it is cancelled below, however long the CLI calls take on a busy machine (30 s was passed)
    code, out, err = cli(server, "submit", "a-job-with-a-rather-long-name", "--gpus", "1", "--nvme", "1",
                         "--fpga", "0", "--memory", "0", "--json", "--", "sleep", "600")
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
    assert "waited (until start / rounds)" in header
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
    assert "submitted (UTC)" in wide and "started (UTC)" in wide and "ended (UTC)" in wide and "ran" in wide


def test_device_and_link_names_are_whole_when_piped(server: tuple[Server, str]) -> None:
    code, out, _ = cli(server, "devices")
    assert code == 0 and all(f"iobox0/gpu{i}" in out for i in range(5)) and "…" not in out
    code, out, _ = cli(server, "links")
    assert code == 0 and "up:iobox0" in out and "use %" in out and "…" not in out


def test_devices_behind_a_down_link_read_unreachable_in_the_default_tables(server: tuple[Server, str]) -> None:
    """`disagg links fail up:iobox1`: `disagg devices` (no -o wide) says its NVMe drives are unreachable,
    not free, and `disagg machines` says iobox1 is (issue 21, reproduction 4)."""
    assert cli(server, "links", "fail", "up:iobox1")[0] == 0
    try:
        code, out, _ = cli(server, "devices")
        rows = {d: line for line in out.splitlines() for d in re.findall(r"iobox\d/\w+\d", line)}
        assert code == 0 and all("unreachable" in rows[f"iobox1/nvme{i}"] for i in range(4)), out
        assert "unreachable" not in rows["iobox0/gpu0"]
        code, out, _ = cli(server, "machines")
        assert code == 0 and "unreachable" in next(line for line in out.splitlines() if "iobox1" in line), out
    finally:
        assert cli(server, "links", "repair", "up:iobox1")[0] == 0


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


def test_every_id_a_command_takes_may_be_a_unique_beginning(server: tuple[Server, str]) -> None:
    """Devices, links, slices and tenants as jobs: unique → that one; shared → exit 2 naming each
    match; unknown → exit 2 naming what was typed."""
    code, out, err = cli(server, "devices", "drain", "iobox1/nvme3", "--json")
    assert code == 0 and json.loads(out)["id"] == "iobox1/nvme3" and json.loads(out)["drained"], err
    for args, whole in ((("devices", "repair", "iobox1/nvme3"), "device iobox1/nvme3 is "),
                        (("links", "fail", "rack"), "link rack:r0 is down"),
                        (("links", "repair", "rack"), "link rack:r0 is up")):
        code, out, err = cli(server, *args)
        assert code == 0 and whole in out, err
    for args, named in ((("devices", "fail", "iobox1/nvme"), [f"iobox1/nvme{i}" for i in range(4)]),
                        (("links", "fail", "up:iobox"), ["up:iobox0", "up:iobox1"])):
        code, _, err = cli(server, *args)
        assert code == 2 and "ambiguous" in err and all(n in err for n in named), err
    for args in (("devices", "drain", "nope9"), ("links", "repair", "nope9"), ("slices", "nope9"),
                 ("tenants", "show", "nope9")):
        code, _, err = cli(server, *args)
        assert code == 2 and "404" in err and "'nope9'" in err, (args, err)
    sid = json.loads(cli(server, "submit", "sl", "--json", "--", "true")[1])["id"]
    wait_for(lambda: json.loads(cli(server, "jobs", sid, "--json")[1])["slice"] is not None, what="a slice")
    whole = json.loads(cli(server, "jobs", sid, "--json")[1])["slice"]
    others = [s["id"] for s in json.loads(cli(server, "slices", "--json")[1])["slices"] if s["id"] != whole]
    short = next(whole[:n] for n in range(3, 15) if not any(o.startswith(whole[:n]) for o in others))
    code, out, err = cli(server, "slices", short)
    assert code == 0 and whole in out and "launch-machine" in out and "steps" in out, err
    assert json.loads(cli(server, "slices", short, "--json")[1])["id"] == whole
    if others:
        code, _, err = cli(server, "slices", "s-")
        assert code == 2 and "ambiguous" in err and whole in err and others[0] in err
    code, out, _ = cli(server, "tenants", "show", "adm")
    assert code == 0 and "admin" in out and "unix user" in out


def test_token_revoke_takes_the_id_whole_and_names_an_unknown_one(server: tuple[Server, str]) -> None:
    code, _, err = cli(server, "token", "revoke", "999999")
    assert code == 2 and "no token 999999" in err


@pytest.mark.parametrize(("args", "wide_header"), [
    (("slices",), "created (UTC)"), (("machines",), "devices"), (("devices",), "reachable"),
    (("links",), "use %"), (("tenants",), "unix user"), (("token", "list"), "expires (UTC)")],
    ids=["slices", "machines", "devices", "links", "tenants", "tokens"])
def test_every_listing_prints_whole_ids_piped_wide_and_as_json(server: tuple[Server, str], args: tuple[str, ...],
                                                               wide_header: str) -> None:
    key = "tokens" if args[0] == "token" else args[0]
    code, out, err = cli(server, *args, "--json")
    assert code == 0, err
    items = json.loads(out)[key]
    assert items and json.loads(cli(server, *args, "-o", "json")[1])[key] == items
    ident = "name" if key == "tenants" else "id"
    for extra in ((), ("-o", "wide")):
        code, out, _ = cli(server, *args, *extra)
        assert code == 0 and "…" not in out
        assert all(str(i[ident]) in out for i in items), out
    assert wide_header in cli(server, *args, "-o", "wide")[1]
    for narrow in (cli(server, *args, columns=60)[1],):  # a narrow terminal folds text, never an id
        assert all(str(i[ident]) in narrow for i in items if len(str(i[ident])) < 30), narrow


def test_listings_follow_every_page_and_get_each_item_once(server: tuple[Server, str]) -> None:
    """More than one page of 500 (tokens written straight into the store), and small pages
    (DISAGG_PAGE_SIZE) of every other listing: each item exactly once, in the API's order."""
    from disagg.store import Store

    srv, token = server
    store = Store(srv.db)
    try:
        for i in range(520):
            store.issue_token(f"page{i}")
    finally:
        store.close()
    direct = [t["id"] for t in _api_pages(srv.url, token, "/v1/tokens", "tokens")]
    assert len(direct) > 520
    code, out, err = cli(server, "token", "list", "--json")
    assert code == 0, err
    assert [t["id"] for t in json.loads(out)["tokens"]] == direct  # every page, each once
    table = cli(server, "token", "list")[1]
    assert all(f"page{i} " in table for i in range(520))
    # (The 520 tokens in pages of 100, not 2: 260 requests took 20 s and showed nothing six pages do not.)
    for args, key, size in ((("jobs",), "jobs", 2), (("slices",), "slices", 2), (("devices",), "devices", 2),
                            (("links",), "links", 2), (("machines",), "machines", 2),
                            (("token", "list"), "tokens", 100)):
        whole = json.loads(cli(server, *args, "--json")[1])[key]
        small = json.loads(_cli_env(server, {"DISAGG_PAGE_SIZE": str(size)}, *args, "--json"))[key]
        assert len(whole) > size and [i["id"] for i in small] == [i["id"] for i in whole], args
    code, _, err = _cli_env_full(server, {"DISAGG_PAGE_SIZE": "0"}, "devices")
    assert code == 2 and "DISAGG_PAGE_SIZE" in err


def _api_pages(url: str, token: str, path: str, key: str) -> list[dict[str, object]]:
    """Every item of a listing, asked of the API directly (pages of 100)."""
    import httpx

    items: list[dict[str, object]] = []
    nxt: str | None = f"{path}?limit=100"
    while nxt:
        page = httpx.get(url + nxt, headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
        items += page[key]
        nxt = page.get("next")
    return items


def _cli_env_full(server: tuple[Server, str], env: dict[str, str], *args: str) -> tuple[int, str, str]:
    srv, token = server
    full = {"DISAGG_URL": srv.url, "DISAGG_TOKEN": token, "PATH": "/usr/bin:/bin", **env}
    out = subprocess.run([sys.executable, "-m", "disagg.cli", *args], capture_output=True, text=True, env=full,
                         timeout=60)
    return out.returncode, out.stdout, out.stderr


def _cli_env(server: tuple[Server, str], env: dict[str, str], *args: str) -> str:
    code, out, err = _cli_env_full(server, env, *args)
    assert code == 0, err
    return out

"""Profiles learned by the live controller (issue 26): jobs of a new image whose tasks run longer when
their device is remote teach the controller a profile that `GET /v1/profiles/{image}` and `disagg
profiles` show, and that changes the network-aware policy's next decisions."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from tests.control.conftest import auth
from tests.control.control_helpers import job, make_service, wait_for, wait_state

from disagg.api.app import create_app
from disagg.control.service import Service
from disagg.profiles.learn import cold_bound, remote_slowdown

CLUSTER = """
machines:
  - {name: m0, rack: r0, cpus: 8, memory_gb: 32, uplink_gbps: 10, devices: {gpu: {model: K80, count: 1}}}
  - {name: m1, rack: r0, cpus: 8, memory_gb: 32, uplink_gbps: 10}
pools:
  - {name: box0, rack: r0, uplink_gbps: 40, devices: {gpu: {model: K80, count: 3}}}
"""

#: The test image's tasks: 1.2 s when a device of theirs sits elsewhere than their host, 0.3 s otherwise.
SLEEPER = ('r=""; for d in $(echo "$DISAGG_DEVICES" | tr , " "); do case "$d" in "$DISAGG_HOST"/*) ;; *) r=1;; '
           'esac; done; if [ -n "$r" ]; then sleep 1.2; else sleep 0.3; fi')
IMAGE = "acme/sleeper:1"


@pytest.fixture
def learning(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Service, TestClient, str]]:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(CLUSTER)
    jobs_dir = Path(tempfile.mkdtemp(prefix="disagg-profiles-jobs-"))  # its own: /var/lib's is shared
    jobs_dir.chmod(0o711)
    more = getattr(request, "param", {})  # config for one test (indirect parametrisation)
    svc = make_service(tmp_path, cluster=str(spec), history_every_s=0.2, jobs_dir=str(jobs_dir), **more)
    svc.controller.start()
    token = svc.store.create_token("admin", admin=True)
    with TestClient(create_app(svc.jobs)) as client:
        yield svc, client, token
    svc.close()
    shutil.rmtree(jobs_dir, ignore_errors=True)


def _body(name: str, gpu: int, slo_s: float = 600.0, command: str = SLEEPER) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "command": ["sh", "-c", command], "slo_s": slo_s, "importance": 1.0,
            "tasks": {"count": 1, "cpus": 1, "memory_gb": 1, "gpu": gpu}}


def _submit(svc: Service, body: dict[str, Any]) -> str:
    created, _ = svc.jobs.submit("t", body)
    return str(created["id"])


def test_a_new_image_is_learned_and_its_profile_changes_the_next_decisions(
        learning: tuple[Service, TestClient, str]) -> None:
    svc, client, token = learning
    # Before any run the image is unknown: neutral, and a tight SLO is no reason to wait.
    assert client.get(f"/v1/profiles/{IMAGE}", headers=auth(token)).status_code == 404
    blocker = _submit(svc, _body("blocker", 1, command="sleep 30"))  # takes m0's local GPU
    wait_state(svc, blocker, ("running",))
    first = _submit(svc, _body("tight-before", 1, slo_s=0.8))
    wait_state(svc, first, ("running", "completed"), timeout=10)  # placed at once, remote
    svc.jobs.cancel(blocker)
    wait_state(svc, first, ("completed",), timeout=30)
    # Teach it: local and remote runs of the image (four GPU jobs at once: one local, three remote).
    for rnd in range(3):
        ids = [_submit(svc, _body(f"teach{rnd}-{i}", 1)) for i in range(4)]
        ids.append(_submit(svc, _body(f"teach{rnd}-cpu", 0)))
        for i in ids:
            wait_state(svc, i, ("completed",), timeout=60)

    def learned() -> dict[str, Any] | None:
        out = client.get(f"/v1/profiles/{IMAGE}", headers=auth(token))
        return out.json() if out.status_code == 200 and (out.json().get("learned") or {}).get(
            "observations", 0) >= 12 else None

    def taught() -> int:  # the teaching runs looked at (each keeps its job's SLO, 600 s)
        return sum(o[3] == 600.0 for o in svc.store.observations_of("sleeper"))

    # (12 observations may count the tight job's with 11 of the teaching runs: a learning pass can come
    # between two of their ends; wait for all 12 teaching GPU runs, as the assertions below read them)
    wait_for(lambda: taught() >= 12 and learned() is not None, 30, "the image's profile to be learned from 12 tasks")
    view = learned()
    assert view is not None and view["used"] == "learned" and view["image"] == "sleeper"
    lr = view["learned"]
    assert lr["remote_observations"] >= 6
    # 1.2 s remote against 0.3 s local, plus the controller's overheads: a run ends when a poll sees it, and
    # that lag adds to both and pulls the ratio down. 2.8-3.5 here with two cores kept busy; 1.81 once in a
    # full suite run on a loaded machine (the fit's rmse 0.56 s against the usual 0.02-0.05 s).
    assert 1.5 < lr["slowdown"] < 6.0, lr
    assert lr["slowdown_pessimistic"] >= lr["slowdown"]
    assert 0.0 < lr["slowdown_sd"] < lr["slowdown"], lr  # the estimate's own doubt, shown beside it
    # each observation keeps its job's SLO (the fit's size statement: profiles.learn.sized_runs)
    assert {o[3] for o in svc.store.observations_of("sleeper")} <= {0.8, 600.0, None}
    assert taught() >= 12
    # and what its remote devices drew: on the emulated fabric, what was reserved (the neutral 1 Gbit/s)
    drawn = [o[4] for o in svc.store.observations_of("sleeper") if o[1] > 0]
    assert drawn and all(g == pytest.approx(1.0) for g in drawn), drawn
    assert lr["drawn_gbps"] == pytest.approx(1.0) and lr["profile"]["network_gbps"] == pytest.approx(1.0)
    listed = client.get("/v1/profiles", headers=auth(token)).json()["profiles"]
    assert any(v["image"] == "sleeper" and v["used"] == "learned" for v in listed)
    assert any(v["image"] == "nw" and v["used"] == "table" for v in listed)
    # A job placed now says in its history which profile placed it, and how sure it was.
    noted = _submit(svc, _body("noted", 0))
    wait_state(svc, noted, ("completed",), timeout=30)
    events = client.get(f"/v1/jobs/{noted}/events", headers=auth(token)).json()["events"]
    assert any("placed by the learned profile of sleeper" in (e["why"] or "") for e in events), events
    # Now the same tight-SLO job, with only remote GPUs free, waits: remote misses its SLO.
    blocker = _submit(svc, _body("blocker2", 1, command="sleep 30"))
    wait_state(svc, blocker, ("running",))
    after = _submit(svc, _body("tight-after", 1, slo_s=0.8))
    wait_for(lambda: job(svc, after)["wait_rounds"] >= 5, 20, "five rounds with the job waiting")
    seen = job(svc, after)
    assert seen["state"] == "queued", seen
    assert seen["reason_code"] in ("slo-at-risk", "postponed"), seen


def test_an_admin_pins_and_unpins_a_profile_and_a_path_naming_no_image_is_refused(
        learning: tuple[Service, TestClient, str]) -> None:
    svc, client, admin = learning
    tenant = svc.store.create_token("t")
    numbers = {"base_s": 60.0, "transfer_share": 0.5, "remote_factor": 2.0, "load_sensitivity": 1.0,
               "network_gbps": 4.0}
    assert client.put("/v1/profiles/acme/pinned:3", json=numbers, headers=auth(tenant)).status_code == 403
    pinned = client.put("/v1/profiles/acme/pinned:3", json=numbers, headers=auth(admin))
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["used"] == "pinned" and pinned.json()["image"] == "pinned"
    assert client.get("/v1/profiles/pinned", headers=auth(admin)).json()["pinned"]["remote_factor"] == 2.0
    for empty in (":", "rodinia-", "registry.io/:7"):
        for method in ("GET", "PUT", "DELETE"):
            out = client.request(method, f"/v1/profiles/{empty}", json=numbers, headers=auth(admin))
            assert out.status_code == 404 and "names no image" in out.json()["detail"], (method, empty, out.text)
    assert client.get("/v1/profiles", headers=auth(admin)).json()["profiles"][0]["image"] != ""
    assert client.delete("/v1/profiles/acme/pinned:3", headers=auth(admin)).status_code == 204
    assert client.delete("/v1/profiles/acme/pinned:3", headers=auth(admin)).status_code == 404
    assert client.get("/v1/profiles/pinned", headers=auth(admin)).status_code == 404


def test_a_remote_run_in_flight_is_counted_for_its_image(learning: tuple[Service, TestClient, str]) -> None:
    """What `profiles.learn.exploring` counts besides the finished runs: slices of the image running
    with a remote device (a local one does not count, nor another image's)."""
    from disagg.profiles import normalize_image

    svc, _, _ = learning
    local = _submit(svc, _body("local", 1, command="sleep 30"))  # m0's own GPU
    wait_state(svc, local, ("running",))
    remote = _submit(svc, _body("remote", 1, command="sleep 30"))  # only the pool's are left
    wait_state(svc, remote, ("running",))
    assert svc.store.remote_in_flight({"sleeper"}.__contains__, normalize_image) == {"sleeper": 1}
    assert svc.store.remote_in_flight({"other"}.__contains__, normalize_image) == {}
    # The round's own snapshot read will do (`max_age_s`): the same count, with no second read of the slices.
    read: list[str] = []
    me = threading.get_ident()  # (the loop's own rounds read on the same engine meanwhile)
    listen = lambda *a: read.append(a[2]) if threading.get_ident() == me else None  # noqa: E731 - (conn, cursor, statement, ...)
    svc.store.cluster()
    event.listen(svc.store.read_engine, "before_cursor_execute", listen)
    try:
        assert svc.store.remote_in_flight({"sleeper"}.__contains__, normalize_image, max_age_s=60) == {"sleeper": 1}
    finally:
        event.remove(svc.store.read_engine, "before_cursor_execute", listen)
    assert read and not [q for q in read if "FROM slices" in q], read
    for j in (local, remote):
        svc.jobs.cancel(j)
    wait_for(lambda: svc.store.remote_in_flight({"sleeper"}.__contains__, normalize_image) == {}, 30,
             "the remote run to end")


@pytest.mark.parametrize("learning", [{"profiles_explore": 1}], indirect=True)
def test_an_image_with_no_finished_run_is_cautious_once_its_remote_runs_in_flight_reach_explore(
        learning: tuple[Service, TestClient, str]) -> None:
    """Before its first run ends an image has no estimate, and the neutral profile says "remote is free":
    with `explore` remote runs of it in flight, its next jobs are priced by the prior's bound
    (`learn.cold_bound`), so a tight-SLO job waits for a local GPU instead of going remote."""
    svc, client, token = learning
    blocker = _submit(svc, _body("blocker", 1, command="sleep 30"))  # m0's local GPU: not counted
    wait_state(svc, blocker, ("running",))
    assert svc.controller.profiles.round_table().get("sleeper") is None  # nothing remote in flight: neutral
    flying = _submit(svc, _body("flying", 1, command="sleep 30"))  # a pool GPU: one remote run in flight
    wait_state(svc, flying, ("running",))
    wait_for(lambda: svc.controller.profiles.round_table().get("sleeper") is not None, 10, "the bound")
    bound = svc.controller.profiles.round_table()["sleeper"]
    assert not bound.known and bound.name == "sleeper"  # each job's SLO stands for its base
    assert remote_slowdown(bound) == pytest.approx(remote_slowdown(cold_bound("x", None)))
    tight = _submit(svc, _body("tight", 1, slo_s=0.8))
    wait_for(lambda: job(svc, tight)["wait_rounds"] >= 5, 20, "five rounds with the job waiting")
    seen = job(svc, tight)
    assert seen["state"] == "queued" and seen["reason_code"] in ("slo-at-risk", "postponed"), seen
    svc.jobs.cancel(blocker)  # m0's GPU is free again: the tight job takes it, and says what placed it
    wait_state(svc, tight, ("running", "completed"), timeout=30)
    events = client.get(f"/v1/jobs/{tight}/events", headers=auth(token)).json()["events"]
    assert any("no task of which has finished yet" in (e["why"] or "") for e in events), events
    svc.jobs.cancel(flying)


def test_jobs_that_name_no_image_teach_no_profile(learning: tuple[Service, TestClient, str]) -> None:
    """A job that names no image is of image `unknown`, the CLI's and the API's default: every such job, whatever
    it runs, was one image to learn, and a few sleeps taught the controller that remote devices slow
    "unknown" 6.9x (15x after one more), which the network-aware policy then held against every job
    without an image. Their runs are looked at and kept, but teach nothing."""
    svc, client, token = learning
    ids = [_submit(svc, {**_body(f"anon-{i}", 1), "image": "unknown"}) for i in range(4)]
    for i in ids:
        wait_state(svc, i, ("completed",), timeout=60)

    def looked_at() -> int:
        with svc.store.read_core() as conn:
            return int(conn.exec_driver_sql(
                "SELECT count(*) FROM profile_observations WHERE image = 'unknown'").scalar_one())

    wait_for(lambda: looked_at() >= 4, 30, "the four runs to be looked at")
    assert svc.store.observations_of("unknown") == []  # none usable
    assert client.get("/v1/profiles/unknown", headers=auth(token)).status_code == 404

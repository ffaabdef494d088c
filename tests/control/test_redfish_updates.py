"""Updatable compositions on disagg's Redfish service: `#ComputerSystem.AddResourceBlock` /
`RemoveResourceBlock` (and a PATCH of `Links.ResourceBlocks`) add and remove one block of a composed system
through its slice's state machine (composed → composing → composed), with the invariants of composing:
a block in use is 409 ResourceInUse, a block not in the system and the Compute block cannot be removed.
`redfish_updatable: false` makes the service compose at once only. Driven by disagg's own Redfish client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from control_helpers import make_service, submit, wait_for
from fastapi.testclient import TestClient
from sqlalchemy import select

from disagg.api import create_app
from disagg.fabric.redfish_client import RedfishClient, RedfishFault
from disagg.model.states import SliceState, StepStatus
from disagg.store.models import EventRow

SYSTEMS = "/redfish/v1/Systems"
BLOCKS = "/redfish/v1/CompositionService/ResourceBlocks"
ADD = "Actions/ComputerSystem.AddResourceBlock"
REMOVE = "Actions/ComputerSystem.RemoveResourceBlock"


def _served(tmp_path: Path, updatable: bool = True) -> Iterator[tuple]:
    svc = make_service(tmp_path, redfish_updatable=updatable)
    svc.controller.start()
    tokens = {t: svc.store.create_token(t) for t in ("alice", "bob")}
    test_client = TestClient(create_app(svc.jobs))
    clients = {t: RedfishClient(str(test_client.base_url), t, tokens[t], transport=test_client._transport,
                                task_poll_s=0.02) for t in tokens}
    yield svc, clients
    for c in clients.values():
        c.close()
    svc.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple]:
    yield from _served(tmp_path)


def block(name: str) -> dict[str, str]:
    return {"@odata.id": f"{BLOCKS}/{name.replace('/', ':')}"}


def compose(client: RedfishClient, name: str, *blocks: str) -> str:
    """A composition of `blocks` (a Compute block first): its system's URI."""
    r = client.change("POST", SYSTEMS, json={"Name": name, "Links": {"ResourceBlocks": [block(b) for b in blocks]},
                                             "ProcessorSummary": {"CoreCount": 2}})
    return str(r.headers["Location"])


def blocks_of(client: RedfishClient, system: str) -> list[str]:
    return [b["@odata.id"].rsplit("/", 1)[1] for b in client.get(system)["Links"]["ResourceBlocks"]]


def slice_moves(svc, slice_id: str) -> list[tuple[str | None, str, str | None]]:
    with svc.store.read() as s:
        rows = s.execute(select(EventRow).where(EventRow.slice_id == slice_id).order_by(EventRow.id)).scalars()
        return [(r.from_state, r.to_state, r.why) for r in rows]


def test_the_service_advertises_updates_and_a_composition_carries_the_actions(served) -> None:
    _svc, clients = served
    caps = clients["alice"].get(f"{SYSTEMS}/Capabilities")
    assert caps["Links"]["ResourceBlocks@Redfish.UpdatableAfterCreate"] is True
    system = compose(clients["alice"], "mine", "node0")
    actions = clients["alice"].get(system)["Actions"]
    assert actions == {"#ComputerSystem.AddResourceBlock": {"target": f"{system}/{ADD}"},
                       "#ComputerSystem.RemoveResourceBlock": {"target": f"{system}/{REMOVE}"}}


def test_blocks_are_added_and_removed_one_at_a_time_through_the_slice_state_machine(served) -> None:
    svc, clients = served
    alice = clients["alice"]
    system = compose(alice, "grow", "node0")
    slice_id = svc.store.live_slices()[0].id
    assert blocks_of(alice, system) == ["node0"]
    for n, dev in enumerate(("iobox0/gpu0", "iobox0/gpu1"), start=1):
        r = alice.change("POST", f"{system}/{ADD}", json={"ResourceBlock": block(dev)})
        assert r.status_code == 204  # the task monitor's answer once the composition is composed again
        assert len(blocks_of(alice, system)) == 1 + n
        assert svc.store.any_slice(slice_id).state == SliceState.COMPOSED  # type: ignore[union-attr]
    assert blocks_of(alice, system) == ["node0", "iobox0:gpu0", "iobox0:gpu1"]
    assert sorted((a.device, a.machine) for a in svc.fabric.attachments()) == [
        ("iobox0/gpu0", "node0"), ("iobox0/gpu1", "node0")]
    assert svc.store.held_devices() == {"iobox0/gpu0": slice_id, "iobox0/gpu1": slice_id}
    # a repeat of an add that was made changes nothing (204 at once)
    assert alice.change("POST", f"{system}/{ADD}", json={"ResourceBlock": block("iobox0/gpu0")}).status_code == 204

    alice.change("POST", f"{system}/{REMOVE}", json={"ResourceBlock": block("iobox0/gpu0")})
    assert blocks_of(alice, system) == ["node0", "iobox0:gpu1"]
    assert [(a.device, a.machine) for a in svc.fabric.attachments()] == [("iobox0/gpu1", "node0")]
    assert svc.store.held_devices() == {"iobox0/gpu1": slice_id}
    # the same device again: a fresh attach (its old attach and detach steps are forgotten)
    alice.change("POST", f"{system}/{ADD}", json={"ResourceBlock": block("iobox0/gpu0")})
    assert blocks_of(alice, system) == ["node0", "iobox0:gpu1", "iobox0:gpu0"]
    assert len(svc.fabric.attachments()) == 2

    moves = [(a, b) for a, b, _ in slice_moves(svc, slice_id)]
    assert moves == [(None, "composing"), ("composing", "composed")] + [("composed", "composing"),
                                                                        ("composing", "composed")] * 4
    whys = [w for _, to, w in slice_moves(svc, slice_id) if to == "composing"][1:]
    assert whys == ["adding iobox0/gpu0", "adding iobox0/gpu1", "removing iobox0/gpu0", "adding iobox0/gpu0"]

    # PATCH of the blocks: what it leaves out is removed
    assert alice.change("PATCH", system, json={"Links": {"ResourceBlocks": [block("node0")]}}).status_code == 204
    assert blocks_of(alice, system) == ["node0"]
    assert svc.fabric.attachments() == [] and svc.store.held_devices() == {}
    alice.delete(system)
    wait_for(lambda: svc.store.any_slice(slice_id).state == SliceState.DONE,  # type: ignore[union-attr]
             what="the decomposition")


def test_the_invariants_of_composing_hold_for_an_update(served) -> None:
    svc, clients = served
    alice, bob = clients["alice"], clients["bob"]
    mine = compose(alice, "mine", "node0", "iobox0/gpu0")
    theirs = compose(bob, "theirs", "node1", "iobox0/gpu1")
    with pytest.raises(RedfishFault) as taken:  # a block in use
        alice.change("POST", f"{mine}/{ADD}", json={"ResourceBlock": block("iobox0/gpu1")})
    assert taken.value.status == 409 and taken.value.resource_in_use
    assert taken.value.in_use == (f"{BLOCKS}/iobox0:gpu1",)
    with pytest.raises(RedfishFault, match="'iobox0/gpu2' is not part of the composition") as stray:
        alice.change("POST", f"{mine}/{REMOVE}", json={"ResourceBlock": block("iobox0/gpu2")})
    assert stray.value.status == 400 and stray.value.message_ids == ("Base.1.19.ActionParameterValueNotInList",)
    with pytest.raises(RedfishFault, match="node0 is the composition's machine: it cannot be removed") as host:
        alice.change("POST", f"{mine}/{REMOVE}", json={"ResourceBlock": block("node0")})
    assert host.value.status == 400
    with pytest.raises(RedfishFault, match="exactly one Compute block") as second:
        alice.change("POST", f"{mine}/{ADD}", json={"ResourceBlock": block("node2")})
    assert second.value.status == 400
    with pytest.raises(RedfishFault, match="takes no parameter Force") as unknown:
        alice.change("POST", f"{mine}/{ADD}", json={"ResourceBlock": block("iobox0/gpu2"), "Force": True})
    assert unknown.value.status == 400
    with pytest.raises(RedfishFault, match="requires the parameter ResourceBlock"):
        alice.change("POST", f"{mine}/{ADD}", json={})
    with pytest.raises(RedfishFault) as stale:  # an ETag that is not the system's
        alice.change("POST", f"{mine}/{ADD}", json={"ResourceBlock": block("iobox0/gpu2"),
                                                     "ComputerSystemETag": 'W/"stale"'})
    assert stale.value.status == 412
    with pytest.raises(RedfishFault) as other:  # bob's system is not alice's to change
        alice.change("POST", f"{theirs}/{REMOVE}", json={"ResourceBlock": block("iobox0/gpu1")})
    assert other.value.status == 404
    assert blocks_of(alice, mine) == ["node0", "iobox0:gpu0"]
    assert blocks_of(bob, theirs) == ["node1", "iobox0:gpu1"]
    assert svc.store.held_devices() == {"iobox0/gpu0": svc.store.live_slices()[0].id,
                                        "iobox0/gpu1": svc.store.live_slices()[1].id}


def test_an_update_whose_attach_fails_is_undone_and_the_system_stays_as_it_was(served) -> None:
    svc, clients = served
    alice = clients["alice"]
    system = compose(alice, "mine", "node0", "iobox0/gpu0")
    slice_id = svc.store.live_slices()[0].id
    svc.fabric.inject_attach_timeouts(3)  # every try of the attach step times out
    with pytest.raises(RedfishFault, match="the update did not take place: update failed: attach-device "
                                           "iobox0/gpu1 failed") as info:
        alice.change("POST", f"{system}/{ADD}", json={"ResourceBlock": block("iobox0/gpu1")})
    assert info.value.status == 409
    assert blocks_of(alice, system) == ["node0", "iobox0:gpu0"]
    assert svc.store.any_slice(slice_id).state == SliceState.COMPOSED  # type: ignore[union-attr]
    assert svc.store.held_devices() == {"iobox0/gpu0": slice_id}
    assert [(a.device, a.machine) for a in svc.fabric.attachments()] == [("iobox0/gpu0", "node0")]
    # the next update is made (and its task completes)
    assert alice.change("POST", f"{system}/{ADD}", json={"ResourceBlock": block("iobox0/gpu1")}).status_code == 204
    assert blocks_of(alice, system) == ["node0", "iobox0:gpu0", "iobox0:gpu1"]


def test_a_job_slice_cannot_be_updated(served) -> None:
    svc, clients = served
    admin = RedfishClient(clients["alice"].base, "admin", svc.store.create_token("admin", admin=True),
                          transport=clients["alice"].http._transport)
    submit(svc, gpu=1, command=["sh", "-c", "sleep 60"])
    wait_for(lambda: any(s.state == SliceState.RUNNING for s in svc.store.live_slices()), timeout=60,
             what="the job's slice")
    name = svc.store.live_slices()[0].placement.machines[0].name
    assert "Actions" not in admin.get(f"{SYSTEMS}/{name}")
    with pytest.raises(RedfishFault, match="its blocks are the job's") as info:
        admin.change("POST", f"{SYSTEMS}/{name}/{ADD}", json={"ResourceBlock": block("iobox1/nvme0")})
    assert info.value.status == 400
    admin.close()


def test_an_update_asked_for_before_a_crash_is_made_by_the_next_controller(tmp_path: Path) -> None:
    """The update is recorded (composing, a detach asked for) in the transaction that accepts it: a controller
    that dies before its loop ran the steps leaves them to the next one, which makes the update whole."""
    svc = make_service(tmp_path)
    svc.controller.start()
    sid = svc.store.compose("alice", "mine", "node0", ["iobox0/gpu0"], cpus=2.0)
    wait_for(lambda: svc.store.any_slice(sid).state == SliceState.COMPOSED,  # type: ignore[union-attr]
             what="the composition")
    svc.close()
    svc = make_service(tmp_path)  # not started: the update is accepted, no step runs
    assert svc.store.update_composition(sid, ["iobox0/gpu1"], ["iobox0/gpu0"])
    assert svc.store.removals(sid) == {"iobox0/gpu0"}
    steps = {(s.op, s.target): s for s in svc.store.slice_steps(sid)}
    assert steps[("detach-device", "iobox0/gpu0")].status == StepStatus.STARTED
    assert steps[("detach-device", "iobox0/gpu0")].tries == 0
    svc.close()
    svc = make_service(tmp_path)
    svc.controller.start()
    try:
        wait_for(lambda: svc.store.any_slice(sid).state == SliceState.COMPOSED,  # type: ignore[union-attr]
                 what="the update after the restart")
        assert [(a.device, a.machine) for a in svc.fabric.attachments()] == [("iobox0/gpu1", "node0")]
        assert svc.store.held_devices() == {"iobox0/gpu1": sid}
        assert [d.id for _, d in svc.store.load_slice(sid).placement.devices()] == ["iobox0/gpu1"]
        assert svc.store.removals(sid) == set()
    finally:
        svc.close()


def test_a_service_configured_not_updatable_composes_at_once_only(tmp_path: Path) -> None:
    for _svc, clients in _served(tmp_path, updatable=False):
        alice = clients["alice"]
        assert alice.get(f"{SYSTEMS}/Capabilities")["Links"]["ResourceBlocks@Redfish.UpdatableAfterCreate"] is False
        system = compose(alice, "fixed", "node0")
        assert "Actions" not in alice.get(system)
        with pytest.raises(RedfishFault, match="composes systems at once") as info:
            alice.change("POST", f"{system}/{ADD}", json={"ResourceBlock": block("iobox0/gpu0")})
        assert info.value.status == 400 and info.value.message_ids == ("Base.1.19.ActionNotSupported",)
        assert blocks_of(alice, system) == ["node0"]

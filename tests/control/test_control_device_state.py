"""Device and link state have one guarded writer (`store.lifecycle`): health, drain and link moves are
checked, made by compare-and-set and recorded as events; a device is held by one slice at a time
(issue 21, reproduction 4)."""

from __future__ import annotations

import pytest

from disagg.control.service import DEFAULT_CLUSTER
from disagg.model import load_cluster
from disagg.model.states import IllegalTransition
from disagg.store import Store
from disagg.store.lifecycle import hold_devices, release_devices


@pytest.fixture
def store(db_url: str):  # type: ignore[no-untyped-def]
    s = Store(db_url)
    s.migrate()
    s.sync_inventory(load_cluster(DEFAULT_CLUSTER))
    yield s
    s.close()


def _moves(events: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(e["from"], e["to"]) for e in reversed(events)]


def test_health_drain_and_link_moves_are_recorded_once_each(store: Store) -> None:
    store.mirror_health(lambda: (frozenset({"iobox0/gpu1"}), frozenset({"up:iobox1"})))
    store.mirror_health(lambda: (frozenset({"iobox0/gpu1"}), frozenset({"up:iobox1"})))  # nothing moves again
    store.drain_device("iobox0/gpu1")
    store.drain_device("iobox0/gpu1")
    store.mirror_health(lambda: (frozenset(), frozenset()), repaired="iobox0/gpu1")
    assert _moves(store.device_events("iobox0/gpu1")) == [
        ("healthy", "failed"), ("in-service", "drained"), ("failed", "healthy"), ("drained", "in-service")]
    assert _moves(store.link_events("up:iobox1")) == [("up", "down"), ("down", "up")]
    assert store.device_events("iobox0/gpu2") == [] and store.link_events("up:iobox0") == []
    why = store.link_events("up:iobox1")[-1]["why"]
    assert why == "the fabric reports it down"


def test_a_device_is_held_by_one_slice_at_a_time(store: Store) -> None:
    with store.write_core() as conn:
        hold_devices(conn, ["iobox0/gpu0", "iobox0/gpu1"], "s-1")
    with pytest.raises(IllegalTransition, match="iobox0/gpu1"), store.write_core() as conn:
        hold_devices(conn, ["iobox0/gpu1", "iobox0/gpu2"], "s-2")
    with store.write_core() as conn:
        release_devices(conn, "s-2", ["iobox0/gpu0"])  # not its own: untouched
    assert {d["id"]: d["slice"] for d in store.devices_view() if d["slice"]} == {
        "iobox0/gpu0": "s-1", "iobox0/gpu1": "s-1"}
    with store.write_core() as conn:
        release_devices(conn, "s-1")
        hold_devices(conn, ["iobox0/gpu1"], "s-2")
    assert {d["id"]: d["slice"] for d in store.devices_view() if d["slice"]} == {"iobox0/gpu1": "s-2"}


def test_a_composition_takes_nothing_behind_a_down_link(store: Store) -> None:
    """A Redfish client's composition is checked as a round's commit is: a device, or a host, that a
    down link cuts off is refused with the link named."""
    from disagg.store import CompositionRefused

    store.mirror_health(lambda: (frozenset(), frozenset({"up:iobox1", "up:node3"})))
    with pytest.raises(CompositionRefused, match="iobox1/nvme0 is unreachable \\(link up:iobox1 is down\\)"):
        store.compose("alice", "sys", "node0", ["iobox1/nvme0"])
    with pytest.raises(CompositionRefused, match="machine node3 is unreachable"):
        store.compose("alice", "sys", "node3", ["iobox0/gpu0"])
    assert store.compose("alice", "sys", "node0", ["iobox0/gpu0"])

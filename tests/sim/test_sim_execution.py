"""The execution-time model, one effect at a time, and its agreement with the policies' φ."""

from __future__ import annotations

import pytest

from disagg.profiles import RODINIA, expected_s, lookup
from disagg.sim.execution import (
    LEGOOS_WORKING_SET_MB,
    REFERENCE_GBPS,
    DeviceUse,
    collocation_factor,
    memory_slowdown,
    path_factor,
    task_stretch,
    transfer_stretch,
)


@pytest.mark.parametrize(("cache_mb", "slowdown"), [(128.0, 1.7), (512.0, 1.3)], ids=["128MB", "512MB"])
def test_legoos_fit_passes_through_the_reported_points(cache_mb: float, slowdown: float) -> None:
    assert memory_slowdown(cache_mb / LEGOOS_WORKING_SET_MB) == pytest.approx(slowdown, rel=1e-9)


def test_legoos_slowdown_shrinks_as_the_cache_grows_and_is_one_when_all_is_local() -> None:
    shares = [0.0, 0.1, 128 / 921.6, 256 / 921.6, 0.5, 512 / 921.6, 0.9, 1.0]
    values = [memory_slowdown(c) for c in shares]
    assert values == sorted(values, reverse=True)
    assert values[-1] == 1.0
    assert 1.3 < memory_slowdown(256 / 921.6) < 1.7  # between the anchors at 256 MB, as LegoOS's curve


@pytest.mark.parametrize("app", sorted(RODINIA))
@pytest.mark.parametrize("load", [0.0, 0.3, 1.0])
def test_one_remote_device_on_the_reference_path_matches_the_profiles_phi(app: str, load: float) -> None:
    profile = lookup(app)
    stretch = transfer_stretch(profile, [DeviceUse(True, REFERENCE_GBPS, load)])
    assert stretch * profile.base_s == pytest.approx(expected_s(profile, 1.0, load))


def test_local_devices_and_no_devices_do_not_stretch() -> None:
    nw = lookup("nw")
    assert transfer_stretch(nw, [DeviceUse(False), DeviceUse(False)]) == 1.0
    assert transfer_stretch(nw, []) == 1.0


def test_load_slower_paths_and_collocation_each_stretch() -> None:
    nw = lookup("nw")
    idle = transfer_stretch(nw, [DeviceUse(True, 10.0, 0.0)])
    loaded = transfer_stretch(nw, [DeviceUse(True, 10.0, 0.5)])
    slow_path = transfer_stretch(nw, [DeviceUse(True, 5.0, 0.0)])
    assert 1.0 < idle < loaded
    assert idle < slow_path
    assert 1.0 <= path_factor(nw, 1000.0) < 1.01  # a very fast path approaches local, never beats it
    half_remote = transfer_stretch(nw, [DeviceUse(True, 10.0, 0.0), DeviceUse(False)])
    assert half_remote == pytest.approx((1.0 + idle) / 2.0)
    assert collocation_factor(0.0) == 1.0 < collocation_factor(0.5) < collocation_factor(1.0)
    assert task_stretch(nw, [], 0.5, memory_cache_share=128 / 921.6) == pytest.approx(
        collocation_factor(0.5) * 1.7)


def test_a_shared_pcie_link_stretches_a_local_transfer_by_the_others_share_of_it() -> None:
    from disagg.sim.execution import GPUS_PER_PCIE_LINK, REMOTE_PCIE_SHARE, pcie_factor

    nw = lookup("nw")  # transfer share 0.17 (seed 001, Experiment 1)
    assert GPUS_PER_PCIE_LINK["K80"] == 2  # two GK210 behind one PCIe Gen3 x16 link (K80 board spec)
    assert pytest.approx(1.25 / 15.75) == REMOTE_PCIE_SHARE
    assert pcie_factor(0.0) == 1.0 and pcie_factor(0.17) == pytest.approx(1.17) and pcie_factor(5.0) == 2.0
    shared = transfer_stretch(nw, [DeviceUse(False, pcie=0.17)])
    assert shared == pytest.approx(0.83 + 0.17 * 1.17)
    # a remote device's transfers are bound by the network, not by the PCIe link at its end
    assert transfer_stretch(nw, [DeviceUse(True, pcie=0.5)]) == transfer_stretch(nw, [DeviceUse(True)])

"""The dashboard's "over time" numbers (issue 25): counts never averaged into fractions, fault and repair
marks where the broken things' count changes, and a default window that fits the samples kept."""

from __future__ import annotations

from disagg.api.dashboard.timeline import buckets, fitting_window, marks


def sample(queued: int, gpus: int, failed: int = 0, down: int = 0, round_s: float = 0.1) -> dict[str, object]:
    return {"queue_length": queued, "jobs_running": 1, "devices_in_use": {"gpu": gpus}, "devices_total": {"gpu": 5},
            "round_s": round_s, "link_load_gbps": {}, "devices_failed": {"gpu": failed}, "links_down": down}


def test_counts_are_a_buckets_largest_value_and_times_its_mean() -> None:
    points = buckets([(0.0, sample(2, 1, round_s=0.1)), (1.0, sample(3, 2, round_s=0.3))], 0.0, 10.0)
    assert len(points) == 1
    p = points[0]
    assert p["queue_length"] == 3 and p["devices_in_use"] == {"gpu": 2} and p["devices_total"] == {"gpu": 5}
    assert isinstance(p["queue_length"], int)
    assert abs(p["round_s"] - 0.2) < 1e-9


def test_faults_and_repairs_are_marked_where_the_broken_count_changes() -> None:
    found = marks([(0.0, sample(0, 0)), (1.0, sample(0, 0, failed=1)), (2.0, sample(0, 0, failed=1, down=1)),
                   (3.0, sample(0, 0, down=1)), (4.0, sample(0, 0)), (5.0, {"queue_length": 0})])
    assert found == [(1.0, "fault"), (2.0, "fault"), (3.0, "repair"), (4.0, "repair")]


def test_a_failover_is_marked_where_the_lease_epoch_rises() -> None:
    """A takeover (another replica, or a restart) raises the lease's epoch; samples from before epochs
    were sampled mark nothing, and an epoch that stays marks nothing."""
    found = marks([(0.0, {"queue_length": 0}), (1.0, {**sample(0, 0), "epoch": 3}), (2.0, {**sample(0, 0), "epoch": 3}),
                   (3.0, {**sample(0, 0, failed=1), "epoch": 4}), (4.0, {**sample(0, 0, failed=1), "epoch": 6})])
    assert found == [(3.0, "failover"), (3.0, "fault"), (4.0, "failover")]


def test_the_default_window_is_the_smallest_that_holds_every_sample() -> None:
    windows = {"15m": 900, "1h": 3600, "6h": 21600, "24h": 86400}
    assert fitting_window(windows, None, 10_000.0) == "15m"
    assert fitting_window(windows, 10_000.0 - 300, 10_000.0) == "15m"
    assert fitting_window(windows, 10_000.0 - 2000, 10_000.0) == "1h"
    assert fitting_window(windows, 0.0, 1e6) == "24h"

"""What jobs outside disagg hold (a user's own `sbatch`) is kept from the policies; without any, the
round's snapshot goes on as it was read."""

from __future__ import annotations

from disagg.control.service import DEFAULT_CLUSTER
from disagg.engines.base import ForeignHolding, with_foreign_holdings
from disagg.model import load_cluster


def test_foreign_holdings_become_allocations_and_none_leave_the_snapshot_untouched() -> None:
    cluster = load_cluster(DEFAULT_CLUSTER)
    assert with_foreign_holdings(cluster, iter(())) is cluster
    assert "device_by_id" not in cluster.__dict__     # its index by id was not built for nothing
    machine = cluster.machines[1]
    device = cluster.devices[0]                                    # a pool GPU, held through the node
    held = with_foreign_holdings(cluster, iter([
        ForeignHolding("123", "n1", machine.name, cpus=2.0, devices=(device.id, "nowhere/gpu9")),
        ForeignHolding("124", "n2", None)]))                       # nothing held that disagg knows: left out
    extra = held.allocations[len(cluster.allocations):]
    assert [(a.job, a.machine, a.cpus, a.devices) for a in extra] == [("foreign:123", machine.name, 2.0, (device.id,))]

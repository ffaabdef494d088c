"""The solver behind one tiny function: `solve(network) -> flows`. OR-Tools' min-cost flow.

OR-Tools' SimpleMinCostFlow is a cost-scaling push-relabel solver (Goldberg), the algorithm that
Firmament found to scale best. The network is handed over as whole numpy arrays.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from ortools.graph.python import min_cost_flow

from disagg.placement.network import FlowNetwork


class SolverError(RuntimeError):
    """The solver found no optimal flow (the network is malformed: every model has a U path)."""


def solve(network: FlowNetwork) -> NDArray[np.int64]:
    """Optimal integer flows on every arc, in arc order. Raises SolverError if there is none."""
    tails, heads, caps, costs = network.arrays()
    if len(tails) == 0:
        return np.zeros(0, dtype=np.int64)
    smcf = min_cost_flow.SimpleMinCostFlow()
    arcs = smcf.add_arcs_with_capacity_and_unit_cost(tails, heads, caps, costs)
    nodes = np.nonzero(network.supplies)[0]
    smcf.set_nodes_supplies(nodes, network.supplies[nodes])
    status = smcf.solve()
    if status != smcf.OPTIMAL:
        raise SolverError(f"min-cost flow failed with status {status}")
    flows: NDArray[np.int64] = np.asarray(smcf.flows(arcs), dtype=np.int64)
    return flows


def total_cost(network: FlowNetwork, flows: NDArray[np.int64]) -> int:
    _, _, _, costs = network.arrays()
    return int(np.dot(costs, flows))

"""The OR-Tools wrapper finds optimal flows: checked against networkx's network simplex."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disagg.placement.network import FlowNetwork
from disagg.placement.solver import solve, total_cost


def random_network(seed: int, n_sources: int, n_middle: int) -> FlowNetwork:
    """Sources → middle nodes → sink, plus an expensive overflow node so that it is always feasible."""
    rng = np.random.default_rng(seed)
    net = FlowNetwork()
    src = net.add_nodes(n_sources)
    mid = net.add_nodes(n_middle)
    over = net.add_nodes(1)
    sink = net.add_nodes(1)
    supply = rng.integers(1, 5, size=n_sources)
    net.supplies[src:src + n_sources] = supply
    net.supplies[sink] = -int(supply.sum())
    mask = rng.random((n_sources, n_middle)) < 0.5
    tails, heads = np.nonzero(mask)
    net.add_arcs("s->m", src + tails, mid + heads, rng.integers(1, 4, size=len(tails)),
                 rng.integers(0, 100, size=len(tails)))
    net.add_arcs("s->U", src + np.arange(n_sources), over, supply, 1000)
    net.add_arcs("m->t", mid + np.arange(n_middle), sink, rng.integers(0, 6, size=n_middle), 0)
    net.add_arcs("U->t", [over], sink, [int(supply.sum())], 0)
    return net


def networkx_cost(net: FlowNetwork) -> int:
    g = nx.DiGraph()
    for i, s in enumerate(net.supplies):
        g.add_node(i, demand=-int(s))
    tails, heads, caps, costs = net.arrays()
    for t, h, c, w in zip(tails, heads, caps, costs, strict=True):
        g.add_edge(int(t), int(h), capacity=int(c), weight=int(w))
    cost, _ = nx.network_simplex(g)
    return int(cost)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n_sources=st.integers(1, 12), n_middle=st.integers(1, 12))
def test_or_tools_is_optimal_against_network_simplex(seed: int, n_sources: int, n_middle: int) -> None:
    net = random_network(seed, n_sources, n_middle)
    flows = solve(net)
    tails, heads, caps, _ = net.arrays()
    assert np.all(flows >= 0) and np.all(flows <= caps)
    # Conservation: out − in = supply at every node.
    balance = np.zeros(net.num_nodes, dtype=np.int64)
    np.add.at(balance, tails, flows)
    np.subtract.at(balance, heads, flows)
    assert np.array_equal(balance, net.supplies)
    assert total_cost(net, flows) == networkx_cost(net)


def test_duplicate_block_is_refused() -> None:
    net = FlowNetwork()
    net.add_nodes(2)
    net.add_arcs("a", [0], [1], [1], [1])
    with pytest.raises(ValueError, match="added twice"):
        net.add_arcs("a", [0], [1], [1], [1])


def test_export_json_and_dot_name_every_arc() -> None:
    net = random_network(3, 3, 3)
    data = json.loads(net.to_json())
    assert len(data["arcs"]) == net.num_arcs
    assert {a["block"] for a in data["arcs"]} == {"s->m", "s->U", "m->t", "U->t"}
    assert net.to_dot().count("->") == net.num_arcs


def test_arc_blocks_take_arrays_scalars_and_broadcasts_alike() -> None:
    """`add_arcs` takes a block's heads, capacities and costs as arrays of its length, as scalars, or
    as anything numpy broadcasts to it: the arcs are the same either way."""
    net = FlowNetwork()
    net.add_nodes(4)
    net.add_arcs("arrays", [0, 1, 2], np.array([3, 3, 3]), [5, 5, 5], np.array([7, 8, 9]))
    net.add_arcs("scalars", [0, 1, 2], 3, np.int64(5), [7, 8, 9])
    net.add_arcs("broadcast", [0, 1, 2], [3], np.array([5]), [7, 8, 9])
    tails, heads, caps, costs = net.arrays()
    for block in ("arrays", "scalars", "broadcast"):
        arcs = net.block(block)
        assert (tails[arcs].tolist(), heads[arcs].tolist(), caps[arcs].tolist(), costs[arcs].tolist()) == (
            [0, 1, 2], [3, 3, 3], [5, 5, 5], [7, 8, 9])
    assert heads.dtype == caps.dtype == costs.dtype == np.int64

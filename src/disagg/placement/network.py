"""A flow network as flat numpy arrays, built in vectorised blocks (never one Python call per arc).

Nodes are integers; supplies are positive at sources (tasks) and negative at the sink. Each arc
has a tail, a head, a capacity and an integer unit cost. `kinds` tags each arc block with a name
(`task->machine`, `task->U`, …) so the decoder can find the flows it cares about, and so the graph
can be exported for debugging.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

IntArray = NDArray[np.int64]


def _column(values: ArrayLike, n: int) -> IntArray:
    """`values` as one int64 per arc of a block of `n`: the array itself when it is one already, a
    scalar repeated, else broadcast (`np.broadcast_to` costs several microseconds a call, and a round
    adds a dozen blocks per network, thousands of networks a simulated run)."""
    if type(values) is np.ndarray and values.dtype == np.int64 and values.shape == (n,):
        return values  # (the usual block: its own array, read as it is without asarray's call)
    a = np.asarray(values, dtype=np.int64)
    if a.shape == (n,):
        return a
    if a.ndim == 0:  # (empty and fill: np.full's Python wrapper costs twice as much)
        out = np.empty(n, dtype=np.int64)
        out.fill(a)
        return out
    out = np.broadcast_to(a, (n,)).ravel()
    return out


@dataclass
class FlowNetwork:
    """Arcs are appended in named blocks; `block(name)` gives the arc range of a block."""

    num_nodes: int = 0
    supplies: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _tails: list[IntArray] = field(default_factory=list)
    _heads: list[IntArray] = field(default_factory=list)
    _caps: list[IntArray] = field(default_factory=list)
    _costs: list[IntArray] = field(default_factory=list)
    _blocks: dict[str, tuple[int, int]] = field(default_factory=dict)
    _num_arcs: int = 0
    node_labels: dict[int, str] = field(default_factory=dict)

    def add_nodes(self, n: int) -> int:
        """Reserve `n` nodes; returns the first id."""
        first = self.num_nodes
        self.num_nodes += n
        self.supplies = np.concatenate([self.supplies, np.zeros(n, dtype=np.int64)])
        return first

    def add_arcs(self, name: str, tails: ArrayLike, heads: ArrayLike, caps: ArrayLike, costs: ArrayLike) -> None:
        """Append a block of arcs; arcs with zero capacity are kept (they cost nothing to solve)."""
        t = np.asarray(tails, dtype=np.int64).ravel()
        n = len(t)
        # (Three calls, not a generator over the three: a dozen blocks per network, some 2,000 networks a run.)
        h, c, w = _column(heads, n), _column(caps, n), _column(costs, n)
        if name in self._blocks:
            raise ValueError(f"arc block {name!r} added twice")
        self._blocks[name] = (self._num_arcs, self._num_arcs + n)
        self._num_arcs += n
        self._tails.append(t)
        self._heads.append(h)
        self._caps.append(c)
        self._costs.append(w)

    def block(self, name: str) -> slice:
        start, stop = self._blocks.get(name, (0, 0))
        return slice(start, stop)

    @property
    def num_arcs(self) -> int:
        return self._num_arcs

    def arrays(self) -> tuple[IntArray, IntArray, IntArray, IntArray]:
        """(tails, heads, capacities, costs), concatenated."""
        def cat(xs: list[IntArray]) -> IntArray:
            return np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64)

        return cat(self._tails), cat(self._heads), cat(self._caps), cat(self._costs)

    def to_json(self, flows: IntArray | None = None) -> str:
        """The graph for debugging: nodes with supplies and labels, arcs with their block name (and
        the solved flow on each arc, when given)."""
        tails, heads, caps, costs = self.arrays()
        flow = flows if flows is not None else np.zeros(len(tails), dtype=np.int64)
        names = np.empty(self._num_arcs, dtype=object)
        for name, (a, b) in self._blocks.items():
            names[a:b] = name
        return json.dumps({
            "nodes": [{"id": i, "supply": int(s), "label": self.node_labels.get(i, "")}
                      for i, s in enumerate(self.supplies)],
            "arcs": [{"tail": int(t), "head": int(h), "capacity": int(c), "cost": int(w), "block": str(n),
                      "flow": int(f)}
                     for t, h, c, w, n, f in zip(tails, heads, caps, costs, names, flow, strict=True)],
        })

    def to_dot(self) -> str:
        tails, heads, caps, costs = self.arrays()
        lines = ["digraph flow {"]
        for i, s in enumerate(self.supplies):
            label = self.node_labels.get(i, str(i))
            lines.append(f'  n{i} [label="{label}\\n{int(s)}"];')
        for t, h, c, w in zip(tails, heads, caps, costs, strict=True):
            lines.append(f'  n{t} -> n{h} [label="{int(c)}/{int(w)}"];')
        lines.append("}")
        return "\n".join(lines)

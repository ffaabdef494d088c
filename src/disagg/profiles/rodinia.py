"""The eight Rodinia applications of the DRMaestro seed (001, "The benchmark", "Experiment 1").

Numbers and where they come from:
- transfer_share of HotSpot (0.002) and NW (0.17): seed, Experiment 1 — the network share of a
  remote-GPU run in isolation ("HotSpot ... from 0.2% to 1%", "NW goes from 17% to 49%").
- load_sensitivity: from the same two pairs. If the network part stretches by k under load, its
  share goes from s to s' = s·k / (1 − s + s·k), so k = s'(1 − s) / (s(1 − s')). NW: k = 4.69,
  HotSpot: k = 5.04; with a saturating iperf load (load = 1), sensitivity = k − 1 = 3.69 and 4.04.
  The other six are not given in the text (only in Fig. 3): ASSUMED 3.85, the mean of the two.
- transfer_share of the other six: ASSUMED from the inputs the seed configures (data-heavy kernels
  with little compute per byte get a larger share): B+tree 0.30, Backprop 0.25, Gaussian 0.05,
  LavaMD 0.10, Pathfinder 0.35, SRAD 0.08.
- base_s: ASSUMED run times of the configured inputs on a K80 (the seed gives none in the text),
  60–300 s, so that a 4-machine, 16-GPU cluster is busy for a few thousand seconds with 128–512 jobs
  as in the seed's Figs. 4–5.
- remote_factor: ASSUMED 1.25 for all: a GPU remoted over the testbed's links moves data ~25%
  slower than over local PCIe when the network is idle (seed: "the impact is minimal" in isolation).
- network_gbps: ASSUMED transfer_share × 10 Gb/s (the testbed NIC), at least 0.1 Gb/s.
"""

from __future__ import annotations

from disagg.profiles.model import Profile

_MEASURED = "seed 001, Experiment 1"
_ASSUMED = "assumed (see module docstring)"


def _p(name: str, base_s: float, ts: float, sens: float, measured: bool) -> Profile:
    src = f"transfer_share, load_sensitivity: {_MEASURED}" if measured else _ASSUMED
    return Profile(name, base_s, ts, 1.25, sens, max(0.1, round(ts * 10.0, 3)), src)


RODINIA: dict[str, Profile] = {
    p.name: p
    for p in (
        _p("b+tree", 60.0, 0.30, 3.85, False),
        _p("backprop", 240.0, 0.25, 3.85, False),
        _p("gaussian", 180.0, 0.05, 3.85, False),
        _p("hotspot", 120.0, 0.002, 4.04, True),
        _p("lavamd", 150.0, 0.10, 3.85, False),
        _p("nw", 200.0, 0.17, 3.69, True),
        _p("pathfinder", 90.0, 0.35, 3.85, False),
        _p("srad", 300.0, 0.08, 3.85, False),
    )
}

ALIASES: dict[str, str] = {
    "btree": "b+tree", "bplustree": "b+tree", "b-tree": "b+tree",
    "back-propagation": "backprop", "backpropagation": "backprop",
    "needleman-wunsch": "nw", "lava-md": "lavamd", "lavaMD".lower(): "lavamd",
}

"""One pure check that applying a placement over-commits nothing (provisional; see issue 12)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from disagg.placement.decisions import JobPlacement

EPS = 1e-9


def exceeds(need: float, free: float) -> bool:
    """Whether `need` is more than `free` (beyond float noise)."""
    return need > free + EPS


class Room(Protocol):
    def cpus_left(self, machine: str) -> float | None: ...
    def memory_left(self, machine: str) -> float: ...
    def device_problem(self, device_id: str) -> str | None: ...
    def link_left(self, link: str) -> float: ...
    def link_down(self, link: str) -> bool: ...


@dataclass
class RoomLedger:
    """A Room in plain dicts; `take` subtracts an accepted placement."""

    cpu: dict[str, float]
    mem: dict[str, float]
    devices: dict[str, str | None] = field(default_factory=dict)  # id -> problem (None: free)
    down: set[str] = field(default_factory=set)
    bandwidth: dict[str, float] = field(default_factory=dict)

    def cpus_left(self, machine: str) -> float | None:
        return self.cpu.get(machine)

    def memory_left(self, machine: str) -> float:
        return self.mem[machine]

    def device_problem(self, device_id: str) -> str | None:
        if device_id not in self.devices:
            return "is not in the inventory"
        return self.devices[device_id]

    def link_left(self, link: str) -> float:
        return self.bandwidth.get(link, math.inf)

    def link_down(self, link: str) -> bool:
        return link in self.down

    def take(self, p: JobPlacement) -> None:
        for t in p.tasks:
            self.cpu[t.machine] -= t.cpus
            self.mem[t.machine] -= t.memory_gb
            for g in t.devices:
                self.devices[g.id] = "is already held"
                for lk in g.path:
                    if lk in self.bandwidth:
                        self.bandwidth[lk] -= g.network_gbps


def over_commit(p: JobPlacement, room: Room) -> str | None:
    """Why applying this placement now would over-commit something (None when it fits)."""
    need_cpu: dict[str, float] = {}
    need_mem: dict[str, float] = {}
    need_link: dict[str, float] = {}
    seen: set[str] = set()
    for t in p.tasks:
        if room.cpus_left(t.machine) is None:
            return f"machine {t.machine} is not in the inventory"
        need_cpu[t.machine] = need_cpu.get(t.machine, 0.0) + t.cpus
        need_mem[t.machine] = need_mem.get(t.machine, 0.0) + t.memory_gb
        for g in t.devices:
            problem = "is already held" if g.id in seen else room.device_problem(g.id)
            if problem:
                return f"device {g.id} {problem}"
            hit = [lk for lk in g.path if room.link_down(lk)]
            if hit:
                return f"link {hit[0]} to device {g.id} is down"
            for lk in g.path:
                need_link[lk] = need_link.get(lk, 0.0) + g.network_gbps
            seen.add(g.id)
    for m, c in need_cpu.items():
        cpu = room.cpus_left(m) or 0.0
        if exceeds(c, cpu):
            return f"machine {m} has {cpu:g} cpus free, the job needs {c:g}"
        if exceeds(need_mem[m], room.memory_left(m)):
            return f"machine {m} has {room.memory_left(m):g} GB free, the job needs {need_mem[m]:g}"
    for lk, gbps in need_link.items():
        left = room.link_left(lk)
        if exceeds(gbps, left):
            return f"link {lk} has {max(left, 0.0):g} Gbit/s left, the job needs {gbps:g}"
    return None

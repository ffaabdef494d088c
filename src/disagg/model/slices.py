"""What a slice is made of: the placement it was composed from, as one typed, frozen value.

A slice carries its placement from the round that decided it to its teardown; the store keeps it
as JSON (`to_json` / `from_json`, the format every stored slice already has), and everything else
reads this value instead of parsing the JSON itself. One slice machine (LegoOS's vNode) per task,
on the task's host, holding the task's devices, local and remote.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from disagg.model.cluster import Allocation


@dataclass(frozen=True)
class PlacedDevice:
    """One device a task got: where it sits, whether it is remote, the links its traffic crosses and
    the bandwidth (Gbit/s) reserved on each of them."""

    id: str
    kind: str
    remote: bool
    location: str
    path: tuple[str, ...] = ()
    network_gbps: float = 0.0
    model: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "remote": self.remote, "location": self.location,
                               "path": list(self.path), "network_gbps": self.network_gbps}
        if self.model is not None:
            out["model"] = self.model
        return out

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> PlacedDevice:
        return PlacedDevice(str(d["id"]), str(d.get("kind", "")), bool(d.get("remote", False)),
                            str(d.get("location", "")), tuple(d.get("path", ())), float(d.get("network_gbps", 0.0)),
                            d.get("model"))


@dataclass(frozen=True)
class PlacedTask:
    """One task of the job: the machine whose cpus and memory it holds, and its devices."""

    task: str
    machine: str
    cpus: float
    memory_gb: float
    devices: tuple[PlacedDevice, ...] = ()

    @property
    def network_gbps(self) -> float:
        """What the task's remote devices reserve, summed (on its own uplink, every one of them)."""
        return sum(d.network_gbps for d in self.devices)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "machine": self.machine, "cpus": self.cpus, "memory_gb": self.memory_gb,
                "devices": [d.to_json() for d in self.devices]}

    @staticmethod
    def from_json(t: Mapping[str, Any]) -> PlacedTask:
        return PlacedTask(str(t["task"]), str(t["machine"]), float(t["cpus"]), float(t["memory_gb"]),
                          tuple(PlacedDevice.from_json(d) for d in t.get("devices", ())))


@dataclass(frozen=True)
class SliceMachine:
    """One machine of a slice with what the slice holds on it (the engine's unit)."""

    name: str                      # the slice machine's name as the engine will know it
    host: str                      # the physical machine it runs on (a cluster machine name)
    cpus: float
    memory_gb: float
    devices: tuple[str, ...] = ()  # device ids attached to it (local and remote), in order
    task: str = ""                 # the job's task it runs
    remote: tuple[str, ...] = ()   # which of `devices` are remote


@dataclass(frozen=True)
class SlicePlacement:
    """The placement a slice was composed from: its tasks, and the slice machines built for them."""

    slice_id: str
    tasks: tuple[PlacedTask, ...]

    @property
    def machines(self) -> tuple[SliceMachine, ...]:
        """One slice machine per task, named `<slice>-m<i>`, on the task's host."""
        return tuple(
            SliceMachine(
                name=f"{self.slice_id}-m{i}",
                host=t.machine,
                cpus=t.cpus,
                memory_gb=t.memory_gb,
                devices=tuple(d.id for d in t.devices),
                task=t.task,
                remote=tuple(d.id for d in t.devices if d.remote),
            )
            for i, t in enumerate(self.tasks)
        )

    def devices(self) -> Iterator[tuple[PlacedTask, PlacedDevice]]:
        """Every device of the slice with the task that holds it."""
        for t in self.tasks:
            for d in t.devices:
                yield t, d

    def device(self, device_id: str) -> PlacedDevice | None:
        return next((d for _, d in self.devices() if d.id == device_id), None)

    def link_load(self) -> dict[str, float]:
        """Gbit/s this slice reserves on each link: a remote device's bandwidth on every link of its path."""
        load: dict[str, float] = {}
        for _, d in self.devices():
            for link in d.path:
                load[link] = load.get(link, 0.0) + d.network_gbps
        return load

    @cached_property
    def link_loads(self) -> tuple[tuple[str, float], ...]:
        """`link_load` as pairs, worked out once: a commit sums every live slice's (thousands), and a
        placement never changes. (Most slices have no remote device: then empty.)"""
        return tuple(self.link_load().items())

    def allocations(self, job_id: str) -> list[Allocation]:
        """What the slice holds, as the policies' Allocation records (one per task)."""
        return [Allocation(job_id, t.machine, t.cpus, t.memory_gb, tuple(d.id for d in t.devices), t.network_gbps)
                for t in self.tasks]

    def to_json(self) -> dict[str, Any]:
        """The stored form: the tasks, and the slice machines (kept for readers of the raw rows)."""
        machines = [
            {"name": m.name, "host": m.host, "task": m.task, "cpus": m.cpus, "memory_gb": m.memory_gb,
             "devices": list(m.devices), "remote": list(m.remote)}
            for m in self.machines
        ]
        return {"machines": machines, "tasks": [t.to_json() for t in self.tasks]}

    @staticmethod
    def from_json(slice_id: str, data: Mapping[str, Any]) -> SlicePlacement:
        return SlicePlacement(slice_id, tuple(PlacedTask.from_json(t) for t in data.get("tasks", ())))


__all__ = ["PlacedDevice", "PlacedTask", "SliceMachine", "SlicePlacement"]

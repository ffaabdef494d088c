"""The store's record of the fabric's health: device failures, dropped links, drains and repairs.

The fabric is the truth about health; the store mirrors it so that snapshots and views need not ask
the fabric. `mirror_health` reads the fabric inside the transaction that writes what it saw,
serialized with every other health change (SQLite's writers are serial; PostgreSQL takes an
advisory transaction lock): a look at the fabric taken before an admin's repair — in another thread
or the other process of a split `serve` — can then never be written after the repair's own mirror,
which would leave a repaired link down or a device failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Connection, Table, select

from disagg.model import SlicePlacement
from disagg.model.states import ACTIVE_SLICE_STATES, Drain, Health
from disagg.store.base import StoreBase
from disagg.store.lifecycle import set_drain, set_health, set_links, thing_events
from disagg.store.models import DeviceRow, LinkRow, SliceRow

_devices: Table = DeviceRow.__table__  # type: ignore[assignment]
_links: Table = LinkRow.__table__  # type: ignore[assignment]
_slices: Table = SliceRow.__table__  # type: ignore[assignment]

#: What the fabric says is broken: (failed devices, dropped links).
FabricHealth = tuple[frozenset[str], frozenset[str]]


class HealthOps(StoreBase):
    """Mirroring the fabric's health, and the operator's drain and repair."""

    def mirror_health(self, look: Callable[[], FabricHealth], repaired: str | None = None) -> dict[str, str]:
        """Call `look` (which may change the fabric first, then reads its health) and mirror what it saw,
        in one serialized transaction; `repaired`: a device the operator repaired (healthy, no longer
        drained). Returns the slices that a failure hits, each with why."""
        with self.write() as s:
            self.serialize(s, "fabric-health")
            failed, down = look()
            conn = s.connection()
            now = time.time()
            set_health(conn, failed, Health.FAILED, "the fabric reports it failed", now)
            if repaired is not None:
                set_health(conn, [repaired], Health.HEALTHY, "repaired by an operator", now)
                set_drain(conn, [repaired], Drain.IN_SERVICE, "repaired by an operator", now)
            set_links(conn, down, "the fabric reports it down", "the fabric reports it up", now)
            return _victims(conn, failed, down)

    def drain_device(self, device_id: str) -> None:
        """Keep the device out of new slices (the slice holding it keeps it)."""
        with self.write() as s:
            set_drain(s.connection(), [device_id], Drain.DRAINED, "drained by an operator", time.time())

    def device_events(self, device_id: str, limit: int = 100) -> list[dict[str, object]]:
        """The device's health and drain moves, newest first."""
        with self.read_core() as conn:
            return thing_events(conn, "device", device_id, limit)

    def link_events(self, link_id: str, limit: int = 100) -> list[dict[str, object]]:
        """The link's moves (up, down), newest first."""
        with self.read_core() as conn:
            return thing_events(conn, "link", link_id, limit)

    def has_device(self, device_id: str) -> bool:
        with self.read_core() as conn:
            return conn.execute(select(_devices.c.id).where(_devices.c.id == device_id)).first() is not None

    def has_link(self, link_id: str) -> bool:
        with self.read_core() as conn:
            return conn.execute(select(_links.c.id).where(_links.c.id == link_id)).first() is not None


def _victims(conn: Connection, failed: frozenset[str], down: frozenset[str]) -> dict[str, str]:
    """The active slices that use a failed device or a remote device behind a dropped link, with why
    (a failed device is named before a dropped link)."""
    victims: dict[str, str] = {}
    if not failed and not down:
        return victims
    query = select(_slices.c.id, _slices.c.placement).where(_slices.c.state.in_(ACTIVE_SLICE_STATES))
    for slice_id, data in conn.execute(query):
        devices = [d for _, d in SlicePlacement.from_json(slice_id, data).devices()]
        why = next((f"device {d.id} failed" for d in devices if d.id in failed), None)
        why = why or next((f"link {lk} dropped (device {d.id})" for d in devices for lk in d.path if lk in down), None)
        if why is not None:
            victims[slice_id] = why
    return victims


__all__ = ["FabricHealth", "HealthOps"]

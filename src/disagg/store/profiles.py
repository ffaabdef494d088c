"""Learned and pinned profiles (issue 26): the observations finished tasks give, and the estimates.

`profile_observations` holds one row per completed slice the controller has looked at: its image, how
long its tasks ran, the share of its devices that were remote, the load on their paths meanwhile and
its job's SLO (`run_s` NULL: looked at, not usable — so it is not looked at again). `profiles` holds one row per
image the controller knows something of: the fit's numbers as JSON (`data`), or an admin's pinned
profile (`pinned`), which learning never overwrites. Both are bounded: at most `keep` observations per
image (the newest) and `max_images` images (the least recently updated go first), whatever the
tenants submit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import JSON, Boolean, Connection, Float, Integer, String, delete, func, insert, select, update
from sqlalchemy.orm import Mapped, mapped_column

from disagg.model.slices import SlicePlacement
from disagg.model.states import SliceOutcome, SliceState, StepStatus
from disagg.store.base import StoreBase
from disagg.store.history import HistoryRow
from disagg.store.models import Base, EventRow, JobRow, LinkRow, SliceRow, StepRow
from disagg.store.snapshot import recent_live_jobs


class ProfileRow(Base):
    """What the controller knows of one image: a fit (`data`) or an admin's pinned profile."""

    __tablename__ = "profiles"
    image: Mapped[str] = mapped_column(String(256), primary_key=True)
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)
    data: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Float, index=True)


class ObservationRow(Base):
    """One completed slice as an observation of its image (`run_s` NULL: not usable)."""

    __tablename__ = "profile_observations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    slice_id: Mapped[str] = mapped_column(String(32), unique=True)
    image: Mapped[str] = mapped_column(String(256), index=True)
    run_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    remote_share: Mapped[float] = mapped_column(Float)
    load: Mapped[float] = mapped_column(Float)
    at: Mapped[float] = mapped_column(Float)
    slo_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    gbps: Mapped[float | None] = mapped_column(Float, nullable=True)


#: The slice states whose remote runs are in flight (`ProfileOps.remote_in_flight`).
_IN_FLIGHT = (SliceState.COMPOSING, SliceState.RUNNING)


def _remote(placement: SlicePlacement) -> bool:
    return any(d.remote for t in placement.tasks for d in t.devices)


class ProfileOps(StoreBase):
    """Reading completed slices to learn from, writing observations and estimates, pinning."""

    def completed_unobserved(self, limit: int = 200) -> list[dict[str, Any]]:
        """Completed slices not yet looked at, oldest first: slice, image, placement, its job's SLO, and
        the run's start (its launch-task step ended) and end (the slice left `running`)."""
        seen = select(ObservationRow.slice_id)
        query = (select(SliceRow.id, JobRow.image, SliceRow.placement, JobRow.slo_s)
                 .join(JobRow, JobRow.id == SliceRow.job_id)
                 .where(SliceRow.outcome == SliceOutcome.COMPLETED, SliceRow.state == SliceState.DONE,
                        SliceRow.id.not_in(seen))
                 .order_by(SliceRow.updated_at).limit(limit))
        with self.read_core() as conn:
            rows = [{"slice_id": str(sid), "image": str(image), "placement": SlicePlacement.from_json(sid, data),
                     "slo_s": None if slo is None else float(slo)}
                    for sid, image, data, slo in conn.execute(query)]
            ids = [str(r["slice_id"]) for r in rows]
            starts: dict[str, float | None] = dict(conn.execute(
                select(StepRow.slice_id, func.max(StepRow.ended_at))
                .where(StepRow.slice_id.in_(ids), StepRow.op == "launch-task", StepRow.status == StepStatus.DONE)
                .group_by(StepRow.slice_id)).all()) if ids else {}
            ends: dict[str, float | None] = {str(k): v for k, v in conn.execute(
                select(EventRow.slice_id, func.min(EventRow.at))
                .where(EventRow.slice_id.in_(ids), EventRow.from_state == SliceState.RUNNING)
                .group_by(EventRow.slice_id))} if ids else {}
        for r in rows:
            key = str(r["slice_id"])
            r["started"], r["ended"] = starts.get(key), ends.get(key)
        return rows

    def remote_in_flight(self, wanted: Callable[[str], bool], normalize: Callable[[str], str],
                         max_age_s: float = 0.0) -> dict[str, int]:
        """Per image that `wanted` asks for (names as `normalize` gives them), its slices composing or
        running with a remote device: the remote runs that will teach its remote cost once they end.

        Asked every round-table refresh (1 s) while learning is on, with thousands of live slices on a
        large cluster. `max_age_s`: the live slices as this store's last snapshot read them will do if
        that read is at most this old (the round's own, a moment before: a second read of some ten
        thousand rows cost the loop a quarter of its round in `bench controller`); a job's image is
        then read once per job. Else the live slices' ids and images are read, and a slice's placement
        is read and parsed once (a job slice's placement is never rewritten). Whether a slice holds a
        remote device is kept while it lives."""
        known: dict[str, bool] = getattr(self, "_remote_slices", {})
        recent = recent_live_jobs(self.read_engine, max_age_s) if max_age_s > 0 else None
        with self.read_core() as conn:
            if recent is not None:
                placed = {sid: placement for sid, _, state, placement in recent if state in _IN_FLIGHT}
                raw = self._images_of([(sid, job) for sid, job, state, _ in recent if state in _IN_FLIGHT], conn)
            else:
                placed = {}
                live = (select(SliceRow.id, JobRow.image).join(JobRow, JobRow.id == SliceRow.job_id)
                        .where(SliceRow.state.in_(_IN_FLIGHT)))
                raw = [(str(sid), str(image)) for sid, image in conn.execute(live)]
            # Named and asked about once per image, not per slice (thousands of slices, a few images).
            names = {image: normalize(image) for image in {image for _, image in raw}}
            wants = {name: wanted(name) for name in set(names.values())}
            asked = [(sid, names[image]) for sid, image in raw if wants[names[image]]]
            new = sorted({sid for sid, _ in asked if sid not in known})
            known.update((sid, _remote(placed[sid])) for sid in new if sid in placed)
            new = [sid for sid in new if sid not in placed]
            for start in range(0, len(new), 500):
                chunk = select(SliceRow.id, SliceRow.placement).where(SliceRow.id.in_(new[start:start + 500]))
                for sid, data in conn.execute(chunk):
                    known[str(sid)] = _remote(SlicePlacement.from_json(sid, data))
        alive = {sid for sid, _ in raw}
        self._remote_slices = {sid: remote for sid, remote in known.items() if sid in alive}
        out: dict[str, int] = {}
        for sid, name in asked:
            if known.get(sid):
                out[name] = out.get(name, 0) + 1
        return out

    def _images_of(self, slices: list[tuple[str, str]], conn: Connection) -> list[tuple[str, str]]:
        """(slice, its job's image) for each (slice, job): a job's image is read once (it never changes)
        and kept while one of its slices is in flight."""
        images: dict[str, str] = getattr(self, "_job_images", {})
        missing = sorted({job for _, job in slices if job not in images})
        for start in range(0, len(missing), 500):
            named = select(JobRow.id, JobRow.image).where(JobRow.id.in_(missing[start:start + 500]))
            images.update((str(job), str(image)) for job, image in conn.execute(named))
        flying = {job for _, job in slices}
        self._job_images = {job: image for job, image in images.items() if job in flying}
        return [(sid, images[job]) for sid, job in slices if job in images]

    def link_samples(self, start: float, end: float) -> tuple[list[tuple[float, dict[str, float]]], dict[str, float]]:
        """The history's link-load samples taken in [start, end] (at, link → Gbit/s) and every link's
        capacity: what the load on a finished task's path is read from."""
        with self.read_core() as conn:
            samples = [(float(at), dict(data.get("link_load_gbps", {})))
                       for at, data in conn.execute(select(HistoryRow.at, HistoryRow.data)
                                                    .where(HistoryRow.at >= start, HistoryRow.at <= end)
                                                    .order_by(HistoryRow.at))]
            caps = {str(k): float(g) for k, g in conn.execute(select(LinkRow.id, LinkRow.gbps))}
        return samples, caps

    def add_observations(self, rows: list[dict[str, Any]], keep: int) -> list[str]:
        """Store observations (slice_id, image, run_s, remote_share, load, at, slo_s, gbps); keep the newest `keep`
        usable ones per image. The images that got a usable one."""
        if not rows:
            return []
        images = sorted({r["image"] for r in rows if r["run_s"] is not None})
        with self.write_core() as conn:
            conn.execute(insert(ObservationRow), rows)
            for image in images:
                old = (select(ObservationRow.id).where(ObservationRow.image == image, ObservationRow.run_s.is_not(None))
                       .order_by(ObservationRow.at.desc(), ObservationRow.id.desc()).offset(keep))
                conn.execute(update(ObservationRow).where(ObservationRow.id.in_(old)).values(run_s=None))
        return images

    def observations_of(self, image: str) -> list[tuple[float, float, float, float | None, float | None]]:
        """An image's usable observations: (run_s, remote_share, load, slo_s, gbps), oldest first."""
        query = (select(ObservationRow.run_s, ObservationRow.remote_share, ObservationRow.load, ObservationRow.slo_s,
                        ObservationRow.gbps)
                 .where(ObservationRow.image == image, ObservationRow.run_s.is_not(None))
                 .order_by(ObservationRow.at, ObservationRow.id))
        with self.read_core() as conn:
            return [(float(r or 0.0), float(s), float(lo), None if slo is None else float(slo),
                     None if g is None else float(g)) for r, s, lo, slo, g in conn.execute(query)]

    def save_estimates(self, estimates: dict[str, dict[str, Any]], now: float, max_images: int) -> None:
        """Write the images' fits (a pinned image keeps its pin); then keep the `max_images` newest."""
        with self.write_core() as conn:
            pinned = set(conn.execute(select(ProfileRow.image).where(ProfileRow.image.in_(list(estimates)),
                                                                     ProfileRow.pinned)).scalars())
            for image, data in estimates.items():
                if image in pinned:
                    continue
                conn.execute(delete(ProfileRow).where(ProfileRow.image == image))
                conn.execute(insert(ProfileRow), [{"image": image, "pinned": False, "data": data, "updated_at": now}])
            stale = (select(ProfileRow.image).where(ProfileRow.pinned.is_(False))
                     .order_by(ProfileRow.updated_at.desc()).offset(max_images))
            gone = list(conn.execute(stale).scalars())
            if gone:
                conn.execute(delete(ProfileRow).where(ProfileRow.image.in_(gone)))
                conn.execute(delete(ObservationRow).where(ObservationRow.image.in_(gone),
                                                          ObservationRow.run_s.is_not(None)))

    def profile_rows(self, after: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
        """The images the store knows, by name: image, pinned, data, updated_at."""
        query = select(ProfileRow).order_by(ProfileRow.image).limit(limit)
        if after is not None:
            query = query.where(ProfileRow.image > after)
        with self.read() as s:
            return [{"image": r.image, "pinned": r.pinned, "data": dict(r.data), "updated_at": r.updated_at}
                    for r in s.scalars(query)]

    def profile_row(self, image: str) -> dict[str, Any] | None:
        with self.read() as s:
            r = s.get(ProfileRow, image)
            return None if r is None else {"image": r.image, "pinned": r.pinned, "data": dict(r.data),
                                           "updated_at": r.updated_at}

    def pin_profile(self, image: str, data: dict[str, Any], now: float) -> None:
        """An admin's profile for `image`: learning keeps its observations but never replaces it."""
        with self.write_core() as conn:
            conn.execute(delete(ProfileRow).where(ProfileRow.image == image))
            conn.execute(insert(ProfileRow), [{"image": image, "pinned": True, "data": data, "updated_at": now}])

    def unpin_profile(self, image: str) -> bool:
        """Drop an admin's pin (learning takes the image up again at its next observation)."""
        with self.write_core() as conn:
            return bool(conn.execute(delete(ProfileRow).where(ProfileRow.image == image, ProfileRow.pinned)).rowcount)

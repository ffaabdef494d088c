"""What the controller knows of each image, and what it learns as tasks complete (issue 26).

`ProfileKeeper` holds the operator's table (`profiles:`, else the shipped Rodinia set) and, on the
loop's side, turns completed slices into observations (`profiles.observe`), refits the images they
are of (`profiles.learn`, with the table's entry, else the learned images' typical terms, as prior)
and stores the fits. Each round it hands the policy one table: the operator's, overlaid with the
admins' pinned profiles and, for every image with observations, its *pessimistic* learned profile —
so an image whose remote runs are few never looks as if remote devices were free. An image with no
observation and no entry stays neutral: with no run its base time is unknown, and the neutral profile
is the one that does not pretend to know it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from typing import Any

from disagg.control.config import Config
from disagg.model import Job
from disagg.model.spec import load_profiles
from disagg.profiles import NEUTRAL, SHIPPED, Profile, lookup, normalize_image
from disagg.profiles.learn import Estimate, Observation, cold_bound, exploring, fit, remote_slowdown, typical
from disagg.profiles.observe import observation
from disagg.profiles.table import ProfileTable, profile_fields, profile_from_fields
from disagg.store import Store

log = logging.getLogger(__name__)

#: The round's table is read from the store at most this often, seconds (an admin's pin shows within it).
REFRESH_S = 1.0
#: The loop looks for completed slices to learn from at most this often, seconds.
LEARN_EVERY_S = 2.0


@lru_cache(maxsize=8)
def operator_table(path: str | None) -> ProfileTable:
    """The operator's table (`profiles:`), read once per process as the rest of the config is, or the
    shipped one: the loop's keeper and every API request's directory share it."""
    return load_profiles(path) if path else SHIPPED


def estimate_data(est: Estimate) -> dict[str, Any]:
    """An estimate as the store keeps it and the API shows it."""
    mean, pess = est.profile(), est.profile(pessimistic=True)
    return {
        "kind": "learned", "observations": est.observations, "remote_observations": est.remote_observations,
        "rmse_s": round(est.rmse_s, 6), "prior": est.prior_kind, "coef": list(est.coef), "sd": list(est.sd),
        "slowdown": round(est.slowdown(), 6), "slowdown_pessimistic": round(est.slowdown(pessimistic=True), 6),
        "slowdown_sd": round(est.slowdown_sd(), 6), "drawn_gbps": est.drawn_gbps,
        "profile": profile_fields(mean), "pessimistic": profile_fields(pess),
    }


def _known(image: str, data: dict[str, Any]) -> str:
    if data.get("kind") == "pinned":
        return f"placed by the pinned profile of {image} ({data['profile'].get('source') or 'an admin'})"
    return (f"placed by the learned profile of {image}: {data['observations']} tasks "
            f"({data['remote_observations']} with remote devices), remote slowdown {data['slowdown']:.3g}, "
            f"placed as {data['slowdown_pessimistic']:.3g} (its 95% bound)")


def pinned_data(profile: Profile) -> dict[str, Any]:
    return {"kind": "pinned", "profile": profile_fields(profile)}


def _estimates(rows: list[dict[str, Any]]) -> dict[str, Profile]:
    """Each learned or pinned image's profile as now estimated (not its pessimistic bound): what an
    observation's load samples are weighed by."""
    return {row["image"]: profile_from_fields(row["data"]["profile"]) for row in rows
            if row["data"].get("kind") in ("learned", "pinned") and "profile" in row["data"]}


def in_flight(store: Store, config: Config, rows: list[dict[str, Any]],
              unseen: Callable[[str], bool] | None = None) -> dict[str, int]:
    """Per learned image of `rows` still exploring by its finished runs, and per image `unseen` asks for
    (one with no finished run, placed by the neutral profile until its remote runs in flight reach
    `explore`: `cold_bound`), its remote runs in flight. Placements are read only for those images."""
    if not config.learn_profiles:
        return {}
    explore = config.profiles_explore
    images = {r["image"] for r in rows if r["data"].get("kind") == "learned"
              and exploring(int(r["data"].get("remote_observations", 0)), 0, explore)}
    if not images and unseen is None:
        return {}
    # (The live slices as the round's snapshot read them will do: the table itself is up to REFRESH_S old.)
    return store.remote_in_flight(lambda name: name in images or (unseen is not None and unseen(name)),
                                  normalize_image, max_age_s=REFRESH_S)


def _typical(rows: list[dict[str, Any]]) -> Profile | None:
    """`learn.typical` of the store's learned images (a new image's prior)."""
    learned = [r["data"] for r in rows if r["data"].get("kind") == "learned"]
    return typical((d["coef"], int(d["remote_observations"]), d.get("drawn_gbps")) for d in learned)


def _cold_note(image: str, flying: int, bound: Profile) -> str:
    return (f"placed by a bound for {image}, no task of which has finished yet: {flying} of its runs with remote "
            f"devices are in flight, so remote is priced as {remote_slowdown(bound):.3g}x slower at load 0.5 "
            f"({bound.source})")


class ProfileKeeper:
    """The operator's table, the store's learned and pinned profiles, and the learning step."""

    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        self.base: ProfileTable = operator_table(config.profiles)
        self._table: dict[str, Profile] | None = None
        self._read_at = -math.inf
        self._known: dict[str, str] = {}  # image → what the round knew of it, for the job's history

    def round_table(self) -> ProfileTable:
        """The table the round places by (re-read from the store at most every REFRESH_S)."""
        now = time.monotonic()
        if self._table is None or now - self._read_at >= REFRESH_S:
            table = dict(self.base)
            known: dict[str, str] = {}
            rows = self._rows()
            used = {r["image"] for r in rows if r["data"].get("kind") == "pinned"
                    or (self.config.learn_profiles and r["data"].get("observations", 0) > 0)}
            flying = in_flight(self.store, self.config, rows, lambda name: name not in used and name != NEUTRAL.name
                               and not lookup(name, self.base).known)  # `unknown`: neutral, learned or not
            for row in rows:
                data = row["data"]
                cautious = not exploring(int(data.get("remote_observations", 0)), flying.get(row["image"], 0),
                                         self.config.profiles_explore)
                key = "pessimistic" if data.get("kind") == "learned" and cautious else "profile"
                if row["image"] in used:
                    table[row["image"]] = profile_from_fields(data[key])
                    known[row["image"]] = _known(row["image"], data)
            self._cold(table, known, rows, {k: n for k, n in flying.items() if k not in used})
            self._table, self._known, self._read_at = table, known, now
        return self._table

    def _cold(self, table: dict[str, Profile], known: dict[str, str], rows: list[dict[str, Any]],
              flying: dict[str, int]) -> None:
        """Images with no finished run and no entry whose remote runs in flight reach `explore`: placed
        by their prior's bound (`learn.cold_bound`) instead of the neutral profile's "remote is free"."""
        cautious = [k for k, n in flying.items() if not exploring(0, n, self.config.profiles_explore)]
        if not cautious:
            return
        bound = cold_bound("unseen", _typical(rows))
        for image in cautious:
            table[image] = replace(bound, name=image)
            known[image] = _cold_note(image, flying[image], bound)

    def note_placed(self, job_ids: list[str], jobs: list[Job]) -> None:
        """Say in each placed job's history which learned or pinned profile placed it, and how sure it was
        (jobs placed by the table's entry or the neutral profile get no note: the table says it)."""
        if not self._known or not job_ids:
            return
        images = {j.name: normalize_image(j.image) for j in jobs}
        notes = {jid: self._known[images[jid]] for jid in job_ids if images.get(jid) in self._known}
        if notes:
            self.store.note_jobs(notes)

    def _rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        after = None
        while True:
            page = self.store.profile_rows(after)
            rows += page
            if len(page) < 500:
                return rows
            after = page[-1]["image"]

    def learn(self, now: float) -> list[str]:
        """Turn completed slices into observations and refit their images; the images refitted."""
        if not self.config.learn_profiles:
            return []
        done = self.store.completed_unobserved()
        if not done:
            return []
        known = self._rows()  # read once: the observations' pace and the fits' typical prior
        rows = self._observations(done, now, known)
        images = self.store.add_observations(rows, self.config.profile_observations)
        if images:
            fits = self._fits(images, known)
            self.store.save_estimates(fits, now, self.config.profiles_max_images)
            self._table = None
            for image, data in fits.items():
                log.info("profile of %s learned from %d tasks (%d remote): remote slowdown %.3f (pessimistic %.3f)",
                         image, data["observations"], data["remote_observations"], data["slowdown"],
                         data["slowdown_pessimistic"])
        return images

    def _observations(self, done: list[dict[str, Any]], now: float, known: list[dict[str, Any]]
                      ) -> list[dict[str, Any]]:
        spans = [(d["started"], d["ended"]) for d in done if d["started"] is not None and d["ended"] is not None]
        samples, caps = self.store.link_samples(min(s for s, _ in spans), max(e for _, e in spans)) if spans \
            else ([], {})
        rows = []
        estimates = _estimates(known)
        for d in done:
            start, end = d["started"], d["ended"]
            mine = [s for s in samples if start is not None and end is not None and start <= s[0] <= end]
            image = normalize_image(d["image"])
            # `unknown` is no image but the default of a job that names none: its jobs have nothing in common
            # to learn (a few sleeps made remote devices look 15x slower for every such job); kept, unusable
            obs = None if image == NEUTRAL.name else observation(
                d["placement"], start, end, mine, caps, estimates.get(image, lookup(image, self.base)))
            rows.append({"slice_id": d["slice_id"], "image": image, "at": now,
                         "run_s": None if obs is None else obs.run_s,
                         "remote_share": 0.0 if obs is None else obs.remote_share,
                         "load": 0.0 if obs is None else obs.load, "slo_s": d["slo_s"],
                         "gbps": None if obs is None else obs.gbps})
        return rows

    def _fits(self, images: list[str], rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        prior_typical = _typical(rows)
        out = {}
        for image in images:
            obs = [Observation(*row) for row in self.store.observations_of(image)]
            table_entry = lookup(image, self.base)
            est = fit(image, obs, table_entry if table_entry.known else None, prior_typical)
            out[image] = estimate_data(est)
        return out


# --- what people see: GET /v1/profiles, disagg profiles, the job page -------------------------------
def view(image: str, entry: Profile | None, row: dict[str, Any] | None, learning: bool, explore: int = 0,
         in_flight: int = 0) -> dict[str, Any]:
    """One image: the profile the policies use (`used`: table, learned or pinned), the table's entry,
    the learned estimate with its uncertainty and how many tasks it rests on. `in_flight`: its remote
    runs not finished yet, which count towards `explore` (`learn.exploring`)."""
    data = row["data"] if row is not None else {}
    kind = data.get("kind")
    learned = kind == "learned" and learning and int(data.get("observations", 0)) > 0
    used = "pinned" if kind == "pinned" else "learned" if learned else "table" if entry is not None else "neutral"
    out: dict[str, Any] = {
        "image": image, "used": used, "table": profile_fields(entry) if entry is not None else None,
        "learned": None, "pinned": data["profile"] if kind == "pinned" else None,
        "updated_at": row["updated_at"] if row is not None else None,
    }
    if kind == "learned":
        out["learned"] = {k: data[k] for k in ("observations", "remote_observations", "rmse_s", "prior", "sd",
                                               "slowdown", "slowdown_pessimistic", "profile", "pessimistic")}
        # φ(1, 0.5)/φ(0)'s own doubt (`Estimate.slowdown_sd`; None for an estimate stored before it was kept)
        out["learned"]["slowdown_sd"] = data.get("slowdown_sd")
        out["learned"]["drawn_gbps"] = data.get("drawn_gbps")  # its remote runs' median draw (None: none measured)
    cautious = not exploring(int(data.get("remote_observations", 0)), in_flight, explore)
    out["exploring"] = used == "learned" and not cautious
    profile = {"pinned": out["pinned"], "learned": data.get("pessimistic" if cautious else "profile"),
               "table": out["table"]}.get(used)
    out["profile"] = profile
    out["slowdown"] = round(remote_slowdown(profile_from_fields(profile)), 6) if profile else 1.0
    return out


class ProfileDirectory:
    """The API's side: every image the table or the store knows, paged by name; an admin's pins."""

    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        self.base: ProfileTable = operator_table(config.profiles)

    def _entry(self, image: str) -> Profile | None:
        p = self.base.get(image)
        return p if p is not None and p.name == image else None

    def page(self, after: str | None, limit: int) -> tuple[list[dict[str, Any]], str | None]:
        """Up to `limit` images after `after`, by name, and the last one's name when more may follow."""
        rows = {r["image"]: r for r in self.store.profile_rows(after, limit + 1)}
        names = sorted({n for n, p in self.base.items() if p.name == n and (after is None or n > after)} | set(rows))
        names = names[:limit + 1]
        more = len(names) > limit
        cfg = self.config
        flying = in_flight(self.store, cfg, [rows[n] for n in names[:limit] if n in rows])
        items = [view(n, self._entry(n), rows.get(n), cfg.learn_profiles, cfg.profiles_explore, flying.get(n, 0))
                 for n in names[:limit]]
        return items, (names[limit - 1] if more else None)

    def one(self, image: str) -> dict[str, Any] | None:
        name = normalize_image(image)
        row = self.store.profile_row(name)
        entry = self._entry(name) or (self.base.get(name) if name in self.base else None)
        if row is None and entry is None:
            return None
        flying = in_flight(self.store, self.config, [row] if row is not None else [])
        return view(name, entry, row, self.config.learn_profiles, self.config.profiles_explore, flying.get(name, 0))

    def pin(self, image: str, profile: Profile) -> dict[str, Any]:
        name = normalize_image(image)
        self.store.pin_profile(name, pinned_data(profile), time.time())
        out = self.one(name)
        assert out is not None
        return out

    def unpin(self, image: str) -> bool:
        return self.store.unpin_profile(normalize_image(image))

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
from typing import Any

from disagg.control.config import Config
from disagg.model.spec import load_profiles
from disagg.profiles import SHIPPED, Profile, lookup, normalize_image
from disagg.profiles.learn import Estimate, Observation, fit, typical
from disagg.profiles.observe import observation
from disagg.profiles.table import ProfileTable, profile_fields, profile_from_fields
from disagg.store import Store

log = logging.getLogger(__name__)

#: The round's table is read from the store at most this often, seconds (an admin's pin shows within it).
REFRESH_S = 1.0
#: The loop looks for completed slices to learn from at most this often, seconds.
LEARN_EVERY_S = 2.0


def estimate_data(est: Estimate) -> dict[str, Any]:
    """An estimate as the store keeps it and the API shows it."""
    mean, pess = est.profile(), est.profile(pessimistic=True)
    return {
        "kind": "learned", "observations": est.observations, "remote_observations": est.remote_observations,
        "rmse_s": round(est.rmse_s, 6), "prior": est.prior_kind, "coef": list(est.coef), "sd": list(est.sd),
        "slowdown": round(est.slowdown(), 6), "slowdown_pessimistic": round(est.slowdown(pessimistic=True), 6),
        "profile": profile_fields(mean), "pessimistic": profile_fields(pess),
    }


def pinned_data(profile: Profile) -> dict[str, Any]:
    return {"kind": "pinned", "profile": profile_fields(profile)}


class ProfileKeeper:
    """The operator's table, the store's learned and pinned profiles, and the learning step."""

    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        self.base: ProfileTable = load_profiles(config.profiles) if config.profiles else SHIPPED
        self._table: dict[str, Profile] | None = None
        self._read_at = -math.inf

    def round_table(self) -> ProfileTable:
        """The table the round places by (re-read from the store at most every REFRESH_S)."""
        now = time.monotonic()
        if self._table is None or now - self._read_at >= REFRESH_S:
            table = dict(self.base)
            for row in self._rows():
                data = row["data"]
                key = "profile" if data.get("kind") == "pinned" else "pessimistic"
                if data.get("kind") == "pinned" or (self.config.learn_profiles and data.get("observations", 0) > 0):
                    table[row["image"]] = profile_from_fields(data[key])
            self._table, self._read_at = table, now
        return self._table

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
        rows = self._observations(done, now)
        images = self.store.add_observations(rows, self.config.profile_observations)
        if images:
            fits = self._fits(images)
            self.store.save_estimates(fits, now, self.config.profiles_max_images)
            self._table = None
            for image, data in fits.items():
                log.info("profile of %s learned from %d tasks (%d remote): remote slowdown %.3f (pessimistic %.3f)",
                         image, data["observations"], data["remote_observations"], data["slowdown"],
                         data["slowdown_pessimistic"])
        return images

    def _observations(self, done: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        spans = [(d["started"], d["ended"]) for d in done if d["started"] is not None and d["ended"] is not None]
        samples, caps = self.store.link_samples(min(s for s, _ in spans), max(e for _, e in spans)) if spans \
            else ([], {})
        rows = []
        for d in done:
            start, end = d["started"], d["ended"]
            mine = [s for s in samples if start is not None and end is not None and start <= s[0] <= end]
            obs = observation(d["placement"], start, end, mine, caps)
            image = normalize_image(d["image"])
            rows.append({"slice_id": d["slice_id"], "image": image, "at": now,
                         "run_s": None if obs is None else obs.run_s,
                         "remote_share": 0.0 if obs is None else obs.remote_share,
                         "load": 0.0 if obs is None else obs.load})
        return rows

    def _fits(self, images: list[str]) -> dict[str, dict[str, Any]]:
        known = [r["data"] for r in self._rows() if r["data"].get("kind") == "learned"]
        prior_typical = typical((d["coef"], int(d["remote_observations"])) for d in known)
        out = {}
        for image in images:
            obs = [Observation(r, s, lo) for r, s, lo in self.store.observations_of(image)]
            table_entry = lookup(image, self.base)
            est = fit(image, obs, table_entry if table_entry.known else None, prior_typical)
            out[image] = estimate_data(est)
        return out

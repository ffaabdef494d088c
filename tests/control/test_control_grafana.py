"""The Grafana dashboard in docs/grafana/ queries only metrics that /metrics exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from control_helpers import body, wait_for
from fastapi.testclient import TestClient

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "disagg.json"


def queried_metrics(dashboard: dict[str, object]) -> set[str]:
    """Every disagg metric name in the panels' PromQL (label names and functions are not metrics)."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]  # type: ignore[attr-defined]
    return {m for e in exprs for m in re.findall(r"\b(disagg_[a-z_]+)\b", e)}


def test_every_metric_the_grafana_dashboard_queries_exists(api: tuple[TestClient, dict[str, str]]) -> None:
    client, tok = api
    headers = {"Authorization": f"Bearer {tok['alice']}"}
    jid = client.post("/v1/jobs", headers=headers, json=body("g", gpu=1)).json()["id"]
    wait_for(lambda: client.get(f"/v1/jobs/{jid}", headers=headers).json()["state"] == "completed",
             what="a job to complete (so every histogram has samples)")
    text = client.get("/metrics", headers=headers).text
    exposed = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    dashboard = json.loads(DASHBOARD.read_text())
    wanted = queried_metrics(dashboard)
    assert len(wanted) >= 10
    assert sorted(wanted - exposed) == []
    assert all(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])

"""The Slurm engine's pure helpers: GRES index parsing, names, the site file."""

from __future__ import annotations

from pathlib import Path

import pytest

from disagg.engines.slurm import device_kind, is_disagg_job, parse_gres_indices, slice_key
from disagg.engines.slurm_node import DynamicNodes, NodeSpec, valid_node_name
from disagg.engines.slurm_site import SlurmSite, StaticNode

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize(("detail", "indices"), [
    ("gpu:2(IDX:0-1)", [0, 1]),
    ("gpu:3(IDX:0,2-3)", [0, 2, 3]),
    ("gpu:tesla:1(IDX:5)", [5]),
    ("gpu:0", []),
    ("", []),
], ids=["range", "mixed", "typed", "none", "empty"])
def test_parse_gres_indices(detail: str, indices: list[int]) -> None:
    assert parse_gres_indices(detail) == indices


def test_names() -> None:
    assert slice_key("job 1/slice#2") == "job_1_slice_2"
    with pytest.raises(ValueError, match="cannot name a Slurm job"):
        slice_key("")
    assert device_kind("pool0/gpu12") == "gpu"
    assert device_kind("m1/nvme0") == "nvme"
    assert valid_node_name("s1-m0") and not valid_node_name("1abc") and not valid_node_name("a/b")
    assert is_disagg_job({"name": "disagg-s1", "comment": "disagg job=j slice=s1"})
    assert not is_disagg_job({"name": "disagg-s1", "comment": ""})


def test_site_round_trip(tmp_path: Path) -> None:
    site = SlurmSite(root=tmp_path, conf=tmp_path / "slurm.conf", netns="ns", bridge="br",
                     static_nodes=(StaticNode("n0", "m0", 4, 1000, ("m0/gpu0",)),))
    assert SlurmSite.load(site.save()) == site
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="'root' is missing"):
        SlurmSite.load(tmp_path / "bad.json")


def test_a_node_that_leaves_while_listed_is_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`joined()` reads records without the lock while `leave()` removes them: a record listed a moment
    ago and gone now is a node that left (the kill -9 trial's wait once died on this race)."""
    site = SlurmSite(root=tmp_path, conf=tmp_path / "slurm.conf", netns="ns", bridge="br")
    nodes = DynamicNodes(site)
    with nodes._locked():
        gone = nodes._allocate(NodeSpec("s1-m0", 2, 1000, ("p/gpu0",)))
        kept = nodes._allocate(NodeSpec("s2-m0", 2, 1000, ("p/gpu1",)))
    assert [n.name for n in nodes.joined()] == ["s1-m0", "s2-m0"]
    assert sorted(p.name for p in nodes.node_dir("s1-m0").iterdir()) == ["dev", "node.json"]  # no temp file
    assert (nodes.node_dir("s1-m0") / "node.json").stat().st_mode & 0o777 == 0o644
    listed = sorted(site.nodes_dir.glob("*/node.json"))
    (nodes.node_dir(gone.name) / "node.json").unlink()            # it leaves after being listed ...
    monkeypatch.setattr(type(site.nodes_dir), "glob", lambda self, pattern: iter(listed))
    monkeypatch.setattr(type(site.nodes_dir), "exists", lambda self: True)  # ... and after any check
    assert nodes.joined() == [kept]
    assert nodes.record(gone.name) is None

"""The Slurm engine's pure helpers: GRES index parsing, names, the site file."""

from __future__ import annotations

from pathlib import Path

import pytest

from disagg.engines.slurm import device_kind, is_disagg_job, parse_gres_indices, slice_key
from disagg.engines.slurm_node import valid_node_name
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

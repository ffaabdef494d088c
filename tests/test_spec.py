"""The specs users write: examples load, bad input names file, field, value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from disagg.model import Cluster, Job, SpecError, load_cluster, load_jobs, never_fits, parse_cluster, parse_jobs
from disagg.model.tenants import load_tenants

GOOD_CLUSTER = {
    "machines": [{"name": "m0", "rack": "r0", "cpus": 20, "memory_gb": 512, "uplink_gbps": 10,
                  "devices": {"gpu": {"model": "K80", "count": 4}, "nvme": {"count": 1}}}],
    "pools": [{"name": "box0", "rack": "r0", "uplink_gbps": 40, "devices": {"gpu": {"model": "P100", "count": 4}}}],
    "network": {"rack_uplink_gbps": 100},
    "allocations": [{"job": "warm0", "machine": "m0", "cpus": 10, "memory_gb": 64, "devices": ["m0/gpu0"],
                     "network_gbps": 2}],
}


def test_issue_example_cluster_builds_stable_device_ids() -> None:
    cluster = parse_cluster(GOOD_CLUSTER)
    ids = [d.id for d in cluster.devices]
    assert ids == ["m0/gpu0", "m0/gpu1", "m0/gpu2", "m0/gpu3", "m0/nvme0",
                   "box0/gpu0", "box0/gpu1", "box0/gpu2", "box0/gpu3"]
    assert cluster.allocations[0].devices == ("m0/gpu0",)
    assert cluster.path("m0", "box0") == ("up:m0", "up:box0")


def test_pool_with_two_models_numbers_devices_across_groups() -> None:
    cluster = parse_cluster({"machines": [{"name": "n0", "cpus": 10, "memory_gb": 128}],
                             "pools": [{"name": "io", "devices": {"gpu": [{"model": "P100", "count": 2},
                                                                        {"model": "P40", "count": 1}]}}]})
    assert [(d.id, d.model) for d in cluster.devices] == [("io/gpu0", "P100"), ("io/gpu1", "P100"), ("io/gpu2", "P40")]


@pytest.mark.parametrize("name", ["drmaestro", "flowos"])
def test_shipped_examples_load(examples: Path, name: str) -> None:
    cluster = load_cluster(examples / f"{name}-testbed.yaml")
    jobs = load_jobs(examples / f"{name}-jobs.yaml", cluster)
    assert cluster.machines and jobs


def _bad_cluster(**change: object) -> dict[str, object]:
    data: dict[str, object] = {k: v for k, v in GOOD_CLUSTER.items()}
    data.update(change)
    return data


@pytest.mark.parametrize(("data", "pattern"), [
    (_bad_cluster(machines=[{"name": "m0", "cpus": -2, "memory_gb": 1}]), r"machines\[0\]\.cpus: value -2"),
    (_bad_cluster(machines=[{"name": "m0", "cpus": 2, "memory_gb": 1, "gpus": 4}]),
     r"machines\[0\]\.gpus: unknown field 'gpus' \(allowed: name, rack, cpus"),
    (_bad_cluster(machines=[{"name": "m0", "cpus": 2, "memory_gb": 1},
                            {"name": "m0", "cpus": 2, "memory_gb": 1}], allocations=[]),
     r"machines\[1\]\.name: value 'm0' is used 2 times \(first at machines\[0\]\.name\)"),
    (_bad_cluster(allocations=[{"job": "w", "machine": "m0", "devices": ["m0/gpu9"]}]),
     r"allocations\[0\]\.devices\[0\]: device 'm0/gpu9' does not exist"),
    (_bad_cluster(allocations=[{"job": "w", "machine": "m9"}]), r"allocations\[0\]\.machine: value 'm9'"),
    (_bad_cluster(allocations=[{"job": "a", "machine": "m0", "cpus": 15}, {"job": "b", "machine": "m0", "cpus": 15}]),
     r"machine 'm0' has 20 cpus, allocations use 30"),
    (_bad_cluster(allocations=[{"job": "a", "machine": "m0", "devices": ["m0/gpu1"]},
                               {"job": "b", "machine": "m0", "devices": ["m0/gpu1"]}]),
     r"device 'm0/gpu1' is already given to 'a'"),
    (_bad_cluster(machines=[]), r"machines: value \[\] is not allowed"),
    ([1, 2], r"expected a mapping"),
], ids=["negative", "unknown-field", "duplicate", "bad-device-id", "unknown-machine", "over-allocated",
        "device-twice", "no-machines", "not-a-mapping"])
def test_bad_cluster_names_the_problem(data: object, pattern: str) -> None:
    with pytest.raises(SpecError, match=pattern) as info:
        parse_cluster(data, "cluster.yaml")
    assert str(info.value).startswith("cluster.yaml: ")


@pytest.mark.parametrize(("jobs", "pattern"), [
    ([{"name": "j", "tasks": {"count": -1}}], r"jobs\[0\]\.tasks\.count: value -1 is not allowed"),
    ([{"name": "j", "tasks": {"gpux": 1}}], r"unknown field 'gpux' \(allowed: count, cpus"),
    ([{"name": "j"}, {"name": "j"}], r"jobs\[1\]\.name: value 'j' is used 2 times"),
    ([{"name": "j", "tasks": {"cpus": 64}}],
     r"jobs\[0\] \(j\): can never fit on this cluster: each task needs 64 cpus"),
    ([{"name": "j", "tasks": {"gpu": 9}}], r"needs 9 gpu in all; the cluster has 8"),
    ([{"name": "j", "tasks": {"gpu": 1, "gpu_model": "H100"}}], r"needs 1 gpu of model H100 in all; the cluster has 0"),
    ([{"name": "j", "importance": 0}], r"jobs\[0\]\.importance: value 0"),
], ids=["negative-count", "unknown-field", "duplicate", "cpus-never-fit", "gpus-never-fit", "model-missing",
        "importance-range"])
def test_bad_jobs_name_the_problem(jobs: list[dict[str, object]], pattern: str) -> None:
    cluster = parse_cluster(GOOD_CLUSTER)
    with pytest.raises(SpecError, match=pattern):
        parse_jobs({"jobs": jobs}, cluster, "jobs.yaml")


def test_unreadable_and_malformed_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read file"):
        load_cluster(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("machines:\n  - {name: m0, cpus: 4\n  - x\n")
    # the file, line and column, and what the parser found (not PyYAML's "<unicode string>")
    with pytest.raises(SpecError, match=r"bad\.yaml:4:1: not valid YAML: while parsing a flow mapping "
                                        r"\(from line 2, column 5\), did not find expected ',' or '}'") as info:
        load_cluster(bad)
    assert "unicode string" not in str(info.value)
    badjson = tmp_path / "bad.json"
    badjson.write_text('{"machines": [],,}')
    with pytest.raises(SpecError, match=r"bad\.json:1:17: not valid JSON"):
        load_cluster(badjson)


@pytest.mark.parametrize(("name", "text", "pattern"), [
    ("c.yaml", "machines:\n  - {name: m0, cpus: 4, memory_gb: 8, cpus: 400}\n",
     r"c\.yaml:2:39: not valid YAML: while constructing a mapping \(from line 2, column 5\), found key 'cpus' "
     r"twice \(first on line 2\)"),
    ("c.yaml", "machines:\n  - {name: m0, cpus: 4, memory_gb: 8}\nmachines:\n  - {name: m1, cpus: 4, memory_gb: 8}\n",
     r"c\.yaml:3:1: .*found key 'machines' twice \(first on line 1\)"),
    ("c.json", '{"machines": [{"name": "m0", "cpus": 4, "memory_gb": 8, "cpus": 400}]}',
     r"c\.json: not valid JSON: found key 'cpus' twice in one object"),
], ids=["yaml-field", "yaml-top-level", "json-field"])
def test_a_key_named_twice_is_refused_not_silently_the_last(tmp_path: Path, name: str, text: str,
                                                           pattern: str) -> None:
    """YAML and JSON keep the last of two equal keys: a machine spelt `cpus: 4, …, cpus: 400` had 400
    cpus, and a second `machines:` list replaced the first, without a word."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecError, match=pattern):
        load_cluster(path)


def test_a_merge_may_still_be_overridden(tmp_path: Path) -> None:
    """`<<` brings keys in to be overridden: that is not a key named twice."""
    from disagg.model.spec import load_yaml

    assert load_yaml("a: &a {cpus: 4, memory_gb: 8}\nb: {<<: *a, cpus: 8}\n")["b"] == {"cpus": 8, "memory_gb": 8}


@pytest.mark.parametrize("data", [bytes(range(250, 256)) * 20, "machines: []\n".encode("utf-16")],
                         ids=["binary", "utf-16"])
def test_a_spec_that_is_not_utf8_text_is_named_not_a_traceback(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    with pytest.raises(SpecError, match=r"c\.yaml: not UTF-8 text: byte 0x[0-9a-f]{2} at offset 0"):
        load_cluster(path)


def test_a_byte_order_mark_is_read_past(tmp_path: Path) -> None:
    import json

    for name, text in (("c.yaml", "machines:\n  - {name: m0, cpus: 4, memory_gb: 8}\n"),
                       ("c.json", json.dumps({"machines": [{"name": "m0", "cpus": 4, "memory_gb": 8}]}))):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())
        assert [m.name for m in load_cluster(path).machines] == ["m0"]


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"], ids=["empty", "blank", "comment"])
def test_an_empty_file_says_it_is_empty(tmp_path: Path, text: str) -> None:
    empty = tmp_path / "jobs.yaml"
    empty.write_text(text)
    with pytest.raises(SpecError, match=r"jobs\.yaml: the file is empty \(expected a mapping, e\.g\. `jobs:`") as info:
        load_jobs(empty)
    assert "NoneType" not in str(info.value)
    tenants = tmp_path / "tenants.yaml"  # each kind of file says what it should hold
    tenants.write_text(text)
    with pytest.raises(SpecError, match=r"tenants\.yaml: the file is empty \(expected a mapping, e\.g\. `tenants:`\)"):
        load_tenants(tenants)


@pytest.mark.parametrize(("tasks", "pattern"), [
    ({"cpus": True}, r"jobs\[0\]\.tasks\.cpus: value True is not allowed: Input should be a valid number"),
    ({"count": "2"}, r"jobs\[0\]\.tasks\.count: value '2' is not allowed: .*must be a whole number, not str"),
    ({"gpu": True}, r"jobs\[0\]\.tasks\.gpu: value True is not allowed: .*must be a whole number, not bool"),
    ({"gpu": 1.5}, r"jobs\[0\]\.tasks\.gpu: value 1\.5 is not allowed"),
    ({"memory_gb": "16"}, r"jobs\[0\]\.tasks\.memory_gb: value '16' is not allowed"),
], ids=["bool-for-number", "text-for-count", "bool-for-count", "fraction-for-count", "text-for-number"])
def test_specs_refuse_what_the_api_refuses(tasks: dict[str, object], pattern: str) -> None:
    """The same strict types as POST /v1/jobs: no bool for a number, no text for a count."""
    with pytest.raises(SpecError, match=pattern):
        parse_jobs({"jobs": [{"name": "j", "tasks": tasks}]})
    (job,) = parse_jobs({"jobs": [{"name": "j", "tasks": {"count": 2.0, "cpus": 2, "gpu": 1}}]})
    assert (job.tasks.count, job.tasks.cpus, job.tasks.wants("gpu")) == (2, 2.0, 1)


def _never_fits_by_definition(job: Job, cluster: Cluster) -> bool:
    """The rule read straight off the inventory, machine by machine and device by device."""
    t = job.tasks
    if not any(m.cpus >= t.cpus and m.memory_gb >= t.memory_gb for m in cluster.machines):
        return True
    if t.count * t.cpus > sum(m.cpus for m in cluster.machines):
        return True
    return any(
        t.count * t.wants(kind) > sum(1 for d in cluster.devices
                                      if d.kind == kind and t.models.get(kind) in (None, d.model))
        for kind in t.kinds)


@settings(max_examples=150, deadline=None)
@example(shapes=[(8, 1, 0, "K80"), (1, 16, 2, "P100")], count=1, cpus=1, memory=16, gpu=2, model=None)  # a trade-off
@given(
    shapes=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 4, 16]),
                              st.integers(0, 3), st.sampled_from(["K80", "P100"])), min_size=1, max_size=6),
    count=st.integers(1, 4), cpus=st.sampled_from([1, 2, 4, 8, 9]), memory=st.sampled_from([1, 4, 16, 17]),
    gpu=st.integers(0, 6), model=st.sampled_from([None, "K80", "P100", "H100"]),
)
def test_never_fits_agrees_with_its_definition(
    shapes: list[tuple[int, int, int, str]], count: int, cpus: int, memory: int, gpu: int, model: str | None
) -> None:
    """The check is answered from a summary of the cluster (machine shapes no other beats, device
    counts per kind and model); it must say exactly what reading every machine and device says."""
    cluster = parse_cluster({"machines": [
        {"name": f"m{i}", "rack": "r0", "cpus": c, "memory_gb": m, "uplink_gbps": 10,
         "devices": {"gpu": {"model": mod, "count": g}} if g else {}}
        for i, (c, m, g, mod) in enumerate(shapes)]})
    tasks: dict[str, object] = {"count": count, "cpus": cpus, "memory_gb": memory, "gpu": gpu}
    if gpu and model:
        tasks["gpu_model"] = model
    (job,) = parse_jobs({"jobs": [{"name": "j", "tasks": tasks}]})
    assert (never_fits(job, cluster) is not None) == _never_fits_by_definition(job, cluster)

"""Cluster and jobs specs (YAML or JSON) → model objects, with errors that say what is wrong.

Parsing is pure (`parse_cluster`, `parse_jobs` take already-read data); `load_*` read a file.
Every problem names the source, the path of the field, the value and what is allowed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from disagg.model.cluster import (
    DEVICE_KINDS,
    Allocation,
    Cluster,
    Device,
    Machine,
    Pool,
    device_id,
)
from disagg.model.errors import SpecError, not_utf8
from disagg.model.jobs import Job, TaskRequest
from disagg.model.states import DEVICE_FAILED, DEVICE_HEALTHY, DeviceHealth

if TYPE_CHECKING:
    from disagg.profiles.model import Profile

#: Strict types, as the API's (`disagg.api.schemas`): `true` is not a number and `"2"` is not a count, so a
#: spec file and a request body refuse the same values.
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _whole_number(value: object) -> object:
    """A count is a JSON/YAML number: refuse text and booleans before the lax int check (2.0 is 2)."""
    if isinstance(value, str | bool):
        raise ValueError(f"must be a whole number, not {type(value).__name__}")
    return value


#: A count as the API's `Int` has it: 2 and 2.0 are 2; "2", true and 2.5 are refused.
Count = Annotated[int, Field(strict=False), BeforeValidator(_whole_number)]


class DeviceGroupSpec(BaseModel):
    model_config = _STRICT
    count: Count = Field(ge=0, le=4096)
    model: str = Field(default="generic", min_length=1, max_length=64)
    capacity: float = Field(default=1.0, gt=0)
    #: One Redfish ResourceBlock URI per device of the group, in index order (`disagg discover redfish`).
    redfish_uris: list[str] = []

    @model_validator(mode="after")
    def _one_uri_each(self) -> DeviceGroupSpec:
        if self.redfish_uris and len(self.redfish_uris) != self.count:
            raise ValueError(f"redfish_uris has {len(self.redfish_uris)} URIs for {self.count} devices; "
                             "give one per device, or none")
        return self


def _groups(value: Any) -> Any:
    """A kind maps to one group or a list of groups (a pool may hold 4 P100 and 1 P40)."""
    if isinstance(value, dict):
        return [value]
    return value


class DevicesSpec(BaseModel):
    model_config = _STRICT
    gpu: list[DeviceGroupSpec] = []
    nvme: list[DeviceGroupSpec] = []
    fpga: list[DeviceGroupSpec] = []
    memory: list[DeviceGroupSpec] = []

    @field_validator("gpu", "nvme", "fpga", "memory", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return _groups(value)


_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class MachineSpec(BaseModel):
    model_config = _STRICT
    name: str = Field(pattern=_NAME, max_length=128)
    rack: str = Field(default="r0", pattern=_NAME, max_length=128)
    cpus: float = Field(gt=0)
    memory_gb: float = Field(gt=0)
    uplink_gbps: float = Field(default=10.0, gt=0)
    devices: DevicesSpec = DevicesSpec()
    redfish_uri: str | None = Field(default=None, max_length=1024)  # its Compute ResourceBlock


class PoolSpec(BaseModel):
    model_config = _STRICT
    name: str = Field(pattern=_NAME, max_length=128)
    rack: str = Field(default="r0", pattern=_NAME, max_length=128)
    uplink_gbps: float = Field(default=40.0, gt=0)
    devices: DevicesSpec = DevicesSpec()


class NetworkSpec(BaseModel):
    model_config = _STRICT
    rack_uplink_gbps: float = Field(default=100.0, gt=0)


class AllocationSpec(BaseModel):
    model_config = _STRICT
    job: str = Field(min_length=1, max_length=128)
    machine: str
    cpus: float = Field(default=0.0, ge=0)
    memory_gb: float = Field(default=0.0, ge=0)
    devices: list[str] = []
    network_gbps: float = Field(default=0.0, ge=0)


class ClusterSpec(BaseModel):
    model_config = _STRICT
    machines: list[MachineSpec] = Field(min_length=1)
    pools: list[PoolSpec] = []
    network: NetworkSpec = NetworkSpec()
    allocations: list[AllocationSpec] = []
    failed_devices: list[str] = []


#: A device model's name (`P100`, `H100-80GB`).
ModelName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", min_length=1, max_length=64)]


class TasksSpec(BaseModel):
    """Each task of a job (a job is a gang of `count` identical tasks): the one model of a jobs spec's
    `tasks` and of POST /v1/jobs' (`disagg.api.schemas.TasksIn` is this model), so both accept the same
    values within the same bounds and refuse the rest with the same words."""

    model_config = _STRICT
    count: Count = Field(default=1, ge=1, le=10_000)
    cpus: float = Field(default=1.0, ge=0.001, le=1024)
    memory_gb: float = Field(default=1.0, ge=0.001, le=65536)
    gpu: Count = Field(default=0, ge=0, le=4096)
    nvme: Count = Field(default=0, ge=0, le=4096)
    fpga: Count = Field(default=0, ge=0, le=4096)
    memory: Count = Field(default=0, ge=0, le=4096)
    gpu_model: ModelName | None = None
    nvme_model: ModelName | None = None
    fpga_model: ModelName | None = None
    memory_model: ModelName | None = None


class JobSpec(BaseModel):
    model_config = _STRICT
    name: str = Field(pattern=_NAME, max_length=128)
    image: str = Field(default="unknown", min_length=1, max_length=256)
    submit_s: float = Field(default=0.0, ge=0)
    importance: float = Field(default=1.0, ge=1.0, le=10.0)
    slo_s: float | None = Field(default=None, gt=0)
    wait_rounds: Count = Field(default=0, ge=0)
    network_gbps: float | None = Field(default=None, ge=0)
    command: list[str] = []
    tasks: TasksSpec = TasksSpec()


class JobsSpec(BaseModel):
    model_config = _STRICT
    jobs: list[JobSpec]


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _lookup(data: Any, loc: tuple[int | str, ...]) -> Any:
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _problems(exc: ValidationError, data: Any) -> list[str]:
    """One sentence per pydantic error: path, value, and what is allowed."""
    out = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if p not in ("list[DeviceGroupSpec]",))
        kind = err["type"]
        path = _format_loc(loc)
        if kind == "extra_forbidden":
            out.append(f"{path}: unknown field {loc[-1]!r}")
            continue
        if kind == "missing":
            out.append(f"{path}: required field is missing")
            continue
        value = err.get("input", _lookup(data, loc))
        out.append(f"{path}: value {value!r} is not allowed: {err['msg']}")
    return out


def _allowed_fields(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


#: libyaml's safe loader when PyYAML has it (≈ 10x faster on a 12,500-machine spec), else Python's.
if TYPE_CHECKING:
    _SafeLoader = yaml.SafeLoader
else:
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_MERGE_TAG = "tag:yaml.org,2002:merge"


class UniqueKeyLoader(_SafeLoader):
    """The safe loader, refusing a mapping that names a key twice. YAML keeps the last one silently, so
    a machine's `cpus: 4, …, cpus: 400` or a second `machines:` further down would replace the first
    unseen. (Keys a merge `<<` brings in may still be overridden: that is what a merge is for.)"""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # an unhashable key: the constructor itself refuses it
            if first is not key_node:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"found key {key!r} twice (first on line {first.start_mark.line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """YAML text as data, safely (no tags that run code) and with no key named twice in one mapping."""
    return yaml.load(text, Loader=UniqueKeyLoader)


class _DuplicateJsonKey(ValueError):
    """A JSON object that names a key twice (`json` keeps the last one silently)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateJsonKey(f"found key {key!r} twice in one object")
        out[key] = value
    return out


def read_text(path: Path) -> str:
    """A spec's or config's text: UTF-8, past a byte-order mark if there is one. A file that cannot be
    read, or is not UTF-8 text, is a `SpecError` naming it (and the byte that is not)."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise SpecError(str(path), [f"cannot read file: {exc.strerror}"]) from exc
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), [not_utf8(exc)]) from None


def read_document(path: str | Path, expected: str = "`machines:` or `jobs:`") -> Any:
    """Read a YAML or JSON file. A syntax error names the file, its line and column; an empty file
    (or one of comments only) says it is empty, and what it should hold (`expected`); a key named twice in
    one mapping is an error."""
    p = Path(path)
    text = read_text(p)
    is_json = p.suffix == ".json"
    try:
        data = json.loads(text, object_pairs_hook=_unique_pairs) if is_json else load_yaml(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{p}:{exc.lineno}:{exc.colno}", [f"not valid JSON: {exc.msg}"]) from None
    except _DuplicateJsonKey as exc:
        raise SpecError(str(p), [f"not valid JSON: {exc}"]) from None
    except yaml.YAMLError as exc:
        raise SpecError(_yaml_where(p, exc), [f"not valid YAML: {_yaml_problem(exc)}"]) from None
    if data is None:
        raise SpecError(str(p), [f"the file is empty (expected a mapping, e.g. {expected})"])
    return data


def _yaml_where(path: Path, exc: yaml.YAMLError) -> str:
    """`file:line:column` of a YAML error (1-based), or the file alone when PyYAML gives no place."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What PyYAML found, without its own `in "<unicode string>"` place (the file is named instead)."""
    context, mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and mark is not None and getattr(exc, "problem_mark", None) is not None:
        context = f"{context} (from line {mark.line + 1}, column {mark.column + 1})"
    words = ", ".join(str(x) for x in (context, getattr(exc, "problem", None)) if x)
    return words or str(exc).splitlines()[0]


def validate_spec(model: type[BaseModel], data: Any, source: str) -> Any:
    if not isinstance(data, dict):
        raise SpecError(source, [f"(top level): expected a mapping with fields {_allowed_fields(model)}, "
                                 f"got {type(data).__name__}"])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc, data)
        hint = _unknown_field_hints(exc)
        raise SpecError(source, [p + hint.get(p, "") for p in problems]) from None


_MODELS_BY_FIELD: dict[str, type[BaseModel]] = {
    "machines": MachineSpec, "pools": PoolSpec, "network": NetworkSpec, "allocations": AllocationSpec,
    "devices": DevicesSpec, "tasks": TasksSpec, "jobs": JobSpec, "gpu": DeviceGroupSpec,
    "nvme": DeviceGroupSpec, "fpga": DeviceGroupSpec, "memory": DeviceGroupSpec,
}


def _unknown_field_hints(exc: ValidationError) -> dict[str, str]:
    """For an unknown field, list the fields allowed where it stands."""
    hints: dict[str, str] = {}
    for err in exc.errors():
        if err["type"] != "extra_forbidden":
            continue
        loc = tuple(p for p in err["loc"])
        parents = [p for p in loc[:-1] if isinstance(p, str)]
        model: type[BaseModel] | None = _MODELS_BY_FIELD.get(parents[-1]) if parents else None
        if model is None:
            continue
        path = _format_loc(loc)
        hints[f"{path}: unknown field {loc[-1]!r}"] = f" (allowed: {_allowed_fields(model)})"
    return hints


def _make_devices(location: str, spec: DevicesSpec, failed: set[str]) -> list[Device]:
    out: list[Device] = []
    for kind in DEVICE_KINDS:
        index = 0
        for group in getattr(spec, kind):
            for k in range(group.count):
                did = device_id(location, kind, index)
                health: DeviceHealth = DEVICE_FAILED if did in failed else DEVICE_HEALTHY
                uri = group.redfish_uris[k] if group.redfish_uris else None
                out.append(Device(did, kind, group.model, location, index, group.capacity, health, uri))
                index += 1
    return out


def _duplicates(paths: list[str], names: list[str], rule: str) -> list[str]:
    """One problem per repeated name, at the path of its second use."""
    counts = Counter(names)
    first: dict[str, str] = {}
    out = []
    for path, name in zip(paths, names, strict=True):
        if name in first and counts[name] > 1:
            out.append(f"{path}: value {name!r} is used {counts[name]} times (first at {first[name]}); {rule}")
            counts[name] = 0
        first.setdefault(name, path)
    return out


def parse_cluster(data: Any, source: str = "<cluster>") -> Cluster:
    """Validate a cluster spec and build the snapshot. Raises SpecError listing every problem."""
    spec: ClusterSpec = validate_spec(ClusterSpec, data, source)
    problems: list[str] = []
    paths = [f"machines[{i}].name" for i in range(len(spec.machines))] + [
        f"pools[{i}].name" for i in range(len(spec.pools))]
    names = [m.name for m in spec.machines] + [p.name for p in spec.pools]
    problems += _duplicates(paths, names, "machine and pool names must be unique")
    failed = set(spec.failed_devices)
    devices: list[Device] = []
    for m in spec.machines:
        devices += _make_devices(m.name, m.devices, failed)
    for p in spec.pools:
        devices += _make_devices(p.name, p.devices, failed)
    by_id = {d.id: d for d in devices}
    for i, did in enumerate(spec.failed_devices):
        if did not in by_id:
            problems.append(f"failed_devices[{i}]: device {did!r} does not exist")
    machines = {m.name: m for m in spec.machines}
    used_cpu: dict[str, float] = {}
    used_mem: dict[str, float] = {}
    holder: dict[str, str] = {}
    for i, a in enumerate(spec.allocations):
        where = f"allocations[{i}]"
        if a.machine not in machines:
            problems.append(f"{where}.machine: value {a.machine!r} is not a machine of this cluster "
                            f"(machines: {', '.join(sorted(machines)[:10])})")
            continue
        used_cpu[a.machine] = used_cpu.get(a.machine, 0.0) + a.cpus
        used_mem[a.machine] = used_mem.get(a.machine, 0.0) + a.memory_gb
        for j, did in enumerate(a.devices):
            if did not in by_id:
                problems.append(f"{where}.devices[{j}]: device {did!r} does not exist "
                                f"(ids look like <machine-or-pool>/<kind><index>, e.g. m0/gpu0)")
            elif did in holder:
                problems.append(f"{where}.devices[{j}]: device {did!r} is already given to {holder[did]!r}")
            else:
                holder[did] = a.job
    for name, cpus in used_cpu.items():
        if cpus > machines[name].cpus + 1e-9:
            problems.append(f"allocations: machine {name!r} has {machines[name].cpus:g} cpus, "
                            f"allocations use {cpus:g}")
    for name, mem in used_mem.items():
        if mem > machines[name].memory_gb + 1e-9:
            problems.append(f"allocations: machine {name!r} has {machines[name].memory_gb:g} GB memory, "
                            f"allocations use {mem:g}")
    if problems:
        raise SpecError(source, problems)
    return Cluster(
        machines=tuple(Machine(m.name, m.rack, m.cpus, m.memory_gb, m.uplink_gbps, m.redfish_uri)
                       for m in spec.machines),
        pools=tuple(Pool(p.name, p.rack, p.uplink_gbps) for p in spec.pools),
        devices=tuple(devices),
        rack_uplink_gbps=spec.network.rack_uplink_gbps,
        allocations=tuple(
            Allocation(a.job, a.machine, a.cpus, a.memory_gb, tuple(a.devices), a.network_gbps)
            for a in spec.allocations
        ),
    )


def job_from_spec(j: JobSpec) -> Job:
    t = j.tasks
    devices: dict[str, int] = {k: int(getattr(t, k)) for k in DEVICE_KINDS if getattr(t, k) > 0}
    models: dict[str, str] = {k: str(getattr(t, f"{k}_model")) for k in DEVICE_KINDS if getattr(t, f"{k}_model")}
    return Job(
        name=j.name, image=j.image, submit_s=j.submit_s, importance=j.importance, slo_s=j.slo_s,
        wait_rounds=j.wait_rounds, network_gbps=j.network_gbps, command=tuple(j.command),
        tasks=TaskRequest(t.count, t.cpus, t.memory_gb, devices, models),
    )


def never_fits(job: Job, cluster: Cluster) -> str | None:
    """Why a job can never be placed on this cluster, even empty; None when it could."""
    t, capacity = job.tasks, cluster.capacity
    if not capacity.fits_one(t.cpus, t.memory_gb):
        best_cpu = max(c for c, _ in capacity.shapes)
        best_mem = max(m for _, m in capacity.shapes)
        return (f"each task needs {t.cpus:g} cpus and {t.memory_gb:g} GB memory on one machine; "
                f"the largest machine has {best_cpu:g} cpus and {best_mem:g} GB")
    if t.count * t.cpus > capacity.cpus:
        return f"needs {t.count * t.cpus:g} cpus in all; the cluster has {capacity.cpus:g}"
    for kind in t.kinds:
        model = t.models.get(kind)
        have = capacity.count(kind, model)
        need = t.count * t.wants(kind)
        if need > have:
            what = f"{kind} of model {model}" if model else kind
            return f"needs {need} {what} in all; the cluster has {have}"
    return None


def parse_jobs(data: Any, cluster: Cluster | None = None, source: str = "<jobs>") -> list[Job]:
    """Validate a jobs spec. With a cluster, a job that can never fit on it is an error too."""
    spec: JobsSpec = validate_spec(JobsSpec, data, source)
    problems: list[str] = []
    problems += _duplicates([f"jobs[{i}].name" for i in range(len(spec.jobs))], [j.name for j in spec.jobs],
                            "job names must be unique")
    jobs = [job_from_spec(j) for j in spec.jobs]
    if cluster is not None:
        for i, job in enumerate(jobs):
            why = never_fits(job, cluster)
            if why:
                problems.append(f"jobs[{i}] ({job.name}): can never fit on this cluster: {why}")
    if problems:
        raise SpecError(source, problems)
    return jobs


def load_cluster(path: str | Path) -> Cluster:
    return parse_cluster(read_document(path, "`machines:` and `pools:`"), str(path))


def load_jobs(path: str | Path, cluster: Cluster | None = None) -> list[Job]:
    return parse_jobs(read_document(path, "`jobs:`"), cluster, str(path))


def load_profiles(path: str | Path) -> dict[str, Profile]:
    """A profile table file (`profiles.table`): image → profile; `SpecError` naming the file otherwise."""
    from disagg.profiles.table import parse_profiles  # the profiles package reads model.errors at import

    return parse_profiles(read_document(path, "`profiles:`"), str(path))


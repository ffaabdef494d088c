"""The controller's one configuration object, and where its values come from.

Every setting of `disagg serve` is a field of `Config`. A value comes from, lowest first: the
default, the config file (YAML, `--config` or `DISAGG_CONFIG`), the environment (`DISAGG_<NAME>`,
e.g. `DISAGG_TICK_S=0.1`; a mapping such as `fabric` as YAML/JSON text), then the command line's
options. `docs/configuration.md` lists every field; a test checks that table against this class.
A setting that is unknown or of the wrong type is refused with a message naming it, its value and
what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from disagg.model import SpecError
from disagg.model.spec import load_yaml, read_text
from disagg.model.tenants import Tenants, load_tenants, parse_tenants
from disagg.profiles.learn import EXPLORE
from disagg.store import DEFAULT_URL, normalize_url

if TYPE_CHECKING:
    from disagg.engines.local import Isolation

ENV_PREFIX = "DISAGG_"


class Config(BaseModel):
    """Everything `disagg serve` can be told. Frozen: one object, read by every part of the controller."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    host: str = Field(default="127.0.0.1", description="Address the API listens on.")
    port: int = Field(default=8080, ge=0, le=65535, description="Port the API listens on (0: any free port).")
    db: str = Field(default=DEFAULT_URL, description="Store URL: sqlite:///path.db or postgresql://…")
    cluster: str | None = Field(default=None, description="Cluster spec (YAML/JSON); default: the FlowOS-RM testbed.")
    state_dir: str | None = Field(default=None,
                                  description="Fabric state and job files; default: <db>.d beside SQLite.")
    policy: str = Field(default="drmaestro-na", description="Placement policy (`disagg policies`).")
    latency_scale: float = Field(default=1.0, ge=0.0,
                                 description="Scale of the emulated testbed's latencies (1 = seed's).")
    # upper bounds: a setting past them stopped scheduling (a round every 28 hours at tick_s 100000; a window
    # of 2**63 failed every round with an OverflowError in the store's LIMIT)
    tick_s: float = Field(default=0.25, gt=0.0, le=10.0, description="Period of the scheduling loop, seconds.")
    round_gap_s: float = Field(default=0.5, ge=0.0, le=60.0,
                               description="Least time between placement rounds, seconds.")
    window: int = Field(default=32, ge=1, le=1_000_000,
                        description="Queued jobs handed to the policy per round (oldest first).")
    backfill: int = Field(default=64, ge=0, le=1_000_000, description=(
        "Jobs beyond the window also considered per round: one per distinct request, oldest first, kept off "
        "the head's reservation (0: none)."))
    starvation_rounds: int = Field(default=100, ge=0, description=(
        "Rounds (W) after which the oldest waiting job's reservation holds against the younger jobs of the "
        "window too (0: never)."))
    replans: int = Field(default=1, ge=0, le=5,
                         description="Re-plans per round after a commit conflict (Nomad's refresh).")
    workers: int = Field(default=16, ge=1, le=1024, description="Slices composed or torn down at once.")
    parallel_steps: bool = Field(default=True, description="Run a slice's independent steps at once.")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="Seed of the policy's randomness.")
    engine: str = Field(default="local", description="Where tasks run: local or slurm (`disagg.engines.registry`).")
    slurm_site: str | None = Field(default=None, description="With engine slurm: the path of the Slurm site.json.")
    fabric: dict[str, Any] = Field(default_factory=lambda: {"driver": "emulated"},
                                   description="Fabric driver and its options, e.g. {driver: emulated}.")
    tenants: str | list[dict[str, Any]] | None = Field(
        default=None, description="Tenants: a tenants spec file, or the list inline (model/tenants.py).")
    history_every_s: float = Field(default=5.0, gt=0.0,
                                   description="Seconds between the loop's samples of its numbers (GET /v1/history).")
    history_retention_s: float = Field(default=86400.0, gt=0.0,
                                       description="How long samples are kept, seconds (default one day).")
    redfish: bool = Field(default=True, description="Serve the inventory as a Redfish CompositionService at "
                                                   "/redfish/v1.")
    redfish_updatable: bool = Field(default=True, description=(
        "Let Redfish clients add and remove blocks of a composed system (AddResourceBlock, RemoveResourceBlock, "
        "PATCH); false: a system is composed at once and only decomposed."))
    # --- profiles (docs/profiles.md) ---
    profiles: str | None = Field(default=None, description=(
        "Profile table (YAML/JSON, `profiles:`) the policies know; default: the shipped Rodinia set."))
    learn_profiles: bool = Field(default=True, description=(
        "Learn each image's profile from its completed tasks and place by it (pessimistic while unsure)."))
    profiles_explore: int = Field(default=EXPLORE, ge=0, le=1000, description=(
        "Remote runs, finished or running, an image needs before it is placed by its pessimistic profile "
        "(until then: the estimate)."))
    profiles_max_images: int = Field(default=1000, ge=1, le=1_000_000,
                                     description="Images whose learned profile the store keeps (least recent go).")
    profile_observations: int = Field(default=200, ge=3, le=100_000,
                                      description="Newest completed tasks per image a learned profile is fitted to.")
    max_compositions_per_tenant: int = Field(default=16, ge=0, le=100_000, description=(
        "Live Redfish compositions a tenant may hold at once (more: 409 ResourceExhaustion)."))
    composition_device_gbps: float = Field(default=1.0, ge=0.0, le=10_000.0, description=(
        "Bandwidth a composed remote device reserves on each link of its path, Gb/s (as a job's device does)."))
    preempt_grace_s: float = Field(default=30.0, ge=0.0, le=86_400.0,
                                   description="Seconds a preempted job gets between SIGTERM and the kill.")
    usage_half_life_s: float = Field(default=3600.0, ge=0.0, le=365 * 86_400.0,
                                     description="Half-life of the decayed usage fair share is computed over, seconds.")
    api_process: bool = Field(default=True, description="Serve the API from a process apart from the loop.")
    loop_nice: int = Field(default=5, ge=0, le=19, description="Niceness increment of the loop process.")
    replica_name: str = Field(default="", max_length=200, description=(
        "This replica's name among the replicas of one controller on PostgreSQL (default: host:port)."))
    lease_s: float = Field(default=3.0, ge=1.0, le=60.0, description=(
        "How long the leader's lease lasts past a renewal (renewed every second), in the database's clock."))
    # --- isolation of jobs (docs/security.md) ---
    allow_same_user: bool = Field(
        default=False, description="Not root: run every tenant's jobs as the controller's own user (a laptop).")
    jobs_dir: str | None = Field(
        default=None, description="Jobs' working directories; default: /var/lib/disagg/jobs/<hash> as root, "
                                  "else <state_dir>.jobs.")
    unix_user_prefix: str | None = Field(
        default=None, pattern=r"^[a-z_][a-z0-9_-]{0,15}$",
        description="Prefix of the tenants' default Unix users; null: disagg-<4 hex of the state directory>- "
                    "(one per controller, so two controllers on a host never share a user).")
    cgroup_parent: str | None = Field(
        default="disagg", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="Name of disagg's group in each cgroup hierarchy; null: no cgroups (process groups).")
    task_pids_max: int = Field(default=4096, ge=16, le=4_194_304, description="Processes a task may have at once.")
    log_cap_mb: float = Field(default=64.0, gt=0, le=1_000_000, description="What a task's log keeps on disk, MB.")
    submit_rate_per_tenant: float = Field(default=50.0, ge=0.0, le=1e6, description=(
        "Job submissions a tenant may make a second, on average (more: 429 with Retry-After); 0: no limit."))
    compose_rate_per_tenant: float = Field(default=5.0, ge=0.0, le=1e6, description=(
        "Redfish compositions and updates a tenant may ask for a second, on average (more: 429); 0: no limit."))
    rate_burst_per_tenant: int = Field(default=100, ge=1, le=1_000_000, description=(
        "How many submissions (and, apart, compositions) a tenant may make at once before its rate applies."))
    sandbox: bool = Field(default=True, description=(
        "As root, run each job in its own namespaces (bubblewrap: pid, ipc, uts, mount, network); docs/security.md."))
    allow_no_sandbox: bool = Field(default=False, description=(
        "As root without bwrap: start anyway, jobs without namespaces (else the start is refused)."))
    job_shared_dirs: list[str] = Field(default_factory=list, max_length=64, description=(
        "Directories every job may write besides its working directory (bound into each sandbox)."))
    job_tmp_mb: float = Field(default=1024.0, ge=1, le=1_048_576, description=(
        "Size of each task's private /tmp and /dev/shm (tmpfs, counted in its memory), MB each."))
    job_disk_mb: float = Field(default=10240.0, ge=0, le=1e9, description=(
        "Disk a job's working directory may hold, MB; past it the job is killed and its files removed (0: none)."))
    tenant_disk_mb: float = Field(default=0.0, ge=0, le=1e12, description=(
        "Disk all running jobs of one tenant may hold together (their limits' sum), MB (0: no total)."))
    allow_jobs_on_store_disk: bool = Field(default=False, description=(
        "As root: accept jobs' working directories on the store's filesystem (else the start is refused)."))
    min_free_disk_mb: float = Field(default=512.0, ge=0, le=1e9, description=(
        "Below this free space on the store's filesystem /healthz is degraded and submissions get 503."))
    controller_reserve_mb: float = Field(default=2048.0, ge=0, le=1e9, description=(
        "Memory left to the controller: all jobs together get the host's MemTotal less this, MB."))
    controller_reserve_pids: int = Field(default=2048, ge=0, le=4_194_304, description=(
        "Processes left to the controller: all jobs together get kernel.pid_max less this."))
    max_queued_per_tenant: int = Field(default=10_000, ge=1, le=10_000_000,
                                       description="Queued jobs a tenant may have at once (more: 429).")
    retention_s: float = Field(default=7 * 86400.0, ge=0,
                               description="Ended jobs' rows and files are removed this long after they ended.")
    accept_state_loss: bool = Field(
        default=False, description="Start although the state directory knows more than the store (lost WAL).")
    accept_inventory_removals: bool = Field(
        default=False, description="Take out of the inventory the machines, pools and devices the cluster spec "
                                   "no longer lists (without it such a start is refused, naming them).")
    # --- the HTTP server ---
    metrics_public: bool = Field(default=False, description="Serve /metrics without a token (for a scraper).")
    http_header_timeout_s: float = Field(default=10.0, gt=0, le=3600,
                                         description="Time a client has to send a request's headers, seconds.")
    http_body_timeout_s: float = Field(default=30.0, gt=0, le=3600,
                                       description="Time a client has to send a request's body, seconds (then 408).")
    http_idle_timeout_s: int = Field(default=5, ge=1, le=3600, description="Idle keep-alive connections close, s.")
    http_max_connections: int = Field(default=256, ge=1, le=100_000,
                                      description="Connections open at once; more are answered 503 and closed.")
    http_max_connections_per_peer: int = Field(default=64, ge=0, le=100_000, description=(
        "Connections one peer may hold at once (an address; on loopback a Unix user, root and the server's own "
        "excepted); more are answered 503 (0: no limit)."))
    http_max_header_bytes: int = Field(default=16_384, ge=1024, le=1_048_576,
                                       description="Bytes of a request's line and headers (more: 431).")
    http_max_body_bytes: int = Field(default=1_048_576, ge=1024, le=1_073_741_824,
                                     description="Bytes of a request's body (more: 413, before it is read).")

    @field_validator("db")
    @classmethod
    def _store_url(cls, value: str) -> str:
        problem = store_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    def missing_store(self) -> str | None:
        """Why the store is not there for a command that only uses one (`gc`, `backup`): an SQLite file that
        does not exist, which opening it would make, empty."""
        file = self.sqlite_path()
        if file is None or file.is_file():
            return None
        return f"{self.db} is not a disagg store: there is no file {file}"

    def resolved_state_dir(self) -> Path:
        """Where the fabric's state and the jobs' files live: beside an SQLite file, else ./disagg.d."""
        if self.state_dir:
            return Path(self.state_dir)
        url = normalize_url(self.db)
        file = _sqlite_file(url)
        if file is not None:
            return Path(file + ".d")
        return Path("disagg.d")

    @property
    def log_cap_bytes(self) -> int:
        return int(self.log_cap_mb * 2**20)

    def user_prefix(self) -> str:
        """The prefix of the tenants' default Unix users: `unix_user_prefix`, else this controller's own."""
        from disagg.engines.accounts import controller_prefix

        return self.unix_user_prefix or controller_prefix(self.resolved_state_dir())

    def isolation(self) -> Isolation:
        """The local engine's isolation settings (users, working directories, cgroups, log cap)."""
        from disagg.engines.local import Isolation

        store = self.sqlite_path()
        return Isolation(
            self.tenants_spec(), self.allow_same_user, Path(self.jobs_dir) if self.jobs_dir else None,
            self.log_cap_bytes, self.cgroup_parent, self.task_pids_max,
            self.user_prefix(), sandbox=self.sandbox,
            allow_no_sandbox=self.allow_no_sandbox,
            hide_files=tuple(Path(f"{store}{end}") for end in ("", "-wal", "-shm", "-journal")) if store else (),
            shared_dirs=tuple(Path(p) for p in self.job_shared_dirs if Path(p).is_dir()),  # gone: nothing to bind
            tmp_bytes=int(self.job_tmp_mb * 2**20),
            disk_bytes=int(self.job_disk_mb * 2**20), tenant_disk_bytes=int(self.tenant_disk_mb * 2**20),
            allow_jobs_on_store_disk=self.allow_jobs_on_store_disk, store_dir=self.store_dir(),
            reserve_memory=int(self.controller_reserve_mb * 2**20), reserve_pids=self.controller_reserve_pids)

    def sqlite_path(self) -> Path | None:
        """The store's file, for SQLite (None: PostgreSQL, or in memory)."""
        file = _sqlite_file(normalize_url(self.db))
        return None if file is None else Path(file).absolute()

    def store_dir(self) -> Path:
        """Where the store writes on this host: the SQLite file's directory, else the state directory."""
        path = self.sqlite_path()
        return path.parent if path is not None else self.resolved_state_dir().absolute()

    def tenants_spec(self) -> Tenants:
        """The tenants this config names (none: every tenant gets the defaults). SpecError when bad."""
        if self.tenants is None:
            return Tenants()
        if isinstance(self.tenants, str):
            return load_tenants(self.tenants)
        return parse_tenants(self.tenants, "tenants")

    @property
    def fabric_driver(self) -> str:
        return str(self.fabric.get("driver", "emulated"))

    @property
    def fabric_options(self) -> dict[str, Any]:
        """The driver's own options: the `fabric` mapping less its `driver`."""
        return {k: v for k, v in self.fabric.items() if k != "driver"}


def load_config(file: str | Path | None = None, env: Mapping[str, str] | None = None, **flags: Any) -> Config:
    """The Config from, lowest first: defaults, `file`, `env` (`DISAGG_<NAME>`), `flags` (None: not given).

    Raises SpecError naming the source, the setting, its value and what is allowed.
    """
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}  # where each value came from, for the message: a variable's bad value was
    source = "settings"          # blamed on the config file
    if file:
        values.update(_from_file(file))
        source = str(file)
        origin.update(dict.fromkeys(values, str(file)))
    from_env = _from_env(env or {})
    values.update(from_env)
    origin.update({k: ENV_PREFIX + k.upper() for k in from_env})
    given = {k: v for k, v in flags.items() if v is not None}
    values.update(given)
    origin.update({k: "--" + k.replace("_", "-") for k in given})
    try:
        return Config(**values)
    except ValidationError as exc:
        origin = {k: v for k, v in origin.items() if v != source}  # the file is named already
        raise SpecError(source, [_problem(e, values, origin) for e in exc.errors()]) from None


def store_url_problem(value: str) -> str | None:
    """Why `value` is not a store disagg can open (None: it is): SQLite in a directory that exists, or
    PostgreSQL (a MySQL URL was a `No module named 'MySQLdb'` traceback, a SQLite file in a missing directory
    a FileNotFoundError)."""
    url = normalize_url(value)
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if scheme not in ("sqlite", "postgresql") or "://" not in url:
        return "must be sqlite:///path/to/file.db or postgresql://user@host/dbname"
    file = _sqlite_file(url)
    if file is not None:
        folder = Path(file).absolute().parent
        if not folder.is_dir():
            return f"the directory {str(folder)!r} does not exist: make it first"
    return None


def _sqlite_file(url: str) -> str | None:
    """The file of a (normalized) SQLite store URL, as written; None for PostgreSQL or an in-memory store."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return url[len("sqlite:///"):]
    return None


#: The settings that name files or directories: in a config file, a relative one is relative to the file.
_PATHS = ("cluster", "state_dir", "slurm_site", "tenants", "profiles", "jobs_dir")


def _from_file(file: str | Path) -> dict[str, Any]:
    text = read_text(Path(file))
    try:
        data = load_yaml(text) or {}
    except yaml.YAMLError as exc:
        raise SpecError(str(file), [f"cannot read the config file: {exc}"]) from None
    if not isinstance(data, dict):
        raise SpecError(str(file), [f"(top level): expected a mapping with keys {', '.join(Config.model_fields)}"])
    return _beside(Path(file).absolute().parent, {str(k).replace("-", "_"): v for k, v in data.items()})


def _beside(folder: Path, values: dict[str, Any]) -> dict[str, Any]:
    """A config file's relative paths, made relative to the file's own directory (a service's working
    directory is `/`: `cluster: cluster.yaml` beside /etc/disagg/disagg.yaml was looked for as
    /cluster.yaml, and `db: sqlite:///disagg.db` made /disagg.db). Options and variables stay relative to
    the working directory, as a shell's are."""
    def at(path: str) -> str:
        return path if Path(path).is_absolute() else str(folder / path)

    out = dict(values)
    for name in _PATHS:
        if isinstance(out.get(name), str) and out[name]:
            out[name] = at(out[name])
    if isinstance(out.get("job_shared_dirs"), list):
        out["job_shared_dirs"] = [at(d) if isinstance(d, str) else d for d in out["job_shared_dirs"]]
    db = out.get("db")
    if isinstance(db, str) and db:
        file = _sqlite_file(normalize_url(db))
        if file is not None:
            out["db"] = "sqlite:///" + at(file)
    return out


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """`DISAGG_<NAME>` for each field; a mapping field's value is YAML (or JSON) text."""
    out: dict[str, Any] = {}
    for name, info in Config.model_fields.items():
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is None or raw == "":
            continue
        if info.annotation is not None and ("dict" in str(info.annotation) or "list" in str(info.annotation)):
            try:
                out[name] = load_yaml(raw)
            except yaml.YAMLError as exc:
                raise SpecError(ENV_PREFIX + name.upper(), [f"not YAML/JSON: {exc}"]) from None
        else:
            out[name] = raw
    return out


def _problem(error: Any, values: Mapping[str, Any], origin: Mapping[str, str]) -> str:
    field = ".".join(str(p) for p in error.get("loc", ())) or "(top level)"
    if error.get("type") == "extra_forbidden":
        return f"{field}: unknown setting; allowed: {', '.join(Config.model_fields)}"
    top = str(error.get("loc", ("",))[0])
    why = str(error.get("msg", "invalid")).removeprefix("Value error, ")  # a validator's own words, as they are
    where = f" (set by {origin[top]})" if top in origin else ""
    return f"{field}: {values.get(top)!r} is not allowed ({why}){where}"


__all__ = ["ENV_PREFIX", "Config", "load_config"]

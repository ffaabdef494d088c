"""Request and response bodies of the REST API (Pydantic, strict, unknown fields refused).

Strict models make the API refuse what its own OpenAPI schema refuses (`true` is not a number,
`"1"` is not an integer), so a fuzzer driven by that schema finds no gap between the two.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from disagg.model import states
from disagg.model.jobs import MAX_BATCH
from disagg.model.spec import TasksSpec
from disagg.model.tenants import Limits

_IN = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
_OUT = ConfigDict(extra="forbid")

#: Text without NUL (PostgreSQL and exec() refuse it).
Text = Annotated[str, Field(pattern=r"^[^\x00]*$")]
#: Text that is shown in tables and logs: no control character (no terminal escape can hide in it).
Printable = r"^[^\x00-\x1f\x7f]*$"
#: A command's size in all (its arguments' UTF-8 bytes) and its arguments, at most.
MAX_COMMAND_BYTES = 65536
MAX_ARGS = 256
#: The bounds of a job's completion-time goal, seconds (beyond them no cost is meaningful).
SLO_MIN_S, SLO_MAX_S = 1.0, 1e7
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", min_length=1, max_length=128)]
Model = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", min_length=1, max_length=64)]
Arg = Annotated[str, Field(pattern=r"^[^\x00]*$", max_length=4096)]

def _no_text_or_bool(value: object) -> object:
    """JSON Schema's integer admits 2.0 but not "2" or true: refuse those before the lax int check."""
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON integer")
    return value


#: An integer as JSON Schema means it (2.0 is 2; "2", true and 2.5 are not integers).
Int = Annotated[int, Field(strict=False), BeforeValidator(_no_text_or_bool)]

# the states as the one module that names them has them (shown in the OpenAPI document as named enums)
JobState = states.JobState
DeviceState = states.DeviceState
SliceState = states.SliceState
LinkState = states.LinkState


class TasksIn(TasksSpec):
    """Each task of the job (a job is a gang of `count` identical tasks): the jobs spec's `TasksSpec`,
    so a spec file and a request body take the same values and name the same allowed fields."""


class JobIn(BaseModel):
    """POST /v1/jobs. `command` runs as is (no shell) on every task; `importance` is DRMaestro's z."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {
                    "name": "train",
                    "image": "rodinia/nw",
                    "command": ["sh", "-c", "echo hi"],
                    "tasks": {"count": 1, "cpus": 1, "memory_gb": 1, "gpu": 1},
                    "slo_s": 600,
                    "importance": 1.0,
                }
            ]
        },
    )
    name: Name
    image: Annotated[str, Field(pattern=Printable, min_length=1, max_length=256)] = "unknown"
    command: list[Arg] = Field(min_length=1, max_length=MAX_ARGS,
                               description=f"At most {MAX_ARGS} arguments and {MAX_COMMAND_BYTES} bytes in all.")
    tasks: TasksIn = TasksIn()
    slo_s: float | None = Field(default=None, ge=SLO_MIN_S, le=SLO_MAX_S,
                                description=f"Completion-time goal τ, {SLO_MIN_S:g} to {SLO_MAX_S:g} s.")
    importance: float = Field(default=1.0, ge=1.0, le=10.0)
    max_retries: Int = Field(default=2, ge=0, le=10)
    preemptible: bool = Field(default=True, description=(
        "May be preempted to give back what its tenant borrowed above its quota; a job that may not "
        "is never preempted and never borrows."))

    @field_validator("command")
    @classmethod
    def _command_size(cls, value: list[str]) -> list[str]:
        size = sum(len(a.encode()) for a in value)
        if size > MAX_COMMAND_BYTES:
            raise ValueError(f"the command is {size} bytes in all; at most {MAX_COMMAND_BYTES} are allowed")
        return value


#: The signals `POST /v1/jobs/{id}/cancel?signal=` may send first (`disagg cancel --signal`).
CancelSignal = Literal["TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "KILL"]
#: The longest grace period a cancel may give, seconds (as `preempt_grace_s`).
MAX_CANCEL_GRACE_S = 86_400.0


class TasksOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    count: int
    cpus: float
    memory_gb: float


class GrantOut(BaseModel):
    model_config = _OUT
    id: str
    kind: str
    remote: bool
    location: str
    path: list[str]
    network_gbps: float


class TaskPlacementOut(BaseModel):
    model_config = _OUT
    task: str
    machine: str
    cpus: float
    memory_gb: float
    devices: list[GrantOut]


class JobOut(BaseModel):
    model_config = _OUT
    id: str
    tenant: str
    name: str
    image: str
    command: list[str]
    tasks: TasksOut
    slo_s: float | None
    importance: float
    max_retries: int
    state: JobState
    reason: str | None = Field(description="Why the job waits (or why it ended), in words.")
    reason_code: str | None
    wait_rounds: int
    attempts: int
    exit_code: int | None
    slice: str | None
    placement: list[TaskPlacementOut] | None = None
    submitted_at: float
    updated_at: float
    preemptible: bool = True
    started_at: float | None = Field(default=None, description="When its latest attempt started running.")
    ended_at: float | None = Field(default=None, description="When it ended (completed, failed or cancelled).")
    waited_s: float | None = Field(default=None, description="Submission to its first start (to now while it waits).")
    ran_s: float | None = Field(default=None, description="Its latest attempt's run time (to now while it runs).")


def _next() -> Any:
    """A listing's link to its next page (null on the last page)."""
    return Field(default=None, description="The path of the next page (null: this is the last one).")


class JobBatchIn(BaseModel):
    """POST /v1/job-batches: several jobs stored together, all or none (as Slurm's job arrays)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False,
                              json_schema_extra={"examples": [{"jobs": [
        {"name": "sweep-0", "image": "rodinia/nw", "command": ["true"], "tasks": {"count": 1, "cpus": 1, "gpu": 1}},
        {"name": "sweep-1", "image": "rodinia/nw", "command": ["true"], "tasks": {"count": 1, "cpus": 1, "gpu": 1}},
    ]}]})
    jobs: list[JobIn] = Field(min_length=1, max_length=MAX_BATCH, description=f"1 to {MAX_BATCH} jobs.")


class JobBatchOut(BaseModel):
    model_config = _OUT
    jobs: list[JobOut]


class JobList(BaseModel):
    model_config = _OUT
    jobs: list[JobOut]
    next: str | None = _next()


class LogsOut(BaseModel):
    """A page of the job's output (its latest attempt): bytes `offset` to `next_offset` of `size`."""

    model_config = _OUT
    job: str
    slice: str | None = Field(description="The attempt (slice) the output is of; a new one starts at offset 0.")
    logs: str
    offset: int
    next_offset: int = Field(description="Where the next page starts (ask again from there).")
    size: int = Field(description="Bytes the attempt has written so far.")
    complete: bool = Field(description="The attempt ended and this page reaches its end: nothing more will come.")


class EventOut(BaseModel):
    """One transition of the job or of one of its slices: from, to, when, why."""

    model_config = _OUT
    id: int = Field(description="The event's number (events are numbered in the order they happened).")
    at: float = Field(description="When, seconds since the epoch.")
    subject: Literal["job", "slice"]
    slice: str | None = Field(description="The slice, for a slice's transition (and a job's placement).")
    from_: str | None = Field(alias="from", description="The state it left (null: it was created).")
    to: str
    why: str | None


class EventList(BaseModel):
    model_config = _OUT
    job: str
    events: list[EventOut]
    next: str | None = _next()


class StepOut(BaseModel):
    model_config = _OUT
    op: str
    target: str
    status: str
    tries: int
    started_at: float | None
    ended_at: float | None
    error: str | None


class SliceMachineOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    host: str
    devices: list[str]


class SliceOut(BaseModel):
    model_config = _OUT
    id: str
    job: str | None  # none for a composition (a Redfish client's system)
    attempt: int
    state: SliceState
    outcome: str | None
    detail: str | None
    machines: list[SliceMachineOut]
    handle: str | None
    created_at: float
    updated_at: float
    steps: list[StepOut] | None = None


class SliceList(BaseModel):
    model_config = _OUT
    slices: list[SliceOut]
    next: str | None = _next()


class AmountOut(BaseModel):
    model_config = _OUT
    allocated: float = Field(description="What the live slices hold.")
    total: float


class DeviceGroupOut(BaseModel):
    """The devices of one kind and model at a place (or in the cluster)."""

    model_config = _OUT
    kind: str
    model: str
    used: int = Field(description="Attached to a slice.")
    total: int
    unavailable: int = Field(description="Neither used nor offered: failed, drained, or behind a link that is down.")


class AllocationOut(BaseModel):
    """What a machine or pool has and how much of it is held (a pool has no cpus or memory: 0 / 0)."""

    model_config = _OUT
    cpus: AmountOut
    memory_gb: AmountOut
    devices: list[DeviceGroupOut]


class MachineOut(BaseModel):
    model_config = _OUT
    id: str
    kind: Literal["machine", "pool"]
    location: str
    state: DeviceState
    slice: str | None
    slices: list[str]
    cpus: float
    memory_gb: float
    devices: list[str]
    allocation: AllocationOut = Field(description="cpus and memory allocated / total; devices by kind and model, "
                                                  "used / total.")


class MachineList(BaseModel):
    model_config = _OUT
    machines: list[MachineOut]
    next: str | None = _next()


class DeviceOut(BaseModel):
    model_config = _OUT
    id: str
    kind: str
    model: str
    location: str
    state: DeviceState
    slice: str | None
    health: str
    drained: bool
    reachable: bool = Field(description="False while the link to the device's location is down.")


class DeviceList(BaseModel):
    model_config = _OUT
    devices: list[DeviceOut]
    next: str | None = _next()


class LinkOut(BaseModel):
    model_config = _OUT
    id: str = Field(description="up:<machine or pool> (its uplink) or rack:<rack> (rack to spine).")
    gbps: float = Field(description="Bandwidth, Gbit/s.")
    state: LinkState
    load_gbps: float = Field(description="What the live slices' remote devices are placed to carry on it.")
    utilisation: float = Field(description="load_gbps / gbps (above 1: the placed traffic exceeds it).")
    slices: list[str] = Field(description="Live slices with a remote device whose path crosses the link.")


class LinkList(BaseModel):
    model_config = _OUT
    links: list[LinkOut]
    next: str | None = _next()


class HistoryPoint(BaseModel):
    """The samples of one bucket, averaged (a number is null where no sample of the bucket had it)."""

    model_config = _OUT
    at: float = Field(description="The bucket's start, seconds since the epoch.")
    samples: int = Field(description="How many samples the bucket averages.")
    queue_length: float | None = Field(description="Jobs waiting to be placed.")
    jobs_running: float | None
    rounds_per_min: float | None = Field(description="Placement rounds per minute (rounds with a queue).")
    round_s: float | None = Field(description="Mean wall time of a placement round, seconds.")
    link_utilisation_max: float | None = Field(description="The busiest link's load / bandwidth.")
    devices_in_use: dict[str, float] = Field(description="Devices attached to slices, per kind.")
    devices_total: dict[str, float] = Field(description="Devices in the inventory, per kind.")
    link_load_gbps: dict[str, float] = Field(description="Load the live slices put on each link, Gbit/s.")


class HistoryOut(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: float = Field(alias="from")
    to: float
    step: float = Field(description="Bucket width, seconds.")
    every_s: float = Field(description="How often the controller samples, seconds.")
    points: list[HistoryPoint]


class HealthOut(BaseModel):
    model_config = _OUT
    status: Literal["ok", "degraded"] = Field(description="degraded: a scheduling round failed lately (`cause`).")
    cause: str | None = Field(default=None, description="Why the controller is degraded, in words.")
    policy: str
    last_round: dict[str, float]
    replica: str = Field(description="The replica that answers (`--replica-name`, default host:port).")
    role: Literal["leader", "standby"] = Field(description="Whether the answering replica holds the lease.")
    epoch: int = Field(description="The lease's epoch: raised by one at every acquisition.")
    leader: str | None = Field(default=None, description="The replica holding the lease; null while none does.")
    leader_since: float | None = Field(default=None, description="When the leader took the lease (DB clock).")
    lease_age_s: float | None = Field(default=None, description="Seconds since the lease's last renewal (DB clock).")
    lease: dict[str, Any] | None = Field(default=None, description="The lease row, as the store has it.")
    replicas: list[dict[str, Any]] = Field(description="Every replica the store knows: name, address, role, "
                                                       "epoch, started_at, last_seen, seen_s_ago.")


class ControllerOut(BaseModel):
    """GET /v1/controller: the replicas of this controller and the lease (docs/controller.md)."""

    model_config = _OUT
    replica: str
    role: Literal["leader", "standby"]
    epoch: int
    leader: str | None = None
    leader_since: float | None = None
    lease_age_s: float | None = None
    lease: dict[str, Any] | None = None
    replicas: list[dict[str, Any]]


class TokenIn(BaseModel):
    """POST /v1/tokens (admin): a token for `tenant`; `expires_in_s` null: until revoked."""

    model_config = _IN
    tenant: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                        description="The tenant: letters, digits, '_', '.', '-' (not admin or system).")
    admin: bool = False
    expires_in_s: float | None = Field(default=None, ge=1, le=10 * 365 * 86400)


class TokenOut(BaseModel):
    """A token as listed: never its secret."""

    model_config = _OUT
    id: int
    tenant: str
    admin: bool
    created_at: float
    expires_at: float | None


class TokenCreated(TokenOut):
    """A new token, with its secret: shown this once (only its hash is kept)."""

    token: str


class TokenList(BaseModel):
    model_config = _OUT
    tokens: list[TokenOut]
    next: str | None = _next()


class FieldProblem(BaseModel):
    model_config = _OUT
    field: str
    message: str


class ErrorOut(BaseModel):
    """Every 4xx answer: a sentence, and for bad input the fields at fault and what is allowed."""

    model_config = _OUT
    detail: str
    problems: list[FieldProblem] = []


# --- tenants ------------------------------------------------------------------------------------
class LimitsIn(Limits):
    """Per resource: cpus, memory_gb, network_gbps and the device kinds (a resource not named: unlimited)."""


class TenantIn(BaseModel):
    """PUT /v1/tenants/{name}: the tenant's entry of the tenants spec (its name is in the path). Not its
    `unix_user`: who a tenant's jobs run as is the host operator's choice, in the controller's config, not
    an API admin's (the field was taken, stored and shown, and the engines ran the jobs as the config said)."""

    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False,
        json_schema_extra={"examples": [{"weight": 2, "cohort": "research", "quota": {"gpu": 8, "cpus": 64},
                                         "borrow": {"gpu": 8}}]})
    weight: float = Field(default=1.0, gt=0, le=1_000_000)
    cohort: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00]*$")] | None = None
    quota: LimitsIn = LimitsIn()
    borrow: LimitsIn = LimitsIn()


class TenantOut(BaseModel):
    """A tenant: its spec, what it holds and borrows, its shares, its jobs."""

    model_config = _OUT
    name: str
    weight: float
    cohort: str | None
    unix_user: str | None
    quota: dict[str, float] = Field(description="Nominal quota per resource (guaranteed).")
    borrow: dict[str, float] = Field(description="At most this much above the quota, from the cohort.")
    limit: dict[str, float] = Field(description="quota + borrow per resource its quota names.")
    usage: dict[str, float] = Field(description="What its live slices hold now (a remote device counts as one "
                                                "of its kind; its bandwidth counts in network_gbps).")
    borrowed: dict[str, float] = Field(description="usage above quota, per resource.")
    decayed_usage: dict[str, float] = Field(description="Usage decayed with the half-life (usage_half_life_s).")
    dominant_share: float = Field(description="Its largest share of any resource now (DRF).")
    fair_share: float = Field(description="Dominant share of its decayed usage over its weight (lower goes first).")
    entitled_share: float = Field(description="Its weight over the weights of the tenants with jobs.")
    queued: int
    running: int


class TenantList(BaseModel):
    model_config = _OUT
    tenants: list[TenantOut]

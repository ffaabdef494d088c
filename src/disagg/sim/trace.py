"""Trace files → submissions, read whole and checked before anything is simulated.

Three formats (docs/simulator.md documents them):

- `csv`: ours. Header `job_id,submit_s,image,tasks,cpus,memory_gb,gpu,nvme,duration_s,slo_s,importance`
  and, optionally, `tenant`; `tasks` is the gang size and `cpus, memory_gb, gpu, nvme` are per task, as
  in the jobs spec. Empty cells take defaults (tasks 1, cpus 1, memory_gb 1, gpu 0, nvme 0, duration
  from the image's profile, slo = duration × 1.2, importance 1, tenant `default`); `job_id` and
  `submit_s` are required.
- `pai`: Alibaba's GPU cluster trace 2020, `pai_task_table` (columns job_name, task_name, inst_num,
  status, start_time, end_time, plan_cpu, plan_mem, plan_gpu, gpu_type; with or without a header).
  plan_cpu is in percent of a core, plan_gpu in percent of a GPU, plan_mem in GB. Each (job, task role)
  becomes one gang of `inst_num` tasks; rows that never ran (no start or end time) are skipped. Where
  the trace's job table, `pai_job_table.csv` (job_name, inst_id, user, status, start_time, end_time),
  sits beside the task table, each job's tenant is its `user`.
- `philly`: Microsoft's Philly trace, `cluster_job_log` (a JSON list of jobs with jobid,
  submitted_time, attempts[{start_time, end_time, detail[{ip, gpus[]}]}], and user). A job becomes a
  gang of one task per machine of its last attempt; its duration is that attempt's run time; its
  tenant is its user.

Every malformed value raises `TraceError` naming the file, the line, the column and the value, with
all problems found (up to a limit) so a user fixes them in one pass.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Literal

from disagg.model import Job, SpecError, TaskRequest
from disagg.model.errors import not_utf8
from disagg.model.tenancy import DEFAULT_TENANT
from disagg.model.tenants import tenant_name_problem
from disagg.profiles import lookup
from disagg.sim.workload import Submission

TraceFormat = Literal["csv", "pai", "philly"]
TRACE_FORMATS: tuple[str, ...] = ("csv", "pai", "philly")
CSV_COLUMNS: tuple[str, ...] = (
    "job_id", "submit_s", "image", "tasks", "cpus", "memory_gb", "gpu", "nvme", "duration_s", "slo_s",
    "importance", "tenant",
)
#: The columns of `pai_job_table` (the users of the jobs of a `pai_task_table`).
PAI_JOB_COLUMNS: tuple[str, ...] = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
PAI_JOB_TABLE = "pai_job_table.csv"
PAI_COLUMNS: tuple[str, ...] = (
    "job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu", "plan_mem",
    "plan_gpu", "gpu_type",
)
#: SLO of a trace job that gives none: its duration with this tolerance (same as the generator's).
DEFAULT_SLO_FACTOR = 1.2
#: Philly gives no CPU or memory figures; each task gets these per GPU (at least one GPU's worth).
PHILLY_CPUS_PER_GPU = 2.0
PHILLY_MEMORY_GB_PER_GPU = 8.0
MAX_PROBLEMS = 20
_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class TraceError(SpecError):
    """A trace file that cannot be simulated; `problems` name line, column and value."""


class _Problems:
    """Collects problems while reading; `check` raises them all at once."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[str] = []

    def add(self, line: int, column: str, value: object, allowed: str) -> None:
        if len(self.items) < MAX_PROBLEMS:
            self.items.append(f"line {line}, column {column!r}: value {value!r} is not allowed: {allowed}")
        elif len(self.items) == MAX_PROBLEMS:
            self.items.append("... more problems not shown")

    def note(self, message: str) -> None:
        if len(self.items) <= MAX_PROBLEMS:
            self.items.append(message)

    def check(self) -> None:
        if self.items:
            raise TraceError(self.source, self.items)


#: The largest time a trace may give (submit_s, duration_s, slo_s): 10¹⁰ s, some 317 years, where a double
#: still keeps microseconds. At 10¹⁸ s a job's 10 s of run time vanished in rounding (it "finished" as it
#: arrived) and the results were nonsense that looked like numbers.
TIME_MAX_S = 1e10


def _number(
    problems: _Problems, line: int, column: str, raw: str, default: float | None, *,
    minimum: float = 0.0, strict: bool = False, integer: bool = False, maximum: float = math.inf,
) -> float | None:
    """Parse one numeric cell; an empty cell gives `default`. Records a problem and returns None if bad."""
    text = raw.strip()
    if text == "":
        if default is None:
            problems.add(line, column, raw, "required, cannot be empty")
        return default
    kind = "an integer" if integer else "a number"
    bound = (f"> {minimum:g}" if strict else f">= {minimum:g}") + (f" and <= {maximum:g}" if maximum < math.inf else "")
    try:
        value = float(text)
    except ValueError:
        problems.add(line, column, raw, f"must be {kind} {bound}")
        return None
    if not math.isfinite(value) or (integer and value != int(value)):
        problems.add(line, column, raw, f"must be {kind} {bound}")
        return None
    if value < minimum or (strict and value == minimum) or value > maximum:
        problems.add(line, column, raw, f"must be {kind} {bound}")
        return None
    return value


@lru_cache(maxsize=4096, typed=True)
def _request(tasks: int, cpus: float, memory: float, gpu: int, nvme: int) -> TaskRequest:
    """One shared (immutable) request object per distinct request: the policies' per-round caches
    recognise repeated requests by identity."""
    return TaskRequest(tasks, cpus, memory, {k: v for k, v in (("gpu", gpu), ("nvme", nvme)) if v > 0})


def _job(
    name: str, image: str, submit: float, tasks: int, cpus: float, memory: float, gpu: int, nvme: int,
    duration: float, slo: float | None, importance: float, tenant: str = DEFAULT_TENANT,
) -> Submission:
    job = Job(
        name=name, image=image, tasks=_request(tasks, cpus, memory, gpu, nvme), submit_s=submit,
        importance=importance, slo_s=slo if slo is not None else duration * DEFAULT_SLO_FACTOR, tenant=tenant,
    )
    return Submission(job, duration)


def read_csv_trace(path: str | Path) -> list[Submission]:
    """Our documented CSV format (module docstring). Sorted by submit time, then by line."""
    p = Path(path)
    problems = _Problems(str(p))
    rows = _read_rows(p, problems)
    if not rows:
        problems.check()
        problems.note("line 1: the file is empty; expected a header " + ",".join(CSV_COLUMNS))
        problems.check()
    header = [h.strip() for h in rows[0][1]]
    missing = [c for c in ("job_id", "submit_s") if c not in header]
    unknown = [h for h in header if h not in CSV_COLUMNS]
    twice = sorted({h for h in header if header.count(h) > 1})
    if missing or unknown or twice:
        if missing:
            problems.note(f"line 1: header lacks required column(s) {', '.join(missing)}")
        for h in unknown:
            problems.add(1, h, h, f"unknown column; allowed: {', '.join(CSV_COLUMNS)}")
        for h in twice:
            places = ", ".join(str(i + 1) for i, c in enumerate(header) if c == h)
            problems.add(1, h, h, f"a column may appear once; it is columns {places}")
        problems.check()
    out: list[Submission] = []
    seen: dict[str, int] = {}
    for line, cells in rows[1:]:
        if len(cells) != len(header):
            problems.note(f"line {line}: has {len(cells)} cells, the header has {len(header)}")
            continue
        row = dict(zip(header, cells, strict=True))
        sub = _csv_row(problems, line, row, seen)
        if sub is not None:
            out.append(sub)
    problems.check()
    out.sort(key=lambda s: s.job.submit_s)
    return out


def _csv_row(problems: _Problems, line: int, row: dict[str, str], seen: dict[str, int]) -> Submission | None:
    before = len(problems.items)
    name = row.get("job_id", "").strip()
    if not _NAME_OK.match(name) or len(name) > 128:
        problems.add(line, "job_id", row.get("job_id", ""),
                     "must be 1-128 letters, digits, '_', '.', '-', starting with a letter or digit")
    elif name in seen:
        problems.add(line, "job_id", name, f"duplicate; first used on line {seen[name]}")
    else:
        seen[name] = line
    image = row.get("image", "").strip() or "unknown"
    submit = _number(problems, line, "submit_s", row.get("submit_s", ""), None, maximum=TIME_MAX_S)
    tasks = _number(problems, line, "tasks", row.get("tasks", ""), 1, minimum=1, integer=True)
    cpus = _number(problems, line, "cpus", row.get("cpus", ""), 1.0, strict=True)
    memory = _number(problems, line, "memory_gb", row.get("memory_gb", ""), 1.0, strict=True)
    gpu = _number(problems, line, "gpu", row.get("gpu", ""), 0, integer=True)
    nvme = _number(problems, line, "nvme", row.get("nvme", ""), 0, integer=True)
    profile = lookup(image)
    default_duration = profile.base_s if profile.known else None
    raw_duration = row.get("duration_s", "")
    if raw_duration.strip() == "" and default_duration is None:
        problems.add(line, "duration_s", raw_duration,
                     f"required for image {image!r}, which has no profile (known: rodinia applications)")
        duration: float | None = None
    else:
        duration = _number(problems, line, "duration_s", raw_duration, default_duration, strict=True,
                           maximum=TIME_MAX_S)
    slo_raw = row.get("slo_s", "")
    slo = _number(problems, line, "slo_s", slo_raw, None, strict=True, maximum=TIME_MAX_S) if slo_raw.strip() else None
    importance = _number(problems, line, "importance", row.get("importance", ""), 1.0, minimum=1.0)
    if importance is not None and importance > 10.0:
        problems.add(line, "importance", row.get("importance", ""), "must be between 1 and 10")
    tenant = row.get("tenant", "").strip() or DEFAULT_TENANT
    bad_tenant = tenant_name_problem(tenant)
    if bad_tenant:
        problems.add(line, "tenant", row.get("tenant", ""), bad_tenant)
    if len(problems.items) > before:
        return None
    assert submit is not None and tasks is not None and cpus is not None and memory is not None
    assert gpu is not None and nvme is not None and duration is not None and importance is not None
    return _job(name, image, submit, int(tasks), cpus, memory, int(gpu), int(nvme), duration, slo, importance,
                tenant)


#: How trace files are read: UTF-8, with or without the byte-order mark that spreadsheets write first.
_ENCODING = "utf-8-sig"


@contextmanager
def _reading(p: Path) -> Iterator[None]:
    """Around a read of the trace `p`: a file that cannot be read, is not UTF-8 text or not CSV is a
    `TraceError` naming it (the errors arise as the text is decoded, inside the read)."""
    try:
        yield
    except OSError as exc:
        raise TraceError(str(p), [f"cannot read file: {exc.strerror}"]) from exc
    except UnicodeDecodeError as exc:
        raise TraceError(str(p), [f"{not_utf8(exc)}; save the trace as UTF-8"]) from exc
    except csv.Error as exc:
        raise TraceError(str(p), [f"not a valid CSV file: {exc}"]) from exc


def _read_rows(p: Path, problems: _Problems) -> list[tuple[int, list[str]]]:
    """Non-blank CSV rows with their 1-based line numbers."""
    with _reading(p), p.open(newline="", encoding=_ENCODING) as fh:
        reader = csv.reader(fh)
        rows: list[tuple[int, list[str]]] = []
        for cells in reader:
            if cells and any(c.strip() for c in cells):
                rows.append((reader.line_num, cells))
        return rows


def _safe_name(raw: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", raw.strip())
    return name if name and name[0].isalnum() else "x" + name


def read_pai_trace(path: str | Path) -> list[Submission]:
    """Alibaba PAI 2020 `pai_task_table` (module docstring). Times are made relative to the first start."""
    p = Path(path)
    problems = _Problems(str(p))
    rows = _read_rows(p, problems)
    if rows and [c.strip() for c in rows[0][1]] == list(PAI_COLUMNS):
        rows = rows[1:]
    users = _pai_users(p.with_name(PAI_JOB_TABLE))
    parsed: list[tuple[str, float, int, float, float, int, float, str]] = []
    for line, cells in rows:
        if len(cells) != len(PAI_COLUMNS):
            problems.note(f"line {line}: has {len(cells)} cells, pai_task_table has {len(PAI_COLUMNS)} "
                          f"({', '.join(PAI_COLUMNS)})")
            continue
        row = dict(zip(PAI_COLUMNS, cells, strict=True))
        if row["start_time"].strip() == "" or row["end_time"].strip() == "":
            continue  # never ran (Waiting) or still running when the trace was cut: nothing to replay
        before = len(problems.items)
        start = _number(problems, line, "start_time", row["start_time"], None)
        end = _number(problems, line, "end_time", row["end_time"], None)
        inst = _number(problems, line, "inst_num", row["inst_num"], 1, minimum=1, integer=True)
        cpu = _number(problems, line, "plan_cpu", row["plan_cpu"], 100.0, strict=True)
        mem = _number(problems, line, "plan_mem", row["plan_mem"], 1.0)
        gpu = _number(problems, line, "plan_gpu", row["plan_gpu"], 0.0)
        if start is not None and end is not None and end < start:
            problems.add(line, "end_time", row["end_time"], f"must not be before start_time {start:g}")
        if len(problems.items) > before:
            continue
        assert start is not None and end is not None and inst is not None
        assert cpu is not None and mem is not None and gpu is not None
        name = _safe_name(f"{row['job_name']}.{row['task_name']}")
        parsed.append((name, start, int(inst), cpu / 100.0, max(mem, 0.1), math.ceil(gpu / 100.0 - 1e-9),
                       max(end - start, 1.0), users.get(row["job_name"].strip(), DEFAULT_TENANT)))
    problems.check()
    return _relative(parsed, image_of=lambda name: "pai/" + name.rsplit(".", 1)[-1])


def _pai_users(path: Path) -> dict[str, str]:
    """job_name → its user (as a tenant name) from the PAI job table beside the task table; none when
    there is no such file. Users are made tenant names (`_safe_name`); rows of another shape are skipped."""
    if not path.exists():
        return {}
    problems = _Problems(str(path))
    users: dict[str, str] = {}
    for _, cells in _read_rows(path, problems):
        if len(cells) != len(PAI_JOB_COLUMNS) or [c.strip() for c in cells] == list(PAI_JOB_COLUMNS):
            continue
        row = dict(zip(PAI_JOB_COLUMNS, cells, strict=True))
        if row["user"].strip():
            users[row["job_name"].strip()] = _tenant_name(row["user"])
    return users


def _tenant_name(raw: str) -> str:
    """A trace's user id as a tenant name (at most 64 characters, never a reserved one)."""
    name = _safe_name(raw)[:64]
    return name if tenant_name_problem(name) is None else "u" + name[:63]


def _relative(
    parsed: Iterable[tuple[str, float, int, float, float, int, float, str]], image_of: Callable[[str], str],
) -> list[Submission]:
    """Shift submit times so the first job arrives at 0, rename duplicates, sort by submit."""
    items = sorted(parsed, key=lambda r: r[1])
    if not items:
        return []
    t0 = items[0][1]
    used: dict[str, int] = {}
    out = []
    for name, start, inst, cpus, mem, gpu, duration, tenant in items:
        n = used.get(name, 0)
        used[name] = n + 1
        unique = name if n == 0 else f"{name}.{n}"
        out.append(_job(unique, image_of(name), start - t0, inst, cpus, mem, gpu, 0, duration, None, 1.0, tenant))
    return out


_PHILLY_TIME = "%Y-%m-%d %H:%M:%S"


def _philly_time(raw: object) -> float | None:
    if not isinstance(raw, str) or raw in ("", "None"):
        return None
    return datetime.strptime(raw, _PHILLY_TIME).replace(tzinfo=UTC).timestamp()


def read_philly_trace(path: str | Path) -> list[Submission]:
    """Microsoft Philly `cluster_job_log` (module docstring). Jobs that never ran are skipped."""
    p = Path(path)
    problems = _Problems(str(p))
    with _reading(p):
        text = p.read_text(encoding=_ENCODING)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise TraceError(str(p), [f"{where}: not valid JSON: {exc.msg}"]) from exc
    if not isinstance(data, list):
        raise TraceError(str(p), ["line 1: expected a JSON list of jobs (Philly cluster_job_log)"])
    # The line of each job object: where its "jobid" key stands (json gives no positions itself).
    lines = [text.count("\n", 0, m.start()) + 1 for m in re.finditer(r'"jobid"\s*:', text)]
    parsed: list[tuple[str, float, int, float, float, int, float, str]] = []
    for i, item in enumerate(data):
        line = lines[i] if i < len(lines) else 1
        entry = _philly_job(problems, line, item)
        if entry is not None:
            parsed.append(entry)
    problems.check()
    return _relative(parsed, image_of=lambda name: "philly/dnn")


def _philly_job(
    problems: _Problems, line: int, item: object,
) -> tuple[str, float, int, float, float, int, float, str] | None:
    if not isinstance(item, dict):
        problems.add(line, "(job)", item, "each job must be a JSON object")
        return None
    jobid = item.get("jobid")
    if not isinstance(jobid, str) or not jobid.strip():
        problems.add(line, "jobid", jobid, "must be a non-empty string")
        return None
    try:
        submitted = _philly_time(item.get("submitted_time"))
    except ValueError:
        problems.add(line, "submitted_time", item.get("submitted_time"),
                     f"must be a time like {_PHILLY_TIME}")
        return None
    attempts = item.get("attempts")
    if not isinstance(attempts, list):
        problems.add(line, "attempts", attempts, "must be a list of attempts")
        return None
    runs = []
    for attempt in attempts:
        if not isinstance(attempt, dict):
            problems.add(line, "attempts", attempt, "each attempt must be an object")
            return None
        try:
            start = _philly_time(attempt.get("start_time"))
            end = _philly_time(attempt.get("end_time"))
        except ValueError:
            bad = attempt.get("start_time"), attempt.get("end_time")
            problems.add(line, "attempts.start_time/end_time", bad, f"must be times like {_PHILLY_TIME}")
            return None
        detail = attempt.get("detail", [])
        if not isinstance(detail, list) or not all(isinstance(d, dict) and isinstance(d.get("gpus", []), list)
                                                   for d in detail):
            problems.add(line, "attempts.detail", detail, "must be a list of {ip, gpus: [...]}")
            return None
        if start is not None and end is not None and end >= start and detail:
            runs.append((start, end, detail))
    if submitted is None or not runs:
        return None  # never ran: nothing to replay
    start, end, detail = runs[-1]
    machines = len(detail)
    gpus = sum(len(d.get("gpus", [])) for d in detail)
    per_task = math.ceil(gpus / machines)
    share = max(per_task, 1)
    user = item.get("user")
    tenant = _tenant_name(user) if isinstance(user, str) and user.strip() else DEFAULT_TENANT
    return (_safe_name(jobid), submitted, machines, PHILLY_CPUS_PER_GPU * share,
            PHILLY_MEMORY_GB_PER_GPU * share, per_task, max(end - start, 1.0), tenant)


def detect_format(path: str | Path) -> TraceFormat:
    """Guess the format: `.json` is Philly; a CSV whose first row is ours is csv; otherwise PAI."""
    p = Path(path)
    if p.suffix.lower() == ".json":
        return "philly"
    with _reading(p), p.open(newline="", encoding=_ENCODING) as fh:
        first = next(csv.reader(fh), [])
    return "csv" if "job_id" in [c.strip() for c in first] else "pai"


def read_trace(path: str | Path, fmt: str | None = None) -> list[Submission]:
    """Read a trace in the given format (or the detected one). Raises TraceError on any bad row."""
    chosen = fmt or detect_format(path)
    readers: dict[str, Callable[[str | Path], list[Submission]]] = {
        "csv": read_csv_trace, "pai": read_pai_trace, "philly": read_philly_trace,
    }
    if chosen not in readers:
        known = ", ".join(TRACE_FORMATS)
        raise TraceError(str(path), [f"format {chosen!r} is not known; known formats: {known}"])
    subs = readers[chosen](path)
    if not subs:
        why = "the file is empty" if Path(path).stat().st_size == 0 else f"read as {chosen}: {_NO_JOBS[chosen]}"
        raise TraceError(str(path), [f"no job to simulate ({why})"])
    return subs


#: Why a trace of each format may hold no job: what its reader keeps.
_NO_JOBS = {
    "csv": "a header and no rows",
    "pai": "no row with both a start_time and an end_time",
    "philly": "no job with an attempt that started and ended",
}

"""`disagg submit | jobs | logs | cancel | events`: a user's jobs, through the controller's REST API.

Each talks to the API at `--url` (or DISAGG_URL) with `--token` (or DISAGG_TOKEN) and prints a table
(ids whole, never cut: `disagg.cli.tables`; `-o wide` adds columns), or the API's JSON with `--json`
(`-o json`) for scripts. A job id may be any unique beginning of it (`disagg jobs j-b642`); one that
several jobs share exits 2 naming them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from disagg.cli.common import (
    DEFAULT_API,
    AsJson,
    Output,
    Token,
    Url,
    call_api,
    escape_controls,
    fail,
    get_all,
    print_json,
    segment,
)
from disagg.cli.tables import Col, console, make_table
from disagg.display import clock, duration
from disagg.model.jobs import MAX_BATCH
from disagg.model.states import JobState

#: How often `disagg logs --follow` asks for more, seconds.
FOLLOW_EVERY_S = 0.5


def submit(
    name: Annotated[str, typer.Argument(help="The job's name.")],
    command: Annotated[list[str], typer.Argument(help="The command each task runs (after --).")],
    image: Annotated[str, typer.Option(help="Image; picks the job's profile (e.g. rodinia/nw).")] = "unknown",
    tasks: Annotated[int, typer.Option(min=1, help="Tasks in the gang (MPI-style when > 1).")] = 1,
    cpus: Annotated[float, typer.Option(help="CPUs per task.")] = 1.0,
    memory_gb: Annotated[float, typer.Option(help="Memory per task, GB.")] = 1.0,
    gpus: Annotated[int, typer.Option(min=0, help="GPUs per task.")] = 0,
    nvme: Annotated[int, typer.Option(min=0, help="NVMe drives per task.")] = 0,
    fpga: Annotated[int, typer.Option(min=0, help="FPGAs per task.")] = 0,
    memory: Annotated[int, typer.Option(
        min=0, help="Disaggregated memory devices (e.g. CXL) per task; not --memory-gb, the task's own memory.")] = 0,
    gpu_model: Annotated[str | None, typer.Option(help="Pin the GPU model (e.g. P100).")] = None,
    slo_s: Annotated[float | None, typer.Option(help="Completion-time goal, seconds.")] = None,
    importance: Annotated[float, typer.Option(help="DRMaestro's z, 1 (most) to 10.")] = 1.0,
    max_retries: Annotated[int, typer.Option(min=0, help="Re-queues allowed after faults.")] = 2,
    preemptible: Annotated[bool, typer.Option(
        "--preemptible/--not-preemptible",
        help="May be preempted for a tenant within its quota (a job that may not never borrows).")] = True,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Make a repeated submit return the same job.")
    ] = None,
    count: Annotated[int, typer.Option(min=1, max=MAX_BATCH, help=(
        f"Submit this many copies in one request, all or none (1 to {MAX_BATCH}; POST /v1/job-batches)."))] = 1,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Submit a job: `disagg submit train --gpus 1 -- sh -c 'nvidia-smi'` (`--count 50`: fifty of them)."""
    task: dict[str, Any] = {"count": tasks, "cpus": cpus, "memory_gb": memory_gb, "gpu": gpus, "nvme": nvme,
                            "fpga": fpga, "memory": memory}
    if gpu_model is not None:  # "" too: the API says why it is not a model (it was dropped without a word)
        task["gpu_model"] = gpu_model
    body: dict[str, Any] = {
        "name": name,
        "image": image,
        "command": command,
        "tasks": task,
        "importance": importance,
        "max_retries": max_retries,
    }
    if not preemptible:
        body["preemptible"] = False
    if slo_s is not None:
        body["slo_s"] = slo_s
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    if count > 1:
        jobs = call_api("POST", url, "/v1/job-batches", token, json={"jobs": [body] * count}, headers=headers)["jobs"]
    else:
        jobs = [call_api("POST", url, "/v1/jobs", token, json=body, headers=headers)]
    if as_json:
        print_json(jobs[0] if count == 1 else {"jobs": jobs})
    else:
        for job in jobs:
            Console().print(f"job [bold]{job['id']}[/] ({job['name']}) is {job['state']}")


_KINDS = ("gpu", "nvme", "fpga", "memory")


def _devices_per_task(tasks: dict[str, Any]) -> str:
    return ", ".join(f"{tasks[k]} {k}" + (f" {tasks[f'{k}_model']}" if tasks.get(f"{k}_model") else "")
                     for k in _KINDS if tasks.get(k)) or "-"


def _waited(job: dict[str, Any], now: float) -> str:
    """How long a job waited until it first started (a waiting one: until now) and over how many rounds."""
    waited = job.get("waited_s")
    if waited is None:  # an older controller: until now while it waits
        waited = (now if job["state"] == JobState.QUEUED else job["updated_at"]) - job["submitted_at"]
    return f"{duration(waited)} / {job['wait_rounds']}"


def _jobs_table(jobs: list[dict[str, Any]], wide: bool = False) -> Table:
    """Jobs, one a row; per-task columns say so, times say their unit."""
    now = time.time()
    cols = [Col("id", "id"), Col("name", "id"), Col("state"), Col("tasks", "num"), Col("devices per task"),
            Col("slice", "id"), Col("waited (until start / rounds)", "num"), Col("reason", "text")]
    rows = [[j["id"], j["name"], j["state"], j["tasks"]["count"], _devices_per_task(j["tasks"]), j["slice"] or "",
             _waited(j, now), j["reason"] or ""] for j in jobs]
    if wide:
        cols += [Col("tenant", "id"), Col("cpus per task", "num"), Col("memory GB per task", "num"),
                 Col("gpus in all", "num"), Col("image", "id"), Col("attempts", "num"), Col("exit code", "num"),
                 Col("submitted (UTC)", "num"), Col("started (UTC)", "num"), Col("ended (UTC)", "num"),
                 Col("ran", "num")]
        for row, j in zip(rows, jobs, strict=True):
            t = j["tasks"]
            row += [j["tenant"], f"{t['cpus']:g}", f"{t['memory_gb']:g}", int(t.get("gpu", 0)) * int(t["count"]),
                    j["image"], j["attempts"], "" if j["exit_code"] is None else j["exit_code"],
                    clock(j["submitted_at"]), clock(j.get("started_at")), clock(j.get("ended_at")),
                    duration(j.get("ran_s"))]
    return make_table("jobs", cols, rows)


def _show_job(job: dict[str, Any], wide: bool = False) -> None:
    """One job as a table row, then each task's machine and devices (its placement)."""
    out = console()
    out.print(_jobs_table([job], wide))
    for t in job.get("placement") or []:
        devs = ", ".join(f"{d['id']}{' (remote)' if d['remote'] else ''}" for d in t["devices"])
        out.print(f"  {t['task']} on {t['machine']}: {t['cpus']:g} cpus, {t['memory_gb']:g} GB; {devs}",
                  soft_wrap=True)


def jobs(
    job_id: Annotated[str | None, typer.Argument(help="Show one job in full (any unique beginning of its id).")] = None,
    state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
    output: Output = "table",
) -> None:
    """List your jobs (all jobs with an admin token), or show one with its placement and reason."""
    as_json = as_json or output == "json"
    if job_id is not None:
        job = call_api("GET", url, f"/v1/jobs/{segment(job_id, 'job')}", token)
        if as_json:
            print_json(job)
        else:
            _show_job(job, output == "wide")
        return
    params = {"state": state} if state else None
    found = get_all(url, "/v1/jobs", token, "jobs", params)
    if as_json:
        print_json({"jobs": found})
    else:
        console().print(_jobs_table(found, output == "wide"))


def logs(
    job_id: Annotated[str, typer.Argument(help="The job.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help=(
        "Wait for the job to start, print as it writes until it ends, then exit with its exit code "
        "(1 when it failed or was cancelled without one)."))] = False,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Print what a job's tasks wrote (its latest attempt), page by page; control characters are shown
    escaped (`\\x1b`), so a job's output cannot drive the terminal."""
    text: list[str] = []
    last: dict[str, Any] = {}
    for page in _log_pages(job_id, follow, url, token):
        if as_json:
            text.append(page["logs"])
        else:
            sys.stdout.write(escape_controls(page["logs"]))
            sys.stdout.flush()
        last = page
    if as_json:
        print_json({"job": job_id, "slice": last.get("slice"), "logs": "".join(text), "size": last.get("size", 0)})
    if follow:
        code = exit_code_of(call_api("GET", url, f"/v1/jobs/{segment(job_id, 'job')}", token))
        if code:
            raise typer.Exit(code)


def exit_code_of(job: dict[str, Any]) -> int:
    """What `logs --follow` exits with once the job has ended, as `srun` does: the job's own exit code,
    or 1 for a job that failed or was cancelled without one."""
    code = job["exit_code"]
    if code is None:
        return 0 if job["state"] == JobState.COMPLETED else 1
    if code < 0:  # killed by a signal: the shell's 128 + its number
        return min(128 - int(code), 255)
    return int(code) if code < 256 else 1


def _log_pages(job_id: str, follow: bool, url: str, token: str | None) -> Iterator[dict[str, Any]]:
    """The pages of the job's output from the start; with `follow`, new ones as they come until the job
    ends: a job not started yet is waited for (as `kubectl logs -f`), and a re-queued job's new attempt
    starts again from its beginning, after a line that says so."""
    offset, attempt = 0, None
    path = f"/v1/jobs/{segment(job_id, 'job')}/logs"
    while True:
        page = call_api("GET", url, path, token, params={"offset": offset, "limit": 2**20})
        if attempt is not None and page["slice"] != attempt:
            page = call_api("GET", url, path, token, params={"offset": 0, "limit": 2**20})
            yield {**page, "logs": f"--- a new attempt, on slice {page['slice']} ---\n" + page["logs"]}
        else:
            yield page
        attempt, offset = page["slice"], page["next_offset"]
        if offset < page["size"]:
            continue  # more is there already
        if not follow or (page["complete"] and _ended(url, job_id, token)):
            return
        time.sleep(FOLLOW_EVERY_S)


def _ended(url: str, job_id: str, token: str | None) -> bool:
    """Whether the job has reached a final state (a complete attempt may be followed by another one)."""
    return JobState(call_api("GET", url, f"/v1/jobs/{segment(job_id, 'job')}", token)["state"]).final


def cancel(
    job_id: Annotated[str, typer.Argument(help="The job.")],
    grace: Annotated[float, typer.Option("--grace", min=0.0, help=(
        "Seconds a running job has to stop after the signal (its `trap` runs), before it is killed, as a "
        "preempted job has; 0: kill at once.  (scancel --signal, kubectl delete --grace-period)"))] = 0.0,
    sig: Annotated[str, typer.Option("--signal", help=(
        "The signal sent first with --grace: TERM, INT, HUP, QUIT, USR1, USR2 or KILL."))] = "TERM",
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Cancel a job; its slice is torn down (with --grace, after the job has had its signal and its grace
    period). Repeating it is harmless."""
    name = sig.upper().removeprefix("SIG")
    if name not in CANCEL_SIGNALS:
        raise fail(f"--signal: {sig!r} is not allowed; use one of {', '.join(CANCEL_SIGNALS)}")
    params = {"grace_s": grace, "signal": name} if grace > 0 else None
    job = call_api("POST", url, f"/v1/jobs/{segment(job_id, 'job')}/cancel", token, params=params)
    if as_json:
        print_json(job)
    elif job["state"] == JobState.RUNNING and grace > 0:
        Console().print(f"job [bold]{job['id']}[/] is running: SIG{name} sent, killed in {grace:g} s unless it stops")
    else:
        Console().print(f"job [bold]{job['id']}[/] is {job['state']}")


#: What `--signal` may name (the API's `CancelSignal`).
CANCEL_SIGNALS = ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "KILL")


def events(
    job_id: Annotated[str, typer.Argument(help="The job (any unique beginning of its id).")],
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """A job's history: each transition of the job and of its slices, with why."""
    data = call_api("GET", url, f"/v1/jobs/{segment(job_id, 'job')}/events", token)
    if as_json:
        print_json(data)
        return
    rows = [[clock(e["at"]), e["subject"], e["slice"] or "", f"{e['from'] or '(new)'} → {e['to']}", e["why"] or ""]
            for e in data["events"]]
    cols = [Col("when (UTC)", "num"), Col("what"), Col("slice", "id"), Col("from → to", "id"), Col("why", "text")]
    console().print(make_table(f"job {data['job']}", cols, rows))


def _act(action: str, job_id: str, url: str, token: str | None, as_json: bool) -> None:
    job = call_api("POST", url, f"/v1/jobs/{segment(job_id, 'job')}/{action}", token)
    if as_json:
        print_json(job)
    else:
        Console().print(f"job [bold]{job['id']}[/] is {job['state']}")


def hold(job_id: Annotated[str, typer.Argument(help="The job (queued).")], url: Url = DEFAULT_API,
         token: Token = None, as_json: AsJson = False) -> None:
    """Admin: keep a queued job out of placement until `disagg release` (scontrol hold)."""
    _act("hold", job_id, url, token, as_json)


def release(job_id: Annotated[str, typer.Argument(help="The job (held).")], url: Url = DEFAULT_API,
            token: Token = None, as_json: AsJson = False) -> None:
    """Admin: put a held job back in the queue."""
    _act("release", job_id, url, token, as_json)


def requeue(job_id: Annotated[str, typer.Argument(help="The job (composing or running).")], url: Url = DEFAULT_API,
            token: Token = None, as_json: AsJson = False) -> None:
    """Admin: stop a job and queue it again, its retries kept (scontrol requeue)."""
    _act("requeue", job_id, url, token, as_json)


def register(app: typer.Typer) -> None:
    """Add submit, jobs, logs, cancel, events, hold, release and requeue to the `disagg` app (in the order
    `--help` lists them)."""
    for fn in (submit, jobs, logs, cancel, events, hold, release, requeue):
        app.command()(fn)

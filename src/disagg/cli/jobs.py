"""`disagg submit | jobs | logs | cancel`: a user's jobs, through the controller's REST API.

Each talks to the API at `--url` (or DISAGG_URL) with `--token` (or DISAGG_TOKEN) and prints a Rich
table, or the API's JSON with `--json` for scripts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from disagg.cli.common import DEFAULT_API, AsJson, Token, Url, call_api, escape_controls, get_all, print_json

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
    gpu_model: Annotated[str | None, typer.Option(help="Pin the GPU model (e.g. P100).")] = None,
    slo_s: Annotated[float | None, typer.Option(help="Completion-time goal, seconds.")] = None,
    importance: Annotated[float, typer.Option(help="DRMaestro's z, 1 (most) to 10.")] = 1.0,
    max_retries: Annotated[int, typer.Option(min=0, help="Re-queues allowed after faults.")] = 2,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Make a repeated submit return the same job.")
    ] = None,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Submit a job: `disagg submit train --gpus 1 -- sh -c 'nvidia-smi'`."""
    task: dict[str, Any] = {"count": tasks, "cpus": cpus, "memory_gb": memory_gb, "gpu": gpus, "nvme": nvme}
    if gpu_model:
        task["gpu_model"] = gpu_model
    body: dict[str, Any] = {
        "name": name,
        "image": image,
        "command": command,
        "tasks": task,
        "importance": importance,
        "max_retries": max_retries,
    }
    if slo_s is not None:
        body["slo_s"] = slo_s
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    job = call_api("POST", url, "/v1/jobs", token, json=body, headers=headers)
    if as_json:
        print_json(job)
    else:
        Console().print(f"job [bold]{job['id']}[/] ({job['name']}) is {job['state']}")


def _jobs_table(jobs: list[dict[str, Any]]) -> Table:
    table = Table(title="jobs")
    for col in ("id", "name", "state", "tasks", "gpus", "slice", "waited", "reason"):
        table.add_column(col)
    for j in jobs:
        table.add_row(
            j["id"],
            j["name"],
            j["state"],
            str(j["tasks"]["count"]),
            str(j["tasks"].get("gpu", 0)),
            j["slice"] or "",
            str(j["wait_rounds"]),
            j["reason"] or "",
        )
    return table


def _show_job(job: dict[str, Any]) -> None:
    """One job as a table row, then each task's machine and devices (its placement)."""
    console = Console()
    console.print(_jobs_table([job]))
    for t in job.get("placement") or []:
        devs = ", ".join(f"{d['id']}{' (remote)' if d['remote'] else ''}" for d in t["devices"])
        console.print(
            f"  {t['task']} on {t['machine']}: {t['cpus']:g} cpus, {t['memory_gb']:g} GB; {devs}"
        )


def jobs(
    job_id: Annotated[str | None, typer.Argument(help="Show one job in full.")] = None,
    state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """List your jobs (all jobs with an admin token), or show one with its placement and reason."""
    if job_id is not None:
        job = call_api("GET", url, f"/v1/jobs/{job_id}", token)
        if as_json:
            print_json(job)
        else:
            _show_job(job)
        return
    params = {"state": state} if state else None
    found = get_all(url, "/v1/jobs", token, "jobs", params)
    if as_json:
        print_json({"jobs": found})
    else:
        Console().print(_jobs_table(found))


def logs(
    job_id: Annotated[str, typer.Argument(help="The job.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
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


def _log_pages(job_id: str, follow: bool, url: str, token: str | None) -> Iterator[dict[str, Any]]:
    """The pages of the job's output from the start; with `follow`, new ones as they come until the job
    ends (a re-queued job's new attempt starts again from its beginning, after a line that says so)."""
    offset, attempt = 0, None
    while True:
        page = call_api("GET", url, f"/v1/jobs/{job_id}/logs", token, params={"offset": offset, "limit": 2**20})
        if attempt is not None and page["slice"] != attempt:
            page = call_api("GET", url, f"/v1/jobs/{job_id}/logs", token, params={"offset": 0, "limit": 2**20})
            yield {**page, "logs": f"--- a new attempt, on slice {page['slice']} ---\n" + page["logs"]}
        else:
            yield page
        attempt, offset = page["slice"], page["next_offset"]
        if offset < page["size"]:
            continue  # more is there already
        if not follow or page["complete"]:
            return
        time.sleep(FOLLOW_EVERY_S)


def cancel(
    job_id: Annotated[str, typer.Argument(help="The job.")],
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Cancel a job; its slice is torn down."""
    job = call_api("DELETE", url, f"/v1/jobs/{job_id}", token)
    if as_json:
        print_json(job)
    else:
        Console().print(f"job [bold]{job['id']}[/] is {job['state']}")


def register(app: typer.Typer) -> None:
    """Add submit, jobs, logs and cancel to the `disagg` app (in the order `--help` lists them)."""
    for fn in (submit, jobs, logs, cancel):
        app.command()(fn)

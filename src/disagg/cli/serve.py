"""The controller's sub-commands of `disagg`: serve, token create, and the REST clients
submit / jobs / logs / cancel / slices / machines / devices / links (Rich tables, or `--json` for scripts).

Client commands talk to the API at `--url` (or DISAGG_URL) with `--token` (or DISAGG_TOKEN).
Exit codes: 0 ok, 1 the controller could not be reached or failed, 2 bad input (a 4xx answer).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

from disagg.model import SpecError

EXIT_BAD_INPUT = 2
err = Console(stderr=True)

token_app = typer.Typer(help="Bearer tokens of the controller.", no_args_is_help=True)

Url = Annotated[str, typer.Option("--url", envvar="DISAGG_URL", help="The controller's API.")]
Token = Annotated[str | None, typer.Option("--token", envvar="DISAGG_TOKEN", help="A bearer token.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
DEFAULT_API = "http://127.0.0.1:8080"


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


# --- serve -----------------------------------------------------------------------------------
def serve(
    host: Annotated[str | None, typer.Option(envvar="DISAGG_HOST", help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option(envvar="DISAGG_PORT", min=1, max=65535)] = None,
    db: Annotated[
        str | None,
        typer.Option(
            envvar="DISAGG_DB", help="Store URL: sqlite:///path.db (default ./disagg.db) or postgresql://…"
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(envvar="DISAGG_CLUSTER", help="Cluster spec (default: the FlowOS-RM testbed)."),
    ] = None,
    state_dir: Annotated[
        str | None,
        typer.Option(envvar="DISAGG_STATE_DIR", help="Fabric state and job files (default: <db>.d)."),
    ] = None,
    policy: Annotated[str | None, typer.Option(envvar="DISAGG_POLICY", help="Placement policy.")] = None,
    latency_scale: Annotated[
        float | None,
        typer.Option(
            envvar="DISAGG_LATENCY_SCALE",
            min=0.0,
            help="Scale the emulated testbed's latencies (1 = seed's).",
        ),
    ] = None,
    tick_s: Annotated[
        float | None, typer.Option(envvar="DISAGG_TICK_S", min=0.001, help="Loop period.")
    ] = None,
    round_gap_s: Annotated[
        float | None, typer.Option(envvar="DISAGG_ROUND_GAP_S", min=0.0, help="Least time between placement rounds.")
    ] = None,
    api_process: Annotated[
        bool | None,
        typer.Option(
            "--api-process/--one-process",
            envvar="DISAGG_API_PROCESS",
            help="Serve the API from a process apart from the scheduling loop and slice workers (default).",
        ),
    ] = None,
    config: Annotated[
        str | None, typer.Option(envvar="DISAGG_CONFIG", help="YAML file with these settings.")
    ] = None,
) -> None:
    """Start the controller: REST API, dashboard at /, scheduling loop, emulated fabric, local engine."""
    import threading

    import uvicorn

    from disagg.api import create_app
    from disagg.control.service import open_service, settings_from
    from disagg.control.split import (
        STATUS_FILE,
        LoopLink,
        LoopStartError,
        start_loop_process,
        stop_loop_process,
        watch_loop_process,
    )
    from disagg.placement.registry import UnknownPolicyError, get_policy

    try:
        settings = settings_from(
            config,
            host=host,
            port=port,
            db=db,
            cluster=cluster,
            state_dir=state_dir,
            policy=policy,
            latency_scale=latency_scale,
            tick_s=tick_s,
            round_gap_s=round_gap_s,
            api_process=api_process,
        )
        get_policy(settings.policy)
        if not isinstance(settings.loop_nice, int) or not 0 <= settings.loop_nice <= 19:
            raise _fail(f"loop_nice: {settings.loop_nice!r} is not allowed; use an integer from 0 to 19")
        if settings.api_process:
            loop_pid, wake_fd, note = start_loop_process(
                lambda ready, failed, fd: _run_loop(settings, ready, failed, fd)
            )
            service = open_service(settings, api_only=True)
        else:
            loop_pid, wake_fd = 0, -1
            service = open_service(settings)
            note = service.reconciled.summary()
    except (SpecError, UnknownPolicyError, TypeError) as exc:
        raise _fail(str(exc)) from None
    except LoopStartError as exc:  # the loop process could not start; it said why
        raise _fail(str(exc), EXIT_BAD_INPUT if exc.bad_input else 1) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    store = service.store
    if not store.has_admin():
        token = store.create_token("admin", admin=True)
        sys.stdout.write(f"admin token (shown once, keep it): {token}\n")
    split = f", loop in process {loop_pid}" if loop_pid else ""
    sys.stdout.write(
        f"disagg controller on http://{settings.host}:{settings.port} (store {store.dialect}, "
        f"policy {settings.policy}{split}); {note}\n"
    )
    sys.stdout.flush()
    stopping = threading.Event()
    if loop_pid:
        service.controller.attach_loop(LoopLink(wake_fd, settings.resolved_state_dir() / STATUS_FILE))
        watch_loop_process(loop_pid, stopping)
    else:
        service.controller.start()
    try:
        uvicorn.run(
            create_app(service.controller),
            host=settings.host,
            port=settings.port,
            log_level="warning",
            access_log=False,
        )
    finally:
        stopping.set()
        if loop_pid:
            stop_loop_process(loop_pid)
        service.close()


def _run_loop(settings: Any, ready: Any, failed: Any, wake_fd: int) -> None:
    """The loop process of a split `disagg serve`: open (migrate, reconcile), then loop until stopped."""
    import threading

    from disagg.control.service import open_service
    from disagg.control.split import STATUS_FILE, Publisher, forward_wakes
    from disagg.placement.registry import UnknownPolicyError

    try:
        service = open_service(settings)
    except (SpecError, UnknownPolicyError, TypeError) as exc:
        failed(str(exc))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.loop_nice:
        import os

        os.nice(settings.loop_nice)  # requests first when the cores are short (docs/controller.md)
    controller = service.controller
    stopped = threading.Event()
    controller.publish = Publisher(
        settings.resolved_state_dir() / STATUS_FILE, controller.metrics.render_loop, lambda: controller.last_round
    )
    controller.publish()
    forward_wakes(wake_fd, controller.wake, stopped.set)
    controller.start()
    ready(service.reconciled.summary())
    try:
        stopped.wait()
    except KeyboardInterrupt:  # SIGTERM from the API process
        pass
    finally:
        service.close()


@token_app.command("create")
def token_create(
    tenant: Annotated[str, typer.Option(help="The tenant the token acts for.")],
    admin: Annotated[
        bool, typer.Option("--admin", help="An admin token (sees and touches everything).")
    ] = False,
    db: Annotated[str, typer.Option(envvar="DISAGG_DB", help="Store URL.")] = "sqlite:///disagg.db",
) -> None:
    """Print a new bearer token, alone on stdout."""
    import re

    from sqlalchemy.exc import SQLAlchemyError

    from disagg.store import Store

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", tenant):
        raise _fail(f"--tenant: {tenant!r} is not allowed; use letters, digits, '_', '.', '-' (up to 128)")
    try:
        store = Store(db)
        store.migrate()
        token = store.create_token(tenant, admin=admin)
        store.close()
    except SQLAlchemyError as exc:
        raise _fail(f"--db: cannot use the store at {db!r}: {exc.__class__.__name__}: {exc}", 1) from None
    sys.stdout.write(token + "\n")


# --- the client --------------------------------------------------------------------------------
def _call(method: str, url: str, path: str, token: str | None, headers: dict[str, str] | None = None,
          **kwargs: Any) -> Any:
    if not token:
        raise _fail("no token: pass --token or set DISAGG_TOKEN (disagg token create prints one)")
    try:
        r = httpx.request(method, url.rstrip("/") + path, timeout=30,
                          headers={"Authorization": f"Bearer {token}", **(headers or {})}, **kwargs)
    except httpx.HTTPError as exc:
        raise _fail(f"cannot reach the controller at {url}: {exc}", 1) from None
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        raise _fail(f"{r.status_code}: {detail}", EXIT_BAD_INPUT if r.status_code < 500 else 1)
    return r.json()


def _listing(url: str, token: str | None, as_json: bool, kind: str, columns: tuple[str, ...],
             row: Callable[[dict[str, Any]], tuple[str, ...]], params: dict[str, str] | None = None) -> None:
    """One listing (`slices`, `machines`, `devices`, `links`): GET /v1/<kind>, printed as the API's JSON
    or as a Rich table with one row per item."""
    data = _call("GET", url, f"/v1/{kind}", token, params=params)
    if as_json:
        _print_json(data)
        return
    table = Table(title=kind)
    for col in columns:
        table.add_column(col)
    for item in data[kind]:
        table.add_row(*row(item))
    Console().print(table)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


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
    job = _call("POST", url, "/v1/jobs", token, json=body, headers=headers)
    if as_json:
        _print_json(job)
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


def jobs(
    job_id: Annotated[str | None, typer.Argument(help="Show one job in full.")] = None,
    state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """List your jobs (all jobs with an admin token), or show one with its placement and reason."""
    if job_id is not None:
        job = _call("GET", url, f"/v1/jobs/{job_id}", token)
        if as_json:
            _print_json(job)
            return
        console = Console()
        console.print(_jobs_table([job]))
        for t in job.get("placement") or []:
            devs = ", ".join(f"{d['id']}{' (remote)' if d['remote'] else ''}" for d in t["devices"])
            console.print(
                f"  {t['task']} on {t['machine']}: {t['cpus']:g} cpus, {t['memory_gb']:g} GB; {devs}"
            )
        return
    params = {"state": state} if state else None
    data = _call("GET", url, "/v1/jobs", token, params=params)
    if as_json:
        _print_json(data)
    else:
        Console().print(_jobs_table(data["jobs"]))


def logs(
    job_id: Annotated[str, typer.Argument(help="The job.")],
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Print what a job's tasks wrote (its latest attempt)."""
    data = _call("GET", url, f"/v1/jobs/{job_id}/logs", token)
    if as_json:
        _print_json(data)
    else:
        sys.stdout.write(data["logs"])


def cancel(
    job_id: Annotated[str, typer.Argument(help="The job.")],
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Cancel a job; its slice is torn down."""
    job = _call("DELETE", url, f"/v1/jobs/{job_id}", token)
    if as_json:
        _print_json(job)
    else:
        Console().print(f"job [bold]{job['id']}[/] is {job['state']}")


def slices(
    state: Annotated[str | None, typer.Option(help="Only slices in this state.")] = None,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """List slices: their machines, devices and state."""
    _listing(url, token, as_json, "slices", ("id", "job", "state", "outcome", "machines", "devices"), lambda s: (
        s["id"], s["job"], s["state"], s["outcome"] or "",
        ", ".join(f"{m['name']}@{m['host']}" for m in s["machines"]),
        ", ".join(d for m in s["machines"] for d in m["devices"])), params={"state": state} if state else None)


def machines(url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """List machines and pools."""
    columns = ("id", "kind", "rack", "state", "cpus", "memory GB", "slices")
    _listing(url, token, as_json, "machines", columns, lambda m: (
        m["id"], m["kind"], m["location"], m["state"], f"{m['cpus']:g}", f"{m['memory_gb']:g}",
        ", ".join(m["slices"])))


def devices(url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """List devices: free, attached (and to which slice), failed or drained."""
    _listing(url, token, as_json, "devices", ("id", "kind", "model", "location", "state", "slice"), lambda d: (
        d["id"], d["kind"], d["model"], d["location"], d["state"], d["slice"] or ""))


def links(url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False) -> None:
    """List network links: bandwidth, up or down, the load live slices put on them, and which slices."""
    _listing(url, token, as_json, "links", ("id", "Gbit/s", "state", "load Gbit/s", "use", "slices"), lambda lk: (
        lk["id"], f"{lk['gbps']:g}", lk["state"], f"{lk['load_gbps']:g}", f"{lk['utilisation']:.0%}",
        ", ".join(lk["slices"])))


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add the controller's commands to the `disagg` app and its `bench` group."""
    from disagg.bench.api import bench_api
    from disagg.bench.crash import bench_crash
    from disagg.bench.slices import bench_slices

    app.command()(serve)
    app.add_typer(token_app, name="token")
    for fn in (submit, jobs, logs, cancel, slices, machines, devices, links):
        app.command()(fn)
    bench_app.command("slices")(bench_slices)
    bench_app.command("api")(bench_api)
    bench_app.command("crash")(bench_crash)

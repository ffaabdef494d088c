"""`disagg serve`: the controller — REST API, dashboard, scheduling loop, fabric driver, engine.

By default the API is served from one process and the scheduling loop with its slice workers runs in
another, forked from it (`--one-process` keeps both in one). The steps, each a function below:
settings (file < env < options) → open the store and reconcile (in the loop process when split) →
write the first admin token to a 0600 file and print its path, and a banner (with how jobs are isolated)
→ run the API until stopped → stop the loop, close the store.

The controller's packages are imported inside the functions: every `disagg` command imports this
module to register `serve`, and most need none of them.
"""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from disagg.cli.common import EXIT_BAD_INPUT, EXIT_FAILED, fail
from disagg.model import SpecError  # (light: the package loads its spec readers on first use)

if TYPE_CHECKING:
    from collections.abc import Callable

    from disagg.control.config import Config
    from disagg.control.service import Service
    from disagg.control.split import Failed

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

Host = Annotated[str | None, typer.Option(help="Address to listen on.")]
Port = Annotated[int | None, typer.Option(
    min=0, max=65535, help="Port to listen on; 0: any free one (the banner names it).")]
Db = Annotated[str | None, typer.Option(
    help="Store URL: sqlite:///path.db (default ./disagg.db) or postgresql://…")]
Cluster = Annotated[str | None, typer.Option(
    help="Cluster spec (default: the FlowOS-RM testbed).")]
StateDir = Annotated[str | None, typer.Option(
    help="Fabric state and job files (default: <db>.d).")]
Policy = Annotated[str | None, typer.Option(help="Placement policy.")]
LatencyScale = Annotated[float | None, typer.Option(
    min=0.0, help="Scale the emulated testbed's latencies (1 = seed's).")]
TickS = Annotated[float | None, typer.Option(min=0.001, help="Loop period.")]
RoundGapS = Annotated[float | None, typer.Option(
    min=0.0, help="Least time between placement rounds.")]
ApiProcess = Annotated[bool | None, typer.Option(
    "--api-process/--one-process",
    help="Serve the API from a process apart from the scheduling loop and slice workers (default).")]
AllowSameUser = Annotated[bool | None, typer.Option(
    "--allow-same-user", help="Not root: run every tenant's jobs as this user (a single-user machine).")]
AcceptStateLoss = Annotated[bool | None, typer.Option(
    "--accept-state-loss",
    help="Start although the state directory knows more than the store (a lost WAL); stops what it cannot place.")]
AcceptInventoryRemovals = Annotated[bool | None, typer.Option(
    "--accept-inventory-removals",
    help="Take out of the inventory what the cluster spec no longer lists (else such a start is refused).")]
ReplicaName = Annotated[str | None, typer.Option(
    help="This replica's name among the replicas of one controller on PostgreSQL (default: host:port).")]
ConfigFile = Annotated[str | None, typer.Option(
    envvar="DISAGG_CONFIG",
    help="YAML file of settings (docs/configuration.md); DISAGG_<NAME> variables override it, options both.")]


def serve(
    host: Host = None,
    port: Port = None,
    db: Db = None,
    cluster: Cluster = None,
    state_dir: StateDir = None,
    policy: Policy = None,
    latency_scale: LatencyScale = None,
    tick_s: TickS = None,
    round_gap_s: RoundGapS = None,
    api_process: ApiProcess = None,
    allow_same_user: AllowSameUser = None,
    accept_state_loss: AcceptStateLoss = None,
    accept_inventory_removals: AcceptInventoryRemovals = None,
    replica_name: ReplicaName = None,
    config: ConfigFile = None,
) -> None:
    """Start the controller: REST API, dashboard at /, scheduling loop, emulated fabric, local engine."""
    import os

    os.umask(0o077)  # what the controller writes (store, state, logs) is its own alone
    settings = _settings(config, host=host, port=port, db=db, cluster=cluster, state_dir=state_dir, policy=policy,
                         latency_scale=latency_scale, tick_s=tick_s, round_gap_s=round_gap_s, api_process=api_process,
                         allow_same_user=allow_same_user, accept_state_loss=accept_state_loss,
                         accept_inventory_removals=accept_inventory_removals, replica_name=replica_name)
    _single_controller(settings)
    _read_before_opening(settings)
    sock = _listen(settings)  # before the store is touched: a refused start changes nothing
    service, loop_pid, wake_fd, note = _open(settings, sock)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, force=True)  # its own log, whoever forked it
    _announce(service, settings, loop_pid, note, served_url(sock.getsockname(), settings.host))
    _run(service, settings, loop_pid, wake_fd, sock)


def serve_main(argv: list[str]) -> None:
    """Run `disagg serve` with these options in this process, exactly as the command line does.

    `disagg bench crash` forks its servers this way: the parent has imported everything already, so a
    restart after a kill costs a fraction of a second. Exits (SystemExit) when the server stops.
    """
    one = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    one.command()(serve)
    one(args=argv, prog_name="disagg serve")


def _settings(config: str | None, **options: Any) -> Config:
    """The settings (defaults < config file < DISAGG_* variables < options), checked: a known policy."""
    import os

    from disagg.control.config import load_config
    from disagg.placement.registry import UnknownPolicyError, get_policy

    try:
        settings = load_config(config, os.environ, **options)
        get_policy(settings.policy)
        if not settings.replica_name:  # one name for the API and the loop process, even with --port 0
            from disagg.control.leadership import replica_name

            name = replica_name("", settings.host, settings.port)
            settings = settings.model_copy(update={"replica_name": name})
    except (SpecError, UnknownPolicyError) as exc:
        raise fail(str(exc)) from None
    return settings


def _single_controller(settings: Config) -> None:
    """SQLite: refuse a second `serve` on the same file (it names PostgreSQL for replicas). The lock is
    held until this process and its loop process end."""
    from disagg.control.leadership import lock_sqlite
    from disagg.store import normalize_url

    try:
        lock_sqlite(normalize_url(settings.db))
    except SpecError as exc:
        raise fail(str(exc), EXIT_FAILED) from None


def _exit_on_step_down(service: Service) -> None:
    """A replica that loses the lease (or whose write is fenced) exits at once, every thread with it; its
    supervisor starts it again, as a standby (`control.leadership`)."""
    import os

    from disagg.control.leadership import STEPPED_DOWN

    def exit_now(why: str) -> None:
        sys.stderr.write(f"disagg: stepping down: {why}\n")
        sys.stderr.flush()
        os._exit(STEPPED_DOWN)

    if service.leadership is not None:
        service.leadership.on_lost = exit_now


def _read_before_opening(settings: Config) -> None:
    """Read the settings that name files (the tenants spec, the profile table) before the store is opened:
    a refused start had migrated the store, synced the inventory to a new cluster spec, taken the lease and
    reconciled before a bad tenants file or profile table stopped it (exit 2), so that the next, mended
    start found the inventory changed under it."""
    from disagg.control.profiles import operator_table

    try:
        settings.tenants_spec()
        operator_table(settings.profiles)
    except SpecError as exc:
        raise fail(str(exc)) from None


def _open(settings: Config, sock: socket.socket) -> tuple[Service, int, int, str]:
    """Open the service: (service, the loop process's pid or 0, its wake pipe or -1, what reconciling did).

    Split: the loop process opens the store first (migrates, syncs, reconciles), then this process opens
    it for the API alone. One process: open and reconcile here.
    """
    import os

    from disagg.control.service import open_service
    from disagg.control.split import LoopStartError, keep_startup_heap, start_loop_process
    from disagg.engines.local_runner import CONTROLLER_OOM_SCORE_ADJ, oom_score_adj
    from disagg.placement.registry import UnknownPolicyError
    from disagg.store import StoreError

    if os.geteuid() == 0:
        oom_score_adj(CONTROLLER_OOM_SCORE_ADJ)  # the OOM killer takes any job's task before the controller
    try:
        if settings.api_process:
            def loop(ready: Callable[[str], None], failed: Failed, fd: int) -> None:
                sock.close()  # the API's: the loop process does not listen
                _run_loop(settings, ready, failed, fd)

            loop_pid, wake_fd, note = start_loop_process(loop)
            service = open_service(settings, api_only=True)
            keep_startup_heap()
            return service, loop_pid, wake_fd, note
        service = open_service(settings)
        _exit_on_step_down(service)
        return service, 0, -1, service.reconciled.summary()
    except (SpecError, UnknownPolicyError) as exc:
        raise fail(str(exc)) from None
    except StoreError as exc:  # one process: the store, as the loop process says it
        raise fail(str(exc), EXIT_FAILED) from None
    except LoopStartError as exc:  # the loop process could not start; it said why
        raise fail(str(exc), EXIT_BAD_INPUT if exc.bad_input else EXIT_FAILED) from None


def _listen(settings: Config) -> socket.socket:
    """The API's listening socket, bound first: before the store is opened (a port in use had let the start
    migrate the store, sync the inventory and reconcile before it stopped) and before the banner, which
    names the real address (with `--port 0`, the port the system chose). A port in use: exit code 1."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise fail(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}", EXIT_FAILED) from None
    sock.set_inheritable(True)
    return sock


def served_url(address: tuple[Any, ...], host: str) -> str:
    """The URL a browser on this machine can open: the bound port, and for a wildcard address (every
    interface) this machine's name instead of 0.0.0.0 or ::."""
    port = address[1]
    if host in ("0.0.0.0", "::", ""):
        return f"http://{socket.gethostname()}:{port} (every interface)"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


#: Where the first start writes the admin token, in the state directory.
ADMIN_TOKEN_FILE = "admin-token"


def _announce(service: Service, settings: Config, loop_pid: int, note: str, url: str) -> None:
    """The first time, make the admin token and write it to a file only the controller's user can read
    (its path is printed, never the token: logs are read by many); then say where the controller listens
    (`url`: the address really bound) and how it keeps jobs apart."""
    store = service.store
    if not store.has_admin():
        path = (settings.resolved_state_dir() / ADMIN_TOKEN_FILE).absolute()
        _write_private(path, store.create_token("admin", admin=True) + "\n")
        sys.stdout.write(f"admin token written to {path} (mode 0600; disagg token create --url makes more)\n")
    split = f", loop in process {loop_pid}" if loop_pid else ""
    sys.stdout.write(
        f"disagg controller on {url} (store {store.dialect}, "
        f"policy {settings.policy}{split}); {note}\n"
    )
    for line in service.engine.notes():
        sys.stdout.write(f"jobs: {line}\n")
    sys.stdout.write(client_hint(url, settings.resolved_state_dir() / ADMIN_TOKEN_FILE))
    sys.stdout.flush()


def client_hint(url: str, token_file: Path) -> str:
    """What to type in another shell to use this controller: the URL it really listens on (so
    `scripts/demo.sh --port 8391` and `--port 0` name the right one) and, when the first admin token's
    file is there, the token."""
    where = url.split(" ", 1)[0]  # `http://host:port (every interface)` → the URL alone
    token = f" DISAGG_TOKEN=$(cat {token_file.absolute()})" if token_file.exists() else ""
    return f"clients: export DISAGG_URL={where}{token}\n"


def _write_private(path: Path, text: str) -> None:
    """Write `path` readable by this user alone (0600), replacing what was there."""
    import os

    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _run(service: Service, settings: Config, loop_pid: int, wake_fd: int, sock: socket.socket) -> None:
    """Start the loop (or link to the loop process), serve the API until stopped, then stop and close all."""
    import threading

    from disagg.api import create_app
    from disagg.api.http import serve_http
    from disagg.control.leadership import STEPPED_DOWN
    from disagg.control.split import STATUS_FILE, LoopLink, stop_loop_process, watch_loop_process

    stopping = threading.Event()
    ended: dict[str, int] = {}
    if loop_pid:
        service.attach_loop(LoopLink(wake_fd, settings.resolved_state_dir() / STATUS_FILE, loop_pid))
        watch_loop_process(loop_pid, stopping, ended)
    else:
        service.controller.start()
    try:
        serve_http(create_app(service.jobs), settings, sock)
    finally:
        stopping.set()
        _say_left_running(service)
        if loop_pid:
            stop_loop_process(loop_pid)
        service.close()
    if ended.get("code") == STEPPED_DOWN:  # the loop process lost the lease: say so to the supervisor
        raise typer.Exit(STEPPED_DOWN)


def _say_left_running(service: Service) -> None:
    """At shutdown, say what happens to the jobs: they are left running, by design (the next start
    reconciles them), and how many there are; the log says the controller stopped."""
    from disagg.model.states import JobState

    try:
        counts = service.store.counts()["jobs"]
    except Exception:  # a store that is gone cannot be counted; say the rest all the same
        counts = {}
    live = sum(counts.get(st, 0) for st in (JobState.COMPOSING, JobState.RUNNING))
    queued = counts.get(JobState.QUEUED, 0)
    from disagg.display import count

    logging.getLogger("disagg.serve").warning(
        "stopping: %s composing or running left running, by design (the next start picks them up); "
        "%s queued wait for it", count(live, "job"), count(queued, "job"))


def _run_loop(settings: Config, ready: Callable[[str], None], failed: Failed, wake_fd: int) -> None:
    """The loop process of a split `disagg serve`: open (migrate, reconcile), then loop until stopped."""
    import threading

    from disagg.control.service import open_service
    from disagg.control.split import STATUS_FILE, Publisher, forward_wakes
    from disagg.placement.registry import UnknownPolicyError
    from disagg.store import StoreError

    told: list[str] = []
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)  # a standby logs while it waits

    def waiting(note: str) -> None:  # a standby: the API serves now, the loop waits for the lease
        told.append(note)
        ready(note)

    try:
        service = open_service(settings, waiting=waiting)
    except (SpecError, UnknownPolicyError) as exc:
        if told:
            raise  # the API serves already: the loop process ends, and the API with it
        failed(str(exc))
        return
    except StoreError as exc:  # the store cannot be reached, or is not one this disagg can migrate: it says why
        if told:
            raise
        failed(str(exc), bad_input=False)
        return
    _exit_on_step_down(service)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, force=True)  # its own log, whoever forked it
    if settings.loop_nice:
        import os

        os.nice(settings.loop_nice)  # requests first when the cores are short (docs/controller.md)
    controller = service.controller
    stopped = threading.Event()
    controller.publish = Publisher(
        settings.resolved_state_dir() / STATUS_FILE, controller.metrics.render_loop, controller.round_info
    )
    controller.publish()
    forward_wakes(wake_fd, controller.wake, stopped.set)
    controller.start()
    if not told:
        ready(service.reconciled.summary())
    else:
        logging.getLogger(__name__).info("took over the lease: %s", service.reconciled.summary())
    try:
        stopped.wait()
    except KeyboardInterrupt:  # SIGTERM from the API process
        pass
    finally:
        service.close()


def register(app: typer.Typer) -> None:
    """Add `serve` to the `disagg` app."""
    app.command()(serve)

"""`disagg serve` as two processes: the REST API in one, the scheduling loop and slice workers in another.

Both share the store (which holds every job, slice and step) and the fabric's state file, so the
API process needs nothing from the loop process to answer a request: it stores submissions and
cancels, and reads everything else. What crosses between them is small:
  - a wake-up: the API writes a byte on a pipe when it stored something the loop should act on
    (a submission, a cancel, a device fault), so placement does not wait for the next tick;
  - the loop's own numbers (step and round histograms, the last round), which it publishes to a
    file in the state directory at most twice a second, for `GET /metrics` and `GET /healthz`.

Why: one Python process has one interpreter lock. With the loop and a dozen slice workers in the
same process, a request waits for the lock behind them; apart, the operating system shares the
cores instead (`docs/controller.md` has the numbers). The loop process dies with the API process
(PR_SET_PDEATHSIG), so `kill -9` of `disagg serve` still stops everything at once, as a crash would.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

STATUS_FILE = "loop-status.json"


class LoopStartError(RuntimeError):
    """The loop process could not start; the message is its own. `bad_input`: it refused the settings."""

    def __init__(self, message: str, bad_input: bool) -> None:
        super().__init__(message)
        self.bad_input = bad_input


class Failed(Protocol):
    """How the loop process says it could not start: `bad_input`, it refused the settings (exit 2); else
    something it needs could not be had (the store, exit 1)."""

    def __call__(self, message: str, bad_input: bool = True) -> None: ...


PUBLISH_EVERY_S = 0.5
#: A leading loop that has published nothing for this long is in trouble (its rounds, or its disk).
STALE_S = 15.0


class LoopLink:
    """The API process's end: wake the loop, read what it last published."""

    def __init__(self, wake_fd: int, status_path: Path, loop_pid: int = 0) -> None:
        self.wake_fd = wake_fd
        self.status_path = status_path
        self.loop_pid = loop_pid  # this API's loop process: only what it published is judged for staleness

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError, BrokenPipeError, OSError):
            os.write(self.wake_fd, b"w")  # non-blocking: a full pipe already means "wake up"

    def status(self) -> dict[str, Any]:
        try:
            data = json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def silence(self, status: dict[str, Any], now: float) -> str | None:
        """Why this API's own loop process, which published before, has published nothing for STALE_S: it
        publishes after every round, so its rounds fail before that or it cannot write the file. Another
        replica's loop's file (the state directory is shared) says nothing of this one."""
        at = status.get("at")
        if not self.loop_pid or status.get("pid") != self.loop_pid or not isinstance(at, int | float):
            return None
        if now - at < STALE_S:
            return None
        return (f"the loop process {self.loop_pid} has published nothing for {now - at:.0f} s: its rounds fail "
                f"or it cannot write {self.status_path} (the log says which)")


class Publisher:
    """The loop process's end: publish the loop's histograms and last round, at most every PUBLISH_EVERY_S."""

    def __init__(self, status_path: Path, render: Callable[[], bytes], last_round: Callable[[], dict[str, Any]]):
        self.status_path = status_path
        self.render = render
        self.last_round = last_round
        self._last = 0.0

    def __call__(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < PUBLISH_EVERY_S:
            return
        self._last = now
        tmp = self.status_path.with_suffix(".tmp")
        body = {"metrics": self.render().decode(), "last_round": self.last_round(), "pid": os.getpid(),
                "at": time.time()}
        tmp.write_text(json.dumps(body))
        os.replace(tmp, self.status_path)


def keep_startup_heap() -> None:
    """Move what the API process holds once it has opened the service (the inventory of 12,500 machines and
    52,500 devices, the modules, the app: some 400,000 objects that live as long as it does) out of the
    cyclic collector's reach (`gc.freeze`, after one collection). Each full collection walked all of it
    for nothing: under `bench controller` nine of them, up to 0.4 s each, on the threads that answer
    submissions. Not for the loop process, whose rounds settle their own objects
    (`placement.base.collector_paused`, which a frozen set would turn into a young collection a round)."""
    import gc

    gc.collect()
    gc.freeze()


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the call: follow it now
        os._exit(1)


def start_loop_process(
    run_loop: Callable[[Callable[[str], None], Failed, int], None],
) -> tuple[int, int, str]:
    """Fork the loop process; returns (its pid, the write end of its wake pipe, its ready note).

    `run_loop(ready, failed, wake_fd)` runs in the child: it opens the service, calls `ready(note)`
    (or `failed(message)`), then runs the loop until it is told to stop. Raises LoopStartError
    with the child's message when it could not start.
    """
    parent = os.getpid()
    wake_r, wake_w = os.pipe()
    ready_r, ready_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the loop process
        code = 0
        try:
            _die_with_parent(parent)
            os.close(wake_w)
            os.close(ready_r)
            signal.signal(signal.SIGTERM, signal.default_int_handler)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the API, which stops us

            def ready(note: str) -> None:
                os.write(ready_w, ("ok " + note).encode())
                os.close(ready_w)

            def failed(message: str, bad_input: bool = True) -> None:
                os.write(ready_w, (("error " if bad_input else "unavailable ") + message).encode())
                os.close(ready_w)

            run_loop(ready, failed, wake_r)
        except KeyboardInterrupt:
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(wake_r)
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as f:
        answer = f.read().decode(errors="replace")
    if not answer.startswith("ok "):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        if answer.startswith("error "):
            raise LoopStartError(answer.removeprefix("error "), bad_input=True)
        if answer.startswith("unavailable "):
            raise LoopStartError(answer.removeprefix("unavailable "), bad_input=False)
        raise LoopStartError("the loop process exited while starting (its error is in the log)", bad_input=False)
    os.set_blocking(wake_w, False)
    return pid, wake_w, answer.removeprefix("ok ")


def forward_wakes(wake_fd: int, wake: Callable[[], None], stop: Callable[[], None]) -> threading.Thread:
    """In the loop process: every byte on the pipe wakes the loop; the pipe's end (the API is gone) stops it."""

    def run() -> None:
        while True:
            try:
                data = os.read(wake_fd, 4096)
            except OSError:
                data = b""
            if not data:
                stop()
                return
            wake()

    t = threading.Thread(target=run, name="wake-pipe", daemon=True)
    t.start()
    return t


def stop_loop_process(pid: int, timeout: float = 30.0) -> None:
    """Ask the loop process to stop (SIGTERM), then wait for it (SIGKILL after `timeout`)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def watch_loop_process(pid: int, stopping: threading.Event, ended: dict[str, int] | None = None) -> threading.Thread:
    """In the API process: if the loop process ends while nobody stopped it, stop the API too
    (SIGTERM to itself: uvicorn shuts down), so a server never takes jobs that nothing places.
    `ended["code"]` gets the loop process's exit code."""

    def run() -> None:
        status = 0
        with contextlib.suppress(ChildProcessError):
            status = os.waitpid(pid, 0)[1]
        if ended is not None:
            ended["code"] = os.waitstatus_to_exitcode(status)
        if not stopping.is_set():
            sys.stderr.write(f"disagg: the loop process {pid} ended; stopping the API\n")
            os.kill(os.getpid(), signal.SIGTERM)

    t = threading.Thread(target=run, name="loop-watch", daemon=True)
    t.start()
    return t


def group_gone(pgid: int, timeout: float = 10.0) -> bool:
    """Wait until no live process is left in process group `pgid` (Linux /proc); False on timeout."""
    end = time.monotonic() + timeout
    while True:
        alive = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                alive = True
                break
        if not alive:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.01)

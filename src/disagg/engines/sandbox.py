"""A task's namespaces: the `bwrap` (Debian's bubblewrap) command line that wraps its command.

Each task of the local engine runs inside `bwrap`, started as root by the job's runner, then drops to
the tenant's uid/gid with util-linux `setpriv` inside the sandbox (after bwrap made its mounts):
  - PID namespace with its own /proc: the task sees its job's processes only (no other tenant's
    command line, no slice ids, not the controller);
  - IPC and UTS namespaces: SysV and POSIX IPC objects are its own and go with it;
  - a mount namespace: the host's tree read-only; /tmp and /dev/shm private tmpfs of `tmp_bytes` each
    (their pages are charged to the task's memory cgroup and freed when it ends); the job's working
    directory (and the operator's `shared` directories) writable; the controller's state directory,
    the store's files, the jobs' root (every other job's directory) and the cgroup tree hidden;
  - a network namespace with loopback only, unless the tenant may use the host's network. A job's
    tasks share one: the runner starts a holder (`bwrap --unshare-net … sleep`) for a job of several
    tasks and each task enters its namespace with `nsenter --net` before its bwrap starts.

What the runner imports at each job's start is kept small: this module uses nothing but built-ins.
"""

from __future__ import annotations

#: `typing.TYPE_CHECKING` without importing typing.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: A job's network: its own namespace with loopback only, or the host's.
NETWORK_LOOPBACK = "loopback"
NETWORK_HOST = "host"
NETWORKS = (NETWORK_LOOPBACK, NETWORK_HOST)


def task_argv(sandbox: dict[str, Any], account: dict[str, Any], workdir: str, command: list[str],
              netns_pid: int | None = None) -> list[str]:
    """The command line that runs `command` in the task's sandbox as the tenant's user.

    `sandbox`: what the engine staged (paths of bwrap, setpriv, nsenter; `network`; `hide`, `shared`,
    `tmp_bytes`, `jobs_dir`); `netns_pid`: a process in the job's network namespace (the holder's), for
    a job of several tasks."""
    argv = [sandbox["bwrap"], "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try"]
    if sandbox["network"] != NETWORK_HOST and netns_pid is None:
        argv.append("--unshare-net")
    argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    size = str(int(sandbox["tmp_bytes"]))
    for where in ("/tmp", "/dev/shm"):
        argv += ["--perms", "1777", "--size", size, "--tmpfs", where]
    argv += ["--tmpfs", "/sys/fs/cgroup"]
    for path in _parents_in_tmpfs([*sandbox.get("hide", ()), sandbox["jobs_dir"], workdir, *sandbox.get("shared", ())]):
        argv += ["--perms", "0755", "--dir", path]  # else made with the next mount's 0700: shared dirs unreachable
    for path in sandbox.get("hide", ()):
        argv += ["--perms", "0700", "--tmpfs", path]  # empty, and root's alone
    for path in sandbox.get("hide_files", ()):
        argv += ["--ro-bind", "/dev/null", path]
    argv += ["--perms", "0711", "--tmpfs", sandbox["jobs_dir"], "--bind", workdir, workdir]
    for path in sandbox.get("shared", ()):
        argv += ["--bind", path, path]
    argv += ["--chdir", workdir, "--"]
    if account.get("drop"):
        uid, gid = account["uid"], account["gid"]
        argv += [sandbox["setpriv"], f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--"]
    argv += command
    if netns_pid is not None:
        argv = [sandbox["nsenter"], f"--net=/proc/{netns_pid}/ns/net", "--", *argv]
    return argv


def _parents_in_tmpfs(paths: list[str]) -> list[str]:
    """The directories above `paths` that lie in the sandbox's own /tmp or /dev/shm, top down: bwrap makes
    them for a mount below them with that mount's `--perms`, so a hidden state directory in /tmp/x made
    /tmp/x 0700 and the shared /tmp/x/events unreachable to the job (a chaos soak run with --keep-dir)."""
    out: list[str] = []
    for path in paths:
        for top in ("/tmp", "/dev/shm"):
            if path.startswith(top + "/"):
                here = top
                for part in path[len(top) + 1:].split("/")[:-1]:
                    here += "/" + part
                    if part and here not in out:
                        out.append(here)
    return out


def holder_argv(sandbox: dict[str, Any], info_fd: int) -> list[str]:
    """The command line of a job's network holder: a process that sits in a new network namespace
    (loopback up) until the runner ends it; bwrap writes the holder's pid to `info_fd`."""
    return [sandbox["bwrap"], "--die-with-parent", "--unshare-net", "--unshare-pid", "--ro-bind", "/", "/",
            "--info-fd", str(info_fd), "--", "sleep", "infinity"]


def child_pid(info: bytes) -> int:
    """The sandboxed child's pid from what bwrap wrote to its `--info-fd` (`{"child-pid": N, …}`)."""
    text = info.decode()
    at = text.index('"child-pid"')
    digits = text[text.index(":", at) + 1:].lstrip()
    end = 0
    while end < len(digits) and digits[end].isdigit():
        end += 1
    return int(digits[:end])


__all__ = ["NETWORKS", "NETWORK_HOST", "NETWORK_LOOPBACK", "child_pid", "holder_argv", "task_argv"]

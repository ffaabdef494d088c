"""Which Unix user a tenant's jobs run as (Slurm runs a job as its submitter; so does disagg).

A tenant's user is `tenants.<name>.unix_user` in the controller's config, or `<prefix><tenant>` by
default (`unix_user_prefix`: `disagg-<4 hex of the state directory>-` unless set, so two controllers on one
host never share a user; `default_unix_user` never maps two tenants to one user), which a controller
running as root creates on first use (`useradd --system`, no home, no login shell). A job never runs as
root, and never with the controller's own rights:
  - as root, every job drops to its tenant's uid/gid with no supplementary group;
  - not as root, the controller cannot become anyone else: it runs a job only for a tenant mapped to
    its own user, or for every tenant when the operator allows it (`allow_same_user: true`, for a
    single-user laptop, where a job can then read and write whatever the controller can).
A job that cannot run as its user is refused (`TaskRefused`, naming the user and why): it fails
instead of running with rights it should not have.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from disagg.engines.base import TaskRefused
from disagg.model.tenants import Tenants

#: A Unix user name as `useradd` takes it (what a default name must be).
_UNIX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
#: The prefix of the users disagg makes for tenants (`unix_user_prefix`; by default one per controller,
#: `controller_prefix`).
DEFAULT_PREFIX = "disagg-"
#: A tenant name that becomes its user name as it is: lower case, digits and '-' (never '_').
_PLAIN = re.compile(r"[a-z0-9][a-z0-9-]*")


def controller_prefix(state_dir: Path) -> str:
    """`disagg-<4 hex of the state directory>-`: the default prefix of one controller's users, so that two
    controllers on one host never share a tenant's user (each tenant `alice` of each is another user)."""
    return f"{DEFAULT_PREFIX}{hashlib.sha256(str(state_dir.absolute()).encode()).hexdigest()[:4]}-"


def default_unix_user(tenant: str, prefix: str = DEFAULT_PREFIX) -> str:
    """`<prefix><tenant>` for a tenant name of lower case letters, digits and '-' that fits; otherwise a
    valid name made from it, with '_' and a hash of the whole name: `<prefix><cleaned>_<8 hex>`.

    Injective: the part after the prefix has no '_' in a plain name and exactly one, before the hash, in a
    made one, so a plain name never equals a made one (`Alice` → `disagg-alice_3bc510..` is not the user of
    a tenant `alice-3bc510`), and two made names differ in their hashes (32 bits of SHA-256)."""
    name = prefix + tenant
    if _PLAIN.fullmatch(tenant) and _UNIX_USER.fullmatch(name):
        return name
    room = max(1, 32 - len(prefix) - 9)
    cleaned = re.sub(r"[^a-z0-9-]", "-", tenant.lower())[:room]
    return f"{prefix}{cleaned}_{hashlib.sha256(tenant.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Account:
    """Whom a job runs as. `drop`: the runner switches to uid/gid (false: it stays the controller's user)."""

    user: str
    uid: int
    gid: int
    drop: bool


class Accounts:
    """The tenants' users on this host: resolved (and made, as root) once each, then cached."""

    def __init__(self, tenants: Tenants | None = None, allow_same_user: bool = False,
                 prefix: str = DEFAULT_PREFIX) -> None:
        self.tenants = tenants or Tenants()
        self.allow_same_user = allow_same_user
        self.prefix = prefix
        self.root = os.geteuid() == 0
        self.me = pwd.getpwuid(os.geteuid())
        self._known: dict[str, Account] = {}
        self._lock = threading.Lock()

    def user_of(self, tenant: str) -> str:
        """The Unix user name the tenant's jobs run as."""
        return self.tenants.get(tenant).unix_user or default_unix_user(tenant, self.prefix)

    def of(self, tenant: str) -> Account:
        """The account a job of `tenant` runs as; TaskRefused when there is none it may run as."""
        with self._lock:
            found = self._known.get(tenant)
            if found is None:
                found = self._resolve(tenant)
                self._known[tenant] = found
            return found

    def _resolve(self, tenant: str) -> Account:
        user = self.user_of(tenant)
        if not self.root:
            if user == self.me.pw_name or self.allow_same_user:
                return Account(self.me.pw_name, self.me.pw_uid, self.me.pw_gid, drop=False)
            raise TaskRefused(
                f"tenant {tenant!r}: its jobs run as the Unix user {user!r}, and this controller is not root "
                f"(it runs as {self.me.pw_name!r}); set allow_same_user: true to run every tenant's jobs "
                f"as {self.me.pw_name!r} on a single-user machine")
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            if user != default_unix_user(tenant, self.prefix):
                raise TaskRefused(f"tenant {tenant!r}: the Unix user {user!r} (its unix_user) does not exist") from None
            entry = _make_user(user)
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise TaskRefused(f"tenant {tenant!r}: the Unix user {user!r} has uid or gid 0; jobs never run as root")
        return Account(user, entry.pw_uid, entry.pw_gid, drop=True)

    def notes(self) -> list[str]:
        """What the controller says at start about whom jobs run as."""
        if self.root:
            return [f"jobs run as their tenant's Unix user (tenants.<name>.unix_user, default {self.prefix}<tenant>, "
                    "made on first use), with no supplementary groups"]
        if self.allow_same_user:
            return [f"not root: every tenant's jobs run as {self.me.pw_name!r} (allow_same_user: true): "
                    "a job can read and write whatever the controller can"]
        return [f"not root: only jobs of tenants mapped to {self.me.pw_name!r} can run; others fail "
                "(allow_same_user: true runs them all as this user, for a single-user machine)"]


def _make_user(user: str) -> pwd.struct_passwd:
    """`useradd --system` the user (a group of its own, no home, no login shell); another process making
    it at the same moment is fine."""
    shell = "/usr/sbin/nologin" if os.path.exists("/usr/sbin/nologin") else "/bin/false"
    result = subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", shell, "--comment", "disagg tenant", user],
        capture_output=True, text=True, check=False)
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise TaskRefused(f"cannot make the Unix user {user!r}: useradd said: "
                          f"{(result.stderr or result.stdout).strip() or result.returncode}") from None
    return entry


__all__ = ["DEFAULT_PREFIX", "Account", "Accounts", "controller_prefix", "default_unix_user"]

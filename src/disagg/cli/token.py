"""`disagg token create | list | revoke`: the controller's bearer tokens.

Through the REST API with an admin token (`--url`/DISAGG_URL, `--token`/DISAGG_TOKEN), or, for
`create` only, straight into the store with `--db` (on the controller's host, for a first admin
token when the file the first start wrote is gone): `--db` never makes a new store, it refuses a
store that `disagg serve` has not set up. A new token's secret is printed alone on stdout, once;
`list` shows ids, tenants and expiry, never a secret (every column already: `-o wide` is the same
table). `revoke` takes a token's id whole, never a beginning of it: ids are small integers that a
revocation deletes, and repeating `revoke 1` must not revoke token 12.
"""

from __future__ import annotations

import datetime
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from disagg.cli.common import (
    DEFAULT_API,
    EXIT_FAILED,
    AsJson,
    Output,
    Token,
    Url,
    call_api,
    fail,
    get_all,
    print_json,
)
from disagg.cli.tables import Col, console, make_table

token_app = typer.Typer(help="Bearer tokens of the controller.", no_args_is_help=True)

ExpiresIn = Annotated[float | None, typer.Option(min=1, help="Seconds until the token stops working.")]


@token_app.command("create")
def token_create(
    tenant: Annotated[str, typer.Option(help="The tenant the token acts for.")],
    admin: Annotated[bool, typer.Option("--admin", help="An admin token (sees and touches everything).")] = False,
    expires_in_s: ExpiresIn = None,
    db: Annotated[str | None, typer.Option(
        help="Write it straight into this existing store (sqlite:///path.db or postgresql://…) instead.")] = None,
    url: Url = DEFAULT_API,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Print a new bearer token, alone on stdout (`--json`: with its id, tenant and expiry)."""
    from disagg.model.tenants import TENANT_NAME, tenant_name_problem

    problem = tenant_name_problem(tenant)
    if problem and not (admin and TENANT_NAME.fullmatch(tenant)):
        raise fail(f"--tenant: {problem}")
    if db is not None:
        created = _create_in_store(db, tenant, admin, expires_in_s)
    else:
        body = {"tenant": tenant, "admin": admin, "expires_in_s": expires_in_s}
        created = call_api("POST", url, "/v1/tokens", token, json=body)
    if as_json:
        print_json(created)
    else:
        sys.stdout.write(created["token"] + "\n")


def _create_in_store(db: str, tenant: str, admin: bool, expires_in_s: float | None) -> dict[str, Any]:
    """A token written straight into the store at `db`, which must exist with disagg's schema."""
    from disagg.control.config import store_url_problem
    from disagg.store import Store, StoreError
    from disagg.store.backup import sqlite_file

    problem = store_url_problem(db)
    if problem is not None:
        raise fail(f"--db: {db!r} is not allowed ({problem})")
    path = sqlite_file(db)
    if path is not None and path.is_dir():
        raise fail(f"--db: {path} is a directory, not a store")
    if path is not None and not path.is_file():
        raise fail(f"--db: no store at {path}; `disagg serve --db {db}` makes one (this command never does)")
    try:
        store = Store(db)
        try:
            if not store.has_schema():
                raise fail(f"--db: {db} is not a disagg store (no schema); start `disagg serve` on it first")
            store.migrate()  # a store of an older disagg: bring it up to date, as a start would
            info, secret = store.issue_token(tenant, admin, expires_in_s)
        finally:
            store.close()
    except StoreError as exc:
        raise fail(f"--db: {exc}", EXIT_FAILED) from None
    return {**info.to_json(), "token": secret}


def _when(at: float | None) -> str:
    if at is None:
        return "never"
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@token_app.command("list")
def token_list(url: Url = DEFAULT_API, token: Token = None, as_json: AsJson = False,
               output: Output = "table") -> None:
    """List the tokens that work (admin): ids, tenants, admin or not, expiry; never a secret."""
    tokens = get_all(url, "/v1/tokens", token, "tokens")
    if as_json or output == "json":
        print_json({"tokens": tokens})
        return
    cols = (Col("id", "num"), Col("tenant", "id"), Col("admin"), Col("created (UTC)", "num"),
            Col("expires (UTC)", "num"))
    rows = [[t["id"], t["tenant"], "yes" if t["admin"] else "", _when(t["created_at"]), _when(t["expires_at"])]
            for t in tokens]
    console().print(make_table("tokens", cols, rows))


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[int, typer.Argument(min=1, help="The token's id, whole (from `disagg token list`).")],
    url: Url = DEFAULT_API,
    token: Token = None,
) -> None:
    """Revoke a token (admin): it answers 401 from now on (within a second everywhere)."""
    call_api("DELETE", url, f"/v1/tokens/{token_id}", token)  # a whole number: one part of the path
    Console().print(f"token {token_id} revoked")


def register(app: typer.Typer) -> None:
    """Add the `token` group to the `disagg` app."""
    app.add_typer(token_app, name="token")

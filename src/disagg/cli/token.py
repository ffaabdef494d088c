"""`disagg token create`: a bearer token for a tenant, written straight into the controller's store.

Run where the store is (the controller's host); the printed token is what `--token` / DISAGG_TOKEN
take in the client commands.
"""

from __future__ import annotations

import re
import sys
from typing import Annotated

import typer

from disagg.cli.common import EXIT_FAILED, fail

token_app = typer.Typer(help="Bearer tokens of the controller.", no_args_is_help=True)

#: The tenant names `token create` accepts: a letter or digit, then up to 127 letters, digits, '_', '.', '-'.
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@token_app.command("create")
def token_create(
    tenant: Annotated[str, typer.Option(help="The tenant the token acts for.")],
    admin: Annotated[
        bool, typer.Option("--admin", help="An admin token (sees and touches everything).")
    ] = False,
    db: Annotated[str, typer.Option(envvar="DISAGG_DB", help="Store URL.")] = "sqlite:///disagg.db",
) -> None:
    """Print a new bearer token, alone on stdout."""
    from disagg.store import Store, StoreError

    if not TENANT_NAME.fullmatch(tenant):
        raise fail(f"--tenant: {tenant!r} is not allowed; use letters, digits, '_', '.', '-' (up to 128)")
    try:
        store = Store(db)
        store.migrate()
        token = store.create_token(tenant, admin=admin)
        store.close()
    except StoreError as exc:
        raise fail(f"--db: {exc}", EXIT_FAILED) from None
    sys.stdout.write(token + "\n")


def register(app: typer.Typer) -> None:
    """Add the `token` group to the `disagg` app."""
    app.add_typer(token_app, name="token")

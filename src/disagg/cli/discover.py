"""`disagg discover redfish URL`: a cluster spec (YAML, on stdout) from a Redfish CompositionService.

The spec's machines and devices keep their blocks' URIs, so `disagg serve` with
`fabric: {driver: redfish, url: URL, ...}` composes them; warnings (block types disagg cannot compose)
go to stderr. The discovery itself is `disagg.fabric.redfish_discovery` (it returns data; this prints).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from disagg.cli.common import EXIT_FAILED, fail

discover_app = typer.Typer(help="Cluster specs from what a service knows.", no_args_is_help=True)


@discover_app.command("redfish")
def redfish(
    url: Annotated[str, typer.Argument(help="The service's base URL, http(s)://host[:port].")],
    username: Annotated[str | None, typer.Option(help="The user to log in as.")] = None,
    password: Annotated[str | None, typer.Option(help="The password (prefer --password-file).")] = None,
    password_file: Annotated[Path | None, typer.Option(help="A file holding the password.")] = None,
    insecure: Annotated[bool, typer.Option(help="Skip TLS certificate verification.")] = False,
    output: Annotated[Path | None, typer.Option(help="Write the spec here instead of stdout.")] = None,
) -> None:
    """Print a cluster spec built from the service's ResourceBlocks, chassis and zones."""
    import yaml

    from disagg.fabric.redfish_client import RedfishClient, RedfishFault
    from disagg.fabric.redfish_discovery import discover
    from disagg.model import SpecError, parse_cluster

    if not url.startswith(("http://", "https://")):
        raise fail(f"URL: {url!r} is not allowed; give http(s)://host[:port] of the Redfish service")
    if password is not None and password_file is not None:
        raise fail("--password and --password-file: give one of them")
    if password_file is not None:
        try:
            password = password_file.read_text().strip()
        except OSError as exc:
            raise fail(f"--password-file: cannot read {password_file}: {exc.strerror}") from None
    client = RedfishClient(url, username, password, verify=not insecure, retries=2)
    try:
        spec, warnings = discover(client)
    except RedfishFault as exc:
        raise fail(f"discovery of {url} failed: {exc}", EXIT_FAILED) from None
    finally:
        client.close()
    for w in warnings:
        sys.stderr.write(f"warning: {w}\n")
    try:
        parse_cluster(spec, url)
    except SpecError as exc:
        raise fail(f"the service's blocks do not make a valid cluster spec: {exc}", EXIT_FAILED) from None
    text = f"# from {url} by `disagg discover redfish`\n" + yaml.safe_dump(spec, sort_keys=False)
    if output is not None:
        output.write_text(text)
    else:
        sys.stdout.write(text)


def register(app: typer.Typer) -> None:
    """Add the `discover` group to the `disagg` app."""
    app.add_typer(discover_app, name="discover")

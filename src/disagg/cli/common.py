"""What every command group of `disagg` shares: the one `fail()`, the exit codes, the client options
(`--url`, `--token`, `--json`), the REST call, and the JSON printers.

Exit codes: 0 ok, 1 the controller could not be reached or failed, 2 bad input (a spec that does not
validate, an unknown name, a 4xx answer).
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.console import Console

if TYPE_CHECKING:
    import httpx

#: Exit code for bad input (a spec that does not validate, an unknown name, a 4xx answer).
EXIT_BAD_INPUT = 2
#: Exit code when the controller could not be reached or failed (a 5xx answer).
EXIT_FAILED = 1
DEFAULT_API = "http://127.0.0.1:8080"

err = Console(stderr=True)

Url = Annotated[str, typer.Option("--url", envvar="DISAGG_URL", help="The controller's API.")]
Token = Annotated[str | None, typer.Option("--token", envvar="DISAGG_TOKEN", help="A bearer token.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
#: `-o` of every listing: the table, the table with every column the API gives, or the API's JSON.
Output = Annotated[Literal["table", "wide", "json"], typer.Option(
    "--output", "-o", help="table, wide (every column) or json (as --json).")]
#: Items asked for per page of a listing: the API's most (DISAGG_PAGE_SIZE, 1 to 500, makes pages smaller).
PAGE_SIZE_MAX = 500


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print an error to stderr and return the Exit to raise: `raise fail("--x: ...") from None`."""
    from rich.markup import escape

    # the message is the API's or the store's words, taken as they are: "[a-z_]" in a pattern is not markup
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def output_dir(path: Path, option: str) -> None:
    """Check, before any work, that `path` is (or can be made) a directory this user may write into: a
    bad `--plots` or `--dump-graphs` was a traceback after the whole run. Exit 2 naming the option."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"{option}: cannot make the directory {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise fail(f"{option}: cannot write into {path}: permission denied")


def output_file(path: Path, option: str) -> None:
    """Check, before any work, that `path` can be written as a file: its directory exists and may be written,
    and it is not a directory. Exit 2 naming the option."""
    folder = path.parent
    if path.is_dir():
        raise fail(f"{option}: {path} is a directory: give a file's path")
    if not folder.is_dir():
        raise fail(f"{option}: the directory {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise fail(f"{option}: cannot write {path}: permission denied")


def print_json(data: Any) -> None:
    """The API's answer as indented JSON on stdout (the client commands' `--json`)."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def json_rows(data: dict[str, object]) -> str:
    """JSON with each top-level key on a line and each item of a top-level list on a line of its own.

    Readable line by line (one job per line) and written by the C encoder: `indent=` falls back to
    Python's encoder, which took 1.7 s of a 3.6 s `disagg place --json` at 12,500 machines.
    """
    lines = []
    for key, value in data.items():
        head = f"  {json.dumps(key)}: "
        if isinstance(value, list) and value:
            items = ",\n".join("    " + json.dumps(v) for v in value)
            lines.append(f"{head}[\n{items}\n  ]")
        else:
            lines.append(head + json.dumps(value))
    return "{\n" + ",\n".join(lines) + "\n}\n"


def segment(value: str, what: str, slashes: bool = False) -> str:
    """`value` (an id, a name, an image the user typed) as one part of an API path: percent-encoded whole,
    `/` included, so that it is never more than one part. Unescaped, `cancel '../devices/iobox0/gpu0/drain#'`
    drained a device and `jobs ''` was a traceback. "", "." and ".." name nothing, only device ids and
    images have a `/` (`slashes`), and none has a control character: exit 2."""
    from urllib.parse import quote

    if value in ("", ".", ".."):
        raise fail(f"{what}: {value!r} is not allowed: give one (the list commands show them)")
    if "/" in value and not slashes:
        raise fail(f"{what}: {escape_controls(repr(value))} is not allowed: a {what} id has no '/'")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise fail(f"{what}: {escape_controls(repr(value))} is not allowed: it has control characters")
    return quote(value, safe="")


def call_api(method: str, url: str, path: str, token: str | None, headers: dict[str, str] | None = None,
             **kwargs: Any) -> Any:
    """One request to the controller's API; its JSON answer, or `fail()` with the API's `detail`.

    httpx is imported here, not at the top: `disagg --help` and the offline commands never need it.
    """
    import httpx

    if not token:
        raise fail("no token: pass --token or set DISAGG_TOKEN (disagg token create prints one)")
    where = not_finite(kwargs.get("json"))
    if where is not None:
        raise fail(f"{where[0]}: value {where[1]!r} is not allowed: must be a finite number")
    try:
        r = _client(url.startswith("https://")).request(
            method, url.rstrip("/") + path, headers={"Authorization": f"Bearer {token}", **(headers or {})}, **kwargs)
    except httpx.InvalidURL as exc:
        raise fail(f"not a path the API can have: {escape_controls(path)}: {exc}") from None
    except httpx.UnsupportedProtocol as exc:  # bad input, not a controller that does not answer (exit 1)
        raise fail(f"--url: {escape_controls(repr(url))} is not allowed: {exc} (e.g. {DEFAULT_API})") from None
    except httpx.HTTPError as exc:
        raise fail(f"cannot reach the controller at {url}: {exc}", EXIT_FAILED) from None
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        raise fail(f"{r.status_code}: {escape_controls(str(detail))}",
                   EXIT_BAD_INPUT if r.status_code < 500 else EXIT_FAILED)
    return r.json() if r.content else None


def not_finite(body: Any, where: str = "") -> tuple[str, float] | None:
    """The first number of a request body that JSON cannot carry (NaN, ±infinity: `--cpus nan` was a
    traceback from the encoder), as (its field, dotted, and its value); None when there is none."""
    if isinstance(body, float) and not math.isfinite(body):
        return where or "(body)", body
    items = body.items() if isinstance(body, dict) else enumerate(body) if isinstance(body, list | tuple) else ()
    for key, value in items:
        found = not_finite(value, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


@functools.cache
def _client(secure: bool) -> httpx.Client:
    """The command's one HTTP client (a listing's pages, a follow's polls share its connections), per
    scheme. For plain HTTP its TLS context is a bare one that trusts nothing: no TLS is spoken, and loading
    the CA bundle cost 150 ms of every command. An `https://` URL gets httpx's default, verified against
    the CA bundle."""
    import ssl

    import httpx

    return httpx.Client(timeout=30, verify=True if secure else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))


def get_all(url: str, path: str, token: str | None, key: str, params: dict[str, str] | None = None,
            most: int = 1_000_000) -> list[Any]:
    """Every item of a paged listing (`key` of each page), following the pages' `next` links."""
    items: list[Any] = []
    page = call_api("GET", url, path, token, params={**(params or {}), "limit": str(page_size())})
    while True:
        items.extend(page[key])
        nxt = page.get("next")
        if not nxt or len(items) >= most:
            return items
        page = call_api("GET", url, nxt, token)


def page_size() -> int:
    """How many items `get_all` asks for a page: PAGE_SIZE_MAX, or DISAGG_PAGE_SIZE when set (smaller pages
    for a slow link, and for tests of paging)."""
    text = os.environ.get("DISAGG_PAGE_SIZE", "")
    if not text:
        return PAGE_SIZE_MAX
    if not text.isdigit() or not 1 <= int(text) <= PAGE_SIZE_MAX:
        raise fail(f"DISAGG_PAGE_SIZE: {text!r} is not allowed; use a whole number from 1 to {PAGE_SIZE_MAX}")
    return int(text)


def escape_controls(text: str, keep: str = "\n\t") -> str:
    """`text` with every control character (but those in `keep`) shown as an escape such as `\\x1b`: what a
    job or a tenant wrote can never move the cursor, recolour or retitle the reader's terminal."""
    return text.translate(_CONTROL_ESCAPES if keep == "\n\t" else _escapes(keep))


def _escapes(keep: str) -> dict[int, str]:
    codes = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
    return {c: f"\\x{c:02x}" for c in codes if chr(c) not in keep}


_CONTROL_ESCAPES = _escapes("\n\t")

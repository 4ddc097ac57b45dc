"""Flags shared by several commands, and how a command finds its database.

Why it exists: ``--dsn`` and ``--json`` mean the same thing everywhere, and the one line that
says which database a command is using (always with the password masked) is printed in one place.

What it is not: configuration storage.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..db.connections import Role
from ..dsn import ResolvedDatabase, resolve

F = TypeVar("F", bound=Callable[..., Any])

CLI_ROLE = Role("cli")  # every connection a command opens (``db.connections.connect``)


def dsn_option(fn: F) -> F:
    return click.option(
        "--dsn",
        envvar=None,
        default=None,
        metavar="URL",
        help="Postgres DSN. Default: $UJOBS_DATABASE_URL, else an embedded Postgres under $UJOBS_HOME.",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(fn)


def database(
    dsn: str | None, *, quiet: bool = False, config_dsn: str | None = None
) -> ResolvedDatabase:
    resolved = resolve(dsn, config_dsn=config_dsn)
    if not quiet:
        click.echo(resolved.note, err=True)
    return resolved


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str, ensure_ascii=False))

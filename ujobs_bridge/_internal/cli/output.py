"""Where commands print tables and text: a console that never wraps a pipe, and cells that are
always text, never markup.

Why it exists: Rich wraps at 80 columns when stdout is not a terminal (``jobs ls | head`` split
each UUID over four lines) and reads ``[bold]`` or ``[link=...]`` inside a string as markup, so
job data (an argument, an error message, ``[null, null]``) was restyled, turned into links or
swallowed. Every table a command prints goes through ``console()`` and every value from the
database through ``cell()``.

What it is not: formatting of values (the commands decide what a column shows).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

PIPE_WIDTH = 100_000  # wide enough that no row of a table printed into a pipe ever wraps


def console(*, stderr: bool = False, markup: bool = False) -> Console:
    """A console for command output: at the terminal's width on a terminal; into a pipe or a
    file, wide enough that each table row stays one line and no value is cut. Markup in the
    strings a command passes is off unless ``markup`` (for text the command wrote itself, with
    no data in it): only ``Text`` styles what it says."""
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    return Console(
        stderr=stderr,
        width=None if tty else PIPE_WIDTH,
        markup=markup,
        highlight=False,
        emoji=False,
        soft_wrap=not tty,
    )


def text_of(value: Any) -> str:
    """A value as one line of text: strings as they are, everything else as JSON (``null`` for
    None inside containers, ISO 8601 for datetimes)."""
    if isinstance(value, str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    return json.dumps(value, default=iso_default, ensure_ascii=False)


def cell(value: Any, limit: int | None = None) -> Text:
    """A table cell that is literally ``value`` (no markup, no emoji codes), cut at ``limit``."""
    text = "" if value is None else text_of(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return Text(text)


def iso_default(value: Any) -> Any:
    """``json.dumps``'s ``default``: datetimes as ISO 8601, anything else as its text."""
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def table(title: str, columns: tuple[str, ...], *, fold: bool = True) -> Table:
    """A table whose title and headers are plain text; cells folded (never cut) on a terminal."""
    out = Table(title=Text(title))
    for column in columns:
        out.add_column(Text(column), overflow="fold" if fold else "ellipsis")
    return out

"""Loads ``queries.sql`` into a name → statement mapping; the only source of SQL text.

Why it exists: every statement the Postgres driver runs lives in one file a reviewer can read
top to bottom, under a ``-- name --`` header. This loader refuses a duplicate or malformed name at
import, so a typo fails the first test rather than a production call.

What it is not: a query builder. Nothing here concatenates or formats SQL; statements are loaded
verbatim and vouched for as ``LiteralString`` because they ship with the package.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString

_HEADER = re.compile(r"^-- ([a-z0-9_]+) --$", re.MULTILINE)


def parse(text: str) -> dict[str, LiteralString]:
    """Split a ``queries.sql``-style text into named statements."""
    found: dict[str, LiteralString] = {}
    matches = list(_HEADER.finditer(text))
    for index, match in enumerate(matches):
        name = match.group(1)
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end]
        lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
        statement = "\n".join(lines).strip()
        if not statement:
            raise ValueError(f"queries.sql: block {name!r} has no statement")
        if name in found:
            raise ValueError(f"queries.sql: block {name!r} is defined twice")
        # The file ships with the package: we vouch for it as a literal.
        found[name] = statement  # shipped with the package: vouched for as a literal
    return found


def _load() -> dict[str, LiteralString]:
    text = resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    return parse(text)


QUERIES: dict[str, LiteralString] = _load()


def q(name: str) -> LiteralString:
    """The statement called ``name``; a KeyError names the missing block."""
    return QUERIES[name]

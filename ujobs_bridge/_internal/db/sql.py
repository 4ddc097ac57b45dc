"""Loads a package's ``sql/*.sql`` files into a name → statement mapping; the only source of SQL.

Why it exists: every statement a package runs lives in its ``db/sql/`` folder, one file per
domain, each statement under a ``-- name --`` header a reviewer can read top to bottom. This
loader refuses a duplicate or malformed name at import (within a file or across a package's
files), so a typo fails the first test rather than a production call. ``celery_compat.db`` and
``migrate.db`` load their own folders with it.

What it is not: a query builder. Nothing here concatenates or formats SQL; statements are loaded
verbatim and vouched for as ``LiteralString`` because they ship with the package.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString

_HEADER = re.compile(r"^-- ([a-z0-9_]+) --$", re.MULTILINE)


def parse(text: str) -> dict[str, LiteralString]:
    """Split a ``.sql`` file's text into named statements."""
    found: dict[str, LiteralString] = {}
    matches = list(_HEADER.finditer(text))
    for index, match in enumerate(matches):
        name = match.group(1)
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end]
        lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
        statement = "\n".join(lines).strip()
        if not statement:
            raise ValueError(f"block {name!r} has no statement")
        if name in found:
            raise ValueError(f"block {name!r} is defined twice")
        # The file ships with the package: we vouch for it as a literal.
        found[name] = statement  # shipped with the package: vouched for as a literal
    return found


def load_folder(package: str) -> dict[str, LiteralString]:
    """Every named statement of ``package``'s ``sql/`` folder; a name defined twice is refused."""
    found: dict[str, LiteralString] = {}
    folder = resources.files(package).joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, statement in parse(entry.read_text(encoding="utf-8")).items():
            if name in found:
                raise ValueError(f"{entry.name}: block {name!r} is defined twice")
            found[name] = statement
    return found


QUERIES: dict[str, LiteralString] = load_folder(__package__ or "ujobs_bridge._internal.db")


def q(name: str) -> LiteralString:
    """The statement called ``name``; a KeyError names the missing block."""
    return QUERIES[name]

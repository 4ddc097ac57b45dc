"""Each schema part's current shape, ``db/current_schema.sql`` beside its ``migrations/``,
generated from the migrations themselves by ``pg_dump``.

Why it exists: a maintainer should read one file to know what a package's tables, indexes and
functions are now, not replay its migrations in their heads. The file is generated, never edited:
``ujobs-bridge db schema --write`` applies the parts one after the other to a scratch database
(the engine's, then each contributed part with the parts it requires) and gives each part the
objects its migrations added or changed, as ``pg_dump --schema-only`` prints them (no owners, no
grants, no server preamble); ``--check`` and the test suite fail while a file is stale.

What it is not: an input to anything. The migrations are the schema; nothing applies or parses
these files. It does not diff two live databases either (tests/test_schema_parts.py does that
with ``pg_dump`` text).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ujobs_bridge._internal.db import connections, schema
from ujobs_bridge._internal.db import testing as testing_db
from ujobs_bridge.errors import ErrorCode, SchemaError

PG_DUMP_ENV = "UJOBS_PG_DUMP"
FILE_NAME = "current_schema.sql"
SCRATCH_PREFIX = "ujb_schema_dump"
ADMIN_ROLE = connections.Role("schema:dump")

# pg_dump's entries: a three-line comment naming the object, then its statements.
_ENTRY = re.compile(r"^--\n-- (Name: [^\n]*?)(?:; Owner: [^\n]*)?\n--\n", re.MULTILINE)
# What is about the session or the dump, not the schema (the security key of \restrict changes
# with every run).
_NOISE = re.compile(
    r"^(SET |SELECT pg_catalog\.set_config\(|\\restrict |\\unrestrict |-- PostgreSQL database dump|--$)"
)


@dataclass(frozen=True, slots=True)
class PartSchema:
    """``part``'s current shape as its file holds it, and where that file is."""

    part: str
    path: Path
    text: str

    def stale(self) -> bool:
        return not self.path.exists() or self.path.read_text(encoding="utf-8") != self.text


def pg_dump(dsn: str, *options: str) -> str:
    """``pg_dump --schema-only --no-owner`` of ``dsn`` (plus ``options``), without the lines
    that differ from one run to the next (``\\restrict`` keys)."""
    program = os.environ.get(PG_DUMP_ENV) or shutil.which("pg_dump")
    if program is None:
        raise SchemaError(
            "pg_dump is not on PATH",
            code=ErrorCode.SCHEMA_DUMP_FAILED,
            hint=f"install PostgreSQL's client programs (postgresql-client), or set {PG_DUMP_ENV}"
            " to the pg_dump of the server's major version",
        )
    done = subprocess.run(
        [program, "--schema-only", "--no-owner", *options, "--dbname", dsn],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise SchemaError(
            f"pg_dump failed: {done.stderr.strip()}",
            code=ErrorCode.SCHEMA_DUMP_FAILED,
            hint=f"use a pg_dump at least as new as the server (set {PG_DUMP_ENV})",
        )
    return "\n".join(
        line
        for line in done.stdout.splitlines()
        if not line.startswith(("\\restrict ", "\\unrestrict "))
    )


def entries(dump: str) -> dict[str, str]:
    """A plain ``pg_dump`` split into its objects: ``Name: ...; Type: ...`` -> its statements."""
    found: dict[str, str] = {}
    matches = list(_ENTRY.finditer(dump))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(dump)
        lines = [line for line in dump[match.end() : end].splitlines() if not _NOISE.match(line)]
        found[match.group(1)] = "\n".join(lines).strip()
    return found


def _scratch_dsn(server_dsn: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_dsn)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items()})


def _render(part: schema.MigrationSet, objects: list[tuple[str, str]]) -> str:
    last = schema.migrations_of(part)[-1]
    head = [
        f"-- The current shape of schema part `{part.name}`: what its migrations (migrations/,",
        f"-- through {last.version:04d}_{last.name}) leave, as pg_dump prints it (no owners, no grants).",
        "-- Generated: do not edit. After adding a migration run `ujobs-bridge db schema --write`",
        "-- (tests/test_schema_parts.py fails while this file is stale). The why is in the migrations.",
    ]
    if part.name != schema.ENGINE:
        head.append(
            "-- Objects of an earlier part that this part changes appear here whole, as changed."
        )
    body = [f"\n-- {key}\n{text}\n" for key, text in objects]
    return "\n".join(head) + "\n" + "".join(body)


def generate(server_dsn: str, parts: Iterable[str] | None = None) -> list[PartSchema]:
    """Each chosen part's file as its migrations make it now, built on a scratch database that
    this call creates on ``server_dsn``'s server and drops."""
    every = schema.sets(parts)  # the chosen parts and those they require, in order
    chosen = set(parts) if parts is not None else {s.name for s in every}
    name = f"{SCRATCH_PREFIX}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    dsn = _scratch_dsn(server_dsn, name)
    with connections.connect(server_dsn, ADMIN_ROLE) as admin:
        testing_db.database_create(admin, name)
    try:
        made: list[PartSchema] = []
        before: dict[str, str] = {}
        for part in every:
            schema.upgrade(dsn, [part.name])
            now = entries(pg_dump(dsn, "--no-privileges"))
            added = [(key, text) for key, text in now.items() if before.get(key) != text]
            before = now
            if part.name in chosen:
                made.append(
                    PartSchema(part.name, part.folder.parent / FILE_NAME, _render(part, added))
                )
        return made
    finally:
        with connections.connect(server_dsn, ADMIN_ROLE) as admin:
            testing_db.database_drop(admin, name)

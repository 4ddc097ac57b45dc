"""Bench-only Postgres databases: created fresh per system and run, dropped at the end.

Why it exists: the raw loop and ujobs-bridge must each start from an empty database that nobody
else uses (no leftover rows, bloat or locks from another run), and must never touch an existing
database. Names carry the run id (``ujb_bench_<pid>_<rand>_<system>``); ``drop`` forces other
sessions out so a killed worker cannot keep one alive.

What it is not: schema management. Each system installs its own tables.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .settings import PG_ADMIN_DSN

CONNECT_TIMEOUT_S = 10
# The bench's own sessions never wait forever on a lock or a statement (a wedged worker backend).
BENCH_SESSION_OPTIONS = "-c lock_timeout=30s -c statement_timeout=600s"


def dsn_for(dbname: str) -> str:
    info: dict[str, Any] = conninfo_to_dict(PG_ADMIN_DSN)
    info["dbname"] = dbname
    info.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    return make_conninfo(**{k: str(v) for k, v in info.items()})


def url_for(dbname: str) -> str:
    """The same database as a ``postgresql://`` URL (for command lines that want one)."""
    info: dict[str, Any] = conninfo_to_dict(dsn_for(dbname))
    user = info.get("user", "postgres")
    password = f":{info['password']}" if info.get("password") else ""
    host = info.get("host", "127.0.0.1")
    port = info.get("port", "5432")
    return f"postgresql://{user}{password}@{host}:{port}/{dbname}"


def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A bench-side session (never a worker's): bounded connect, lock waits and statements."""
    return psycopg.connect(
        dsn,
        autocommit=autocommit,
        connect_timeout=CONNECT_TIMEOUT_S,
        options=BENCH_SESSION_OPTIONS,
    )


def _admin() -> psycopg.Connection[Any]:
    return psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)


def create(dbname: str) -> str:
    with _admin() as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(dbname)))
    return dsn_for(dbname)


def drop(dbname: str) -> None:
    with _admin() as conn:
        conn.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(dbname))
        )


def server_version() -> str:
    with _admin() as conn:
        row = conn.execute("show server_version").fetchone()
    return str(row[0]) if row else "?"


def empty_jobs(conn: psycopg.Connection[Any], *more: str) -> None:
    """Empty the job tables between cells: ``x_jobs`` and what references it, and the two tables
    the engine keeps beside it by trigger and by claim, which no foreign key cascades to (the
    claimable rows, the leases). A truncate fires no row trigger, so emptying ``x_jobs`` alone
    left every claimable row of the jobs it removed, and the next cell's claims scanned past
    them. ``more``: other tables of the cell's own (celery_compat's)."""
    tables = ["x_jobs", "x_job_claimable", "x_job_leases", *more]
    conn.execute(
        sql.SQL("truncate {} cascade").format(sql.SQL(", ").join(map(sql.Identifier, tables)))
    )

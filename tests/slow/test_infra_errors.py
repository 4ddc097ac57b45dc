"""An infrastructure error is never taken for poison data (a connection's state, not the data's).

Why it exists: outcome batches are split in halves to isolate an item the database refuses, and a
batch that fails for the connection's sake (a prepared statement the server session does not
have, or already has: what a transaction-mode PgBouncer does to psycopg's automatic prepared
statements when nobody said ``--pgbouncer``) was split as if one of its rows were poison. Here:
the classifier (``connections.connection_state``) on errors raised for real by a server, and
real worker processes through a real transaction-mode PgBouncer started WITHOUT ``--pgbouncer``:
every job is done, nothing is isolated, and each worker names the fix exactly once. That poison
data is still isolated is ``tests/slow/test_outages.py`` and ``tests/unit/test_outcome_writes.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_proc import CliProc

from conftest import CI, wait_for
from ujobs_bridge._internal.db.connections import connection_state, transient
from ujobs_bridge.errors import DatabaseUnavailableError
from ujobs_bridge.testing.pgbouncer import PgBouncer

Db = psycopg.Connection[Any]


def _raised(db: Db, *statements: str) -> psycopg.Error:
    """The error the server raises for the last of ``statements``."""
    *before, last = statements
    for sql in before:
        db.execute(sql)
    with pytest.raises(psycopg.Error) as caught:
        db.execute(last)
    return caught.value


# ---------------------------------------------------------------------- the classifier


def test_missing_or_duplicate_prepared_statement_is_the_connections_state(db: Db) -> None:
    missing = _raised(db, "execute ujobs_never_prepared")
    assert missing.sqlstate == "26000"
    deallocated = _raised(db, "deallocate ujobs_never_prepared")
    assert deallocated.sqlstate == "26000"
    twice = _raised(db, "prepare ujobs_twice as select 1", "prepare ujobs_twice as select 2")
    assert twice.sqlstate == "42P05"
    for exc in (missing, deallocated, twice):
        assert connection_state(exc), exc
        assert not transient(exc), "not an outage: the connection is fine, its session is not"


def test_the_datas_own_errors_are_not_the_connections_state(db: Db) -> None:
    db.execute("create temporary table ujobs_checked (n int check (n > 0), s varchar(1))")
    check = _raised(db, "insert into ujobs_checked values (-1)")
    assert isinstance(check, psycopg.errors.CheckViolation)
    nul = _raised(db, "select '\\u0000'::jsonb")
    too_long = _raised(db, "insert into ujobs_checked (s) values ('xy')")
    bad_number = _raised(db, "select 'x'::int")
    for exc in (check, nul, too_long, bad_number):
        assert isinstance(exc, psycopg.errors.DataError | psycopg.errors.IntegrityError), exc
        assert not connection_state(exc), exc
    assert not connection_state(ValueError("not a database error"))


def test_an_outage_counts_as_not_the_datas_fault(db: Db, dsn: str) -> None:
    victim = psycopg.connect(dsn, autocommit=True)
    pid = victim.info.backend_pid
    db.execute("select pg_terminate_backend(%s)", (pid,))
    with pytest.raises(psycopg.OperationalError) as caught:
        victim.execute("select 1")
    victim.close()
    assert transient(caught.value) and connection_state(caught.value)


# ---------------------------------------------------------------------- workers, no --pgbouncer


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    try:
        found = PgBouncer(pool_size=3)
    except DatabaseUnavailableError as exc:
        if CI:
            raise
        pytest.skip(str(exc))
    with found:
        yield found


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Callable[..., CliProc]]:
    started: list[CliProc] = []

    def start(args: list[str], **env: str) -> CliProc:
        proc = CliProc(args, tmp_path / f"proc{len(started)}.log", env=env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(f"--- {' '.join(proc.args[:3])} (exit {proc.proc.returncode}) ---")
        print(proc.output()[-3000:])


def _states(db: Db) -> dict[str, int]:
    rows = db.execute("select state, count(*) from x_jobs group by state").fetchall()
    return {str(state): int(n) for state, n in rows}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_workers_through_an_undeclared_bouncer_isolate_nothing_and_name_the_fix(
    db: Db,
    dsn: str,
    bouncer: PgBouncer,
    procs: Callable[..., CliProc],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from apps.budget_jobs import noop
    from ujobs_bridge import connect

    monkeypatch.delenv("UJOBS_PGBOUNCER", raising=False)
    monkeypatch.delenv("UJOBS_LISTEN_URL", raising=False)
    through = bouncer.dsn(str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]))
    total = 600
    args = ["worker", "-A", "apps.budget_jobs", "-Q", "budget", "-c", "4", "--dsn", through]
    workers = [procs([*args, "--poll", "0.2"]) for _ in range(4)]
    wait_for(lambda: all(" ready:" in p.output() for p in workers), timeout=60, what="the workers")
    with connect(dsn, upgrade=False) as client:  # directly: the producer is not under test
        client.enqueue_many(noop.call(i) for i in range(total))
    wait_for(lambda: _states(db) == {"done": total}, timeout=150, what="every job to be done")
    outputs = dict(db.execute("select (input->'args'->>0)::int, output from x_jobs").fetchall())
    assert outputs == {i: i for i in range(total)}
    for proc in workers:
        log = proc.output()
        assert "outcomes_refused" not in log and "isolating" not in log, log[-3000:]
        assert "outcome_refused" not in log and "outcome_sanitized" not in log, log[-3000:]
        named = re.findall(r"ujobs\.db\.pgbouncer_detected: .*", log)
        assert len(named) == 1, log[-3000:]
        assert "--pgbouncer" in named[0] and "UJOBS_PGBOUNCER=1" in named[0], named[0]

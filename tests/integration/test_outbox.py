"""The transactional outbox: staged in the caller's transaction, relayed in order, exactly once.

Why it exists: a job enqueued beside a business write must exist exactly when that write
commits, never before and never twice. A staged row exists only if the caller's
transaction commits; the relay turns rows into jobs in id order, a failure stops the batch (a
later row never overtakes an earlier one), and a relay killed between publishing row k and
marking it publishes nothing twice after a restart, in one database (publish and mark are one
transaction) and across two (the job id is the row's, so a second insert does nothing, even
when the first job already finished). ``ujobs-bridge outbox relay`` runs as a real subprocess
for the kill and SIGTERM tests; the source database of the cross-database case is a second
database made like conftest's (pid + random name) and dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_proc import CliProc

from apps.outbox_jobs import deliver
from conftest import ADMIN_DSN, _dsn_for, wait_for
from ujobs_bridge import stage
from ujobs_bridge._internal import faults
from ujobs_bridge._internal.db import schema
from ujobs_bridge._internal.outbox.relay import OutboxRelay

pytestmark = [pytest.mark.timeout(120)]
Db = psycopg.Connection[Any]
ROWS = 10


@pytest.fixture(scope="module")
def second_dsn(pg_dsn: str) -> Iterator[str]:
    """A second database (an application's own) holding the outbox; the jobs stay in pg_dsn."""
    name = f"ujb_test_src_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    ident = psycopg.sql.Identifier(name)
    with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
        admin.execute(psycopg.sql.SQL("create database {}").format(ident))
    dsn = _dsn_for(name)
    schema.upgrade(dsn)
    try:
        yield dsn
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as admin:
            admin.execute(psycopg.sql.SQL("drop database if exists {} with (force)").format(ident))


@pytest.fixture
def source_for(dsn: str, second_dsn: str) -> Callable[[str], str]:
    """'same' -> the jobs database; 'cross' -> the second one. Both outboxes start empty."""
    for each in (dsn, second_dsn):
        with psycopg.connect(each, autocommit=True) as conn:
            conn.execute("truncate x_outbox restart identity")
            conn.execute("truncate x_jobs, x_job_steps, x_job_events")
    return lambda mode: dsn if mode == "same" else second_dsn


@pytest.fixture
def relays(dsn: str, tmp_path: Path) -> Iterator[Callable[..., CliProc]]:
    started: list[CliProc] = []

    def start(source: str, *, batch: int, faults: str = "") -> CliProc:
        log = tmp_path / f"relay{len(started)}.log"
        args = [
            "outbox",
            "relay",
            "--source",
            source,
            "--dsn",
            dsn,
            "--batch",
            str(batch),
            "--interval",
            "0.1",
        ]
        proc = CliProc(args, log, faults=faults)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
    for proc in started:
        print(f"--- relay {proc.pid} (exit {proc.proc.returncode}) ---\n{proc.output()[-3000:]}")


def stage_rows(source: str, count: int = ROWS) -> list[uuid.UUID]:
    """``count`` rows, each staged in its own committed transaction, in order."""
    ids = []
    with psycopg.connect(source) as conn:
        for seq in range(1, count + 1):
            with conn.transaction():
                ids.append(stage(conn, deliver.call(seq)).job_id)
    return ids


def published(source: str) -> list[int]:
    with psycopg.connect(source, autocommit=True) as conn:
        return [
            r[0]
            for r in conn.execute(
                "select id from x_outbox where published_at is not null order by id"
            )
        ]


def jobs(dsn: str) -> list[tuple[uuid.UUID, int, datetime]]:
    """(job id, seq, created_at) of every deliver job, by seq."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select id, (input->'args'->>0)::int as seq, created_at from x_jobs where name = %s"
            " order by seq, created_at",
            (deliver.name,),
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def seqs(dsn: str) -> list[int]:
    return [seq for _, seq, _ in jobs(dsn)]


def assert_one_job_per_row_in_order(dsn: str, source: str, staged: list[uuid.UUID]) -> None:
    made = jobs(dsn)
    assert [seq for _, seq, _ in made] == list(range(1, ROWS + 1))  # one each, none twice
    assert [job_id for job_id, _, _ in made] == staged  # the job of row i is the one row i staged
    created = [at for _, _, at in made]
    assert created == sorted(created), "the job of a row was created before the previous row's"
    assert published(source) == list(range(1, ROWS + 1))


def test_a_staged_row_exists_only_if_the_callers_transaction_commits(
    dsn: str, source_for: Callable[[str], str]
) -> None:
    source = source_for("cross")
    with psycopg.connect(source) as conn:
        with pytest.raises(RuntimeError), conn.transaction():
            stage(conn, deliver.call(99))
            raise RuntimeError("the caller's work failed")
        with conn.transaction():
            conn.execute("create temp table if not exists orders (id int)")
            conn.execute("insert into orders values (1)")
            kept = stage(conn, deliver.call(1))
    relay = OutboxRelay(source, target_dsn=dsn)
    try:
        assert relay.tick() == 1 and relay.tick() == 0
    finally:
        relay.stop()  # closes its connection
    assert [(job_id, seq) for job_id, seq, _ in jobs(dsn)] == [(kept.job_id, 1)]


def test_a_failed_publish_stops_the_batch_and_later_rows_wait(
    dsn: str, source_for: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = source_for("cross")
    staged = stage_rows(source)
    # Row 4's insert commits in the jobs database, but the relay sees an error (ambiguous publish).
    monkeypatch.setattr(faults, "_ARMED", faults._parse("outbox.after_publish=exec_then_raise@4"))
    relay = OutboxRelay(source, target_dsn=dsn, batch=ROWS)
    try:
        assert relay.tick() == 3
        assert published(source) == [1, 2, 3]
        assert seqs(dsn) == [1, 2, 3, 4]  # rows 5..10 did not overtake row 4
        assert relay.tick() == 7  # row 4 again (its job is there: nothing inserted), the rest
    finally:
        relay.stop()  # closes its connection
    assert_one_job_per_row_in_order(dsn, source, staged)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "batch", "k"),
    [("same", 1, 4), ("same", ROWS, 1), ("cross", ROWS, 4), ("cross", 3, 7)],
    ids=[
        "same-db-row-by-row-kill@4",
        "same-db-one-batch-kill",
        "cross-db-kill@4",
        "cross-db-batch3-kill@7",
    ],
)
def test_a_relay_killed_between_publish_and_mark_publishes_nothing_twice(
    dsn: str,
    source_for: Callable[[str], str],
    relays: Callable[..., CliProc],
    mode: str,
    batch: int,
    k: int,
) -> None:
    source = source_for(mode)
    staged = stage_rows(source)
    first = relays(source, batch=batch, faults=f"outbox.after_publish=kill@{k}")
    assert first.wait(timeout=30) == -9, first.output()
    done_before = published(source)
    made_before = seqs(dsn)
    if mode == "same":  # publish and mark are one transaction: the killed batch left nothing
        assert made_before == done_before == list(range(1, (k - 1) * batch + 1))
    else:  # rows up to k went out; those of the killed batch are not marked
        assert made_before == list(range(1, k + 1))
        assert done_before == list(range(1, (k - 1) // batch * batch + 1))

    second = relays(source, batch=batch)
    wait_for(
        lambda: len(published(source)) == ROWS,
        timeout=30,
        what="every row published after the restart",
    )
    second.term()
    assert second.wait(timeout=20) == 0, second.output()
    assert_one_job_per_row_in_order(dsn, source, staged)


@pytest.mark.slow
def test_a_row_whose_job_finished_before_the_restart_is_not_published_again(
    dsn: str, source_for: Callable[[str], str], relays: Callable[..., CliProc]
) -> None:
    source = source_for("cross")
    staged = stage_rows(source)
    first = relays(source, batch=ROWS, faults="outbox.after_publish=kill@5")
    assert first.wait(timeout=30) == -9, first.output()
    with psycopg.connect(dsn, autocommit=True) as conn:  # a worker ran job 2 meanwhile
        conn.execute(
            "update x_jobs set state = 'done', finished_at = now() where id = %s", (staged[1],)
        )
    second = relays(source, batch=ROWS)
    wait_for(
        lambda: len(published(source)) == ROWS,
        timeout=30,
        what="the relay to get past the finished job's row",
    )
    second.term()
    assert second.wait(timeout=20) == 0, second.output()
    assert_one_job_per_row_in_order(dsn, source, staged)


@pytest.mark.slow
def test_sigterm_finishes_the_batch_in_hand_then_exits_0(
    dsn: str, source_for: Callable[[str], str], relays: Callable[..., CliProc]
) -> None:
    source = source_for("cross")
    staged = stage_rows(source)
    relay = relays(source, batch=ROWS, faults="outbox.after_publish=sleep:1500@3")
    wait_for(lambda: len(jobs(dsn)) == 3, timeout=30, what="the relay to be mid-batch")
    relay.term()
    assert relay.wait(timeout=20) == 0, relay.output()
    assert "published=10" in relay.output()
    assert_one_job_per_row_in_order(dsn, source, staged)


def test_a_long_transaction_in_another_database_does_not_stall_the_relay(
    dsn: str, source_for: Callable[[str], str]
) -> None:
    """xids are cluster-wide, but a transaction of another database cannot write this outbox:
    one left open there (holding an xid older than every row) does not hold the relay back."""
    source, elsewhere = source_for("same"), source_for("cross")
    with psycopg.connect(elsewhere) as other:
        other.execute("select pg_current_xact_id()")  # an xid, held open until the block ends
        staged = stage_rows(source)
        relay = OutboxRelay(source)
        try:
            assert relay.tick() == ROWS
        finally:
            relay.stop()
        assert other.info.transaction_status is psycopg.pq.TransactionStatus.INTRANS
    assert_one_job_per_row_in_order(dsn, source, staged)


def test_an_open_transaction_in_the_same_database_still_holds_later_rows_back(
    dsn: str, source_for: Callable[[str], str]
) -> None:
    """Row 1 is staged in a transaction still open while rows 2.. commit: nothing after it is
    published before it (a later row never overtakes an earlier one), then all, in order."""
    source = source_for("same")
    relay = OutboxRelay(source)
    try:
        with psycopg.connect(source) as slow:
            first = stage(slow, deliver.call(1)).job_id  # its transaction stays open
            staged = [first]
            with psycopg.connect(source) as conn:
                for seq in range(2, ROWS + 1):
                    with conn.transaction():
                        staged.append(stage(conn, deliver.call(seq)).job_id)
            assert relay.tick() == 0
            assert published(source) == []
            slow.commit()
        assert relay.tick() == ROWS
    finally:
        relay.stop()
    assert_one_job_per_row_in_order(dsn, source, staged)

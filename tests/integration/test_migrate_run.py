"""Drained messages RUN on the bridge the way Celery would have run them: protocol v1 messages
decoded and run once; already-expired messages recorded as expired (REVOKED) and never run; a
chain continuing on the bridge with the right arguments; the same message twice is one row while
a Celery retry of the same id is a new one; a chord part whose state lives in the old result
backend is quarantined, not run into a chord that can never complete."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import migrate_support as ms
import pytest
import redis
from celery import chain, chord, states
from celery.result import AsyncResult
from migrate_support import qdsn, queue, r  # noqa: F401 - shared fixtures

from apps import migrate_proj
from apps.celery_harness import body_of
from conftest import wait_for


@pytest.fixture(scope="module", autouse=True)
def _close_backend() -> Iterator[None]:
    yield
    migrate_proj.app.backend.close()  # its LISTEN connection must not outlive the database


def states_of(dsn: str) -> dict[str, str]:
    return {row["task_id"]: row["state"] for row in ms.rows(dsn)}


def test_protocol_v1_messages_are_converted_and_run_once_with_their_callbacks(
    qdsn: str, queue: str
) -> None:
    with ms.producer(ms.REDIS_URL, queue, task_protocol=1) as p:
        plain = p.record.delay("v1-plain").id
        linked = p.add.apply_async((2, 3), link=p.mul.s(10)).id
        later = p.record.apply_async(("v1-later",), eta=datetime(2031, 1, 1, tzinfo=UTC)).id

    stats = ms.drain(qdsn, ms.REDIS_URL, [queue])
    assert stats.outcomes["moved"] == 3 and not stats.reasons
    rows = {row["task_id"]: row for row in ms.rows(qdsn)}
    assert rows[later]["run_at"] == datetime(2031, 1, 1, tzinfo=UTC)
    headers = rows[plain]["input"]["headers"]
    assert (headers["task"], headers["id"], headers["retries"]) == ("migrate_proj.record", plain, 0)
    assert body_of(rows[linked])["embed"]["callbacks"][0]["task"] == "migrate_proj.mul"

    with ms.bridge_worker(qdsn, (queue, "celery")):
        wait_for(
            lambda: states_of(qdsn).get(linked) == "done" and len(states_of(qdsn)) == 4,
            timeout=20,
            what="the v1 message and its callback to run",
        )
        wait_for(lambda: states_of(qdsn).get(plain) == "done", timeout=20, what="v1 plain")
    assert migrate_proj.RAN == {"record:v1-plain": 1, "add(2, 3)": 1, "mul(5, 10)": 1}
    assert states_of(qdsn)[later] == "ready"


def test_already_expired_messages_are_recorded_revoked_and_never_run(qdsn: str, queue: str) -> None:
    past = datetime.now(UTC) - timedelta(minutes=5)
    with ms.producer(ms.REDIS_URL, queue) as p:
        expired = [p.record.apply_async((f"stale{i}",), expires=past).id for i in range(3)]
        expired.append(
            p.record.apply_async(
                ("stale-eta",), expires=past, eta=datetime(2031, 1, 1, tzinfo=UTC)
            ).id
        )
        p.record.apply_async(("fresh",), expires=3600)

    stats = ms.drain(qdsn, ms.REDIS_URL, [queue])
    assert (stats.outcomes["expired"], stats.outcomes["moved"]) == (4, 1)

    with ms.bridge_worker(qdsn, (queue,)):
        wait_for(
            lambda: (
                set(states_of(qdsn).values()) == {"cancelled", "done"}
                and list(states_of(qdsn).values()).count("cancelled") == 4
            ),
            timeout=20,
            what="expired rows cancelled at claim",
        )
        for task_id in expired:  # read while the app is bound to the test database
            assert AsyncResult(task_id, app=migrate_proj.app).state == states.REVOKED
    assert migrate_proj.RAN == {"record:fresh": 1}, "no expired body ran"


def test_a_drained_chain_continues_on_the_bridge_with_the_right_arguments(
    qdsn: str, queue: str
) -> None:
    with ms.producer(ms.REDIS_URL, queue) as p:
        last = chain(p.add.s(2, 3), p.mul.s(10), p.mul.s(3)).apply_async()
        first_id = last.parent.parent.id
    ms.drain(qdsn, ms.REDIS_URL, [queue])
    assert [row["task_id"] for row in ms.rows(qdsn)] == [first_id]

    with ms.bridge_worker(qdsn, (queue, "celery")):
        assert AsyncResult(last.id, app=migrate_proj.app).get(timeout=20) == 150
    assert migrate_proj.RAN == {"add(2, 3)": 1, "mul(5, 10)": 1, "mul(50, 3)": 1}


def test_same_message_twice_is_one_row_and_a_celery_retry_of_the_same_id_is_another(
    qdsn: str, queue: str
) -> None:
    task_id = str(uuid.uuid4())
    with ms.producer(ms.REDIS_URL, queue) as p:
        p.record.apply_async(("dup",), task_id=task_id)
        p.record.apply_async(("dup",), task_id=task_id)  # a duplicate publish
        p.record.apply_async(("dup",), task_id=task_id, retries=1)  # what self.retry() sends
        p.record.apply_async(("other",), task_id=task_id)  # same key, different arguments
    stats = ms.drain(qdsn, ms.REDIS_URL, [queue])
    assert (stats.outcomes["moved"], stats.outcomes["duplicate"]) == (2, 1)
    (conflict,) = ms.quarantined(qdsn)
    assert (conflict["reason"], conflict["task_id"]) == ("duplicate_conflict", task_id)
    assert sorted((row["task_id"], row["retries"]) for row in ms.rows(qdsn)) == [
        (task_id, 0),
        (task_id, 1),
    ]
    again = ms.drain(qdsn, ms.REDIS_URL, [queue])  # nothing left; a re-drain adds nothing
    assert again.taken == 0 and len(ms.rows(qdsn)) == 2


def test_chord_parts_whose_state_lives_in_the_old_backend_are_quarantined(
    qdsn: str, r: redis.Redis, queue: str
) -> None:
    with ms.producer(ms.REDIS_URL, queue, result_backend=ms.REDIS_URL) as p:
        result: Any = chord([p.add.s(1, 1), p.add.s(2, 2)])(p.record.s())
        group_id = result.parent.id if result.parent is not None else None
        p.record.delay("plain")
        p.app.backend.client.connection_pool.disconnect()  # the old backend's sockets
    try:
        stats = ms.drain(qdsn, ms.REDIS_URL, [queue])
        assert stats.reasons == {"chord_unrecoverable": 2} and stats.outcomes["moved"] == 1
        parts = [e for e in ms.quarantined(qdsn) if e["reason"] == "chord_unrecoverable"]
        assert {e["task"] for e in parts} == {"migrate_proj.add"}
        assert all(group_id is None or group_id in e["detail"] for e in parts)
    finally:
        for key in r.scan_iter(match="celery-task*-meta-*"):
            if group_id and group_id in key.decode():
                r.delete(key)


def test_accept_pickle_decodes_pickle_bodies_and_says_what_it_trusts(qdsn: str, queue: str) -> None:
    from click.testing import CliRunner

    from ujobs_bridge._internal.cli import cli

    with ms.producer(ms.REDIS_URL, queue, accept_content=["json", "pickle"]) as p:
        pickled = p.add.apply_async((1, 2), serializer="pickle").id
    result = CliRunner().invoke(
        cli,
        [
            "migrate",
            "-A",
            "apps.migrate_proj",
            "--broker",
            ms.REDIS_URL,
            "-Q",
            queue,
            "--accept-pickle",
            "--json",
            "--dsn",
            qdsn,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "--accept-pickle unpickles message bodies" in result.stderr
    assert "anyone who could write to this broker can run code here" in " ".join(
        result.stderr.split()
    )
    (row,) = ms.rows(qdsn)
    assert (row["task_id"], body_of(row)["args"]) == (pickled, [1, 2])


@pytest.fixture
def logging_restored() -> Iterator[None]:
    """The command sets up the process's logging (JSON lines on CliRunner's stream): put back
    what the test process had."""
    import logging

    from ujobs_bridge._internal.observe import logs

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)
    logs._Chosen.format = "text"


def test_with_log_format_json_every_line_the_drain_prints_is_one_json_object(
    qdsn: str, queue: str, logging_restored: None
) -> None:
    import json

    from click.testing import CliRunner

    from ujobs_bridge._internal.cli import cli

    with ms.producer(ms.REDIS_URL, queue) as p:
        p.add.delay(1, 2)
    args = ["migrate", "-A", "apps.migrate_proj", "--broker", ms.REDIS_URL, "-Q", queue]
    result = CliRunner().invoke(
        cli, [*args, "--log-format", "json", "--dsn", qdsn], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in (result.stdout + result.stderr).splitlines()]
    assert all(isinstance(line, dict) and "message" in line for line in lines), lines
    said = [str(line["message"]) for line in lines]
    assert any(m.startswith("database: ") for m in said)
    assert any(m.startswith("draining ") for m in said)
    (report,) = [line["report"] for line in lines if line["message"] == "migrate report"]
    assert (report["taken"], report["moved"]) == (1, 1)

"""Hostile values inside otherwise well-formed Celery messages: a real ``ujobs-bridge migrate``
process quarantines each one with its reason, moves every good message once, and exits 0; a
second run (a restart) has nothing left to choke on.

Each poison is one the database (or Python) cannot take as it is: a NUL in the arguments, the
task name or the task id; a lone surrogate; ``retries`` of ``1e400`` or ``10**20``; a task id
too large for the ledger's index; an envelope nested past the interpreter's recursion limit.
Redis messages are written as kombu's envelope byte for byte (so values Python's ``json`` would
never write appear verbatim); RabbitMQ messages are published with py-amqp. Good messages are
sent by real Celery in between.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import amqp
import migrate_support as ms
import psycopg
import pytest
import redis
from migrate_support import qdsn  # noqa: F401 - shared fixture

from apps.celery_harness import body_of
from migrate.batch import Context, Taken, commit_prepared, prepare
from migrate.decoding import Accept
from ujobs_bridge.testing import redis_url

TESTS_DIR = Path(__file__).resolve().parents[1]
REDIS_URL = redis_url(5)
TASK = "migrate_proj.record"


def _id() -> str:
    return str(uuid.uuid4())


def _headers_text(task: str = f'"{TASK}"', task_id: str | None = None, retries: str = "0") -> str:
    """v2 headers as JSON text; each argument is JSON text, inserted verbatim."""
    tid = task_id or json.dumps(_id())
    return (
        f'{{"lang":"py","task":{task},"id":{tid},"root_id":{tid},"parent_id":null,'
        f'"retries":{retries},"eta":null,"expires":null,"group":null,"argsrepr":"()",'
        f'"kwargsrepr":"{{}}","origin":"test"}}'
    )


def _redis_raw(queue: str, body: str, headers: str) -> bytes:
    """kombu's Redis envelope around ``body`` (JSON text), with ``headers`` (JSON text)."""
    encoded = base64.b64encode(body.encode("utf-8")).decode()
    return (
        f'{{"body":"{encoded}","content-encoding":"utf-8","content-type":"application/json",'
        f'"headers":{headers},"properties":{{"correlation_id":"{_id()}","delivery_mode":2,'
        f'"delivery_info":{{"exchange":"","routing_key":"{queue}"}},"priority":0,'
        f'"body_encoding":"base64","delivery_tag":"{_id()}"}}}}'
    ).encode()


DEEP = 100_000  # far past the recursion limit


def redis_poisons(queue: str) -> dict[str, bytes]:
    """name → raw list element."""
    ok_body = '[["x"],{},{"callbacks":null,"errbacks":null,"chain":null,"chord":null}]'
    deep_header = '{"lang":"py","task":"' + TASK + '","id":"d","x":' + "[" * DEEP + "]" * DEEP + "}"
    return {
        "nul_task": _redis_raw(queue, ok_body, _headers_text(task=f'"{TASK}\\u0000"')),
        "nul_id": _redis_raw(queue, ok_body, _headers_text(task_id='"id\\u0000x"')),
        "surrogate_id": _redis_raw(queue, ok_body, _headers_text(task_id='"\\udc00x"')),
        "retries_1e400": _redis_raw(queue, ok_body, _headers_text(retries="1e400")),
        "retries_10e20": _redis_raw(queue, ok_body, _headers_text(retries=str(10**20))),
        "long_id": _redis_raw(
            queue, ok_body, _headers_text(task_id=f'"{secrets.token_hex(4500)}"')
        ),
        "deep_envelope": _redis_raw(queue, ok_body, deep_header),
        "deep_body": _redis_raw(queue, "[" * DEEP + "]" * DEEP, _headers_text()),
    }


def amqp_poisons() -> dict[str, tuple[bytes, dict[str, Any]]]:
    """name → (body bytes, application headers)."""
    ok_body = b'[["x"],{},{"callbacks":null,"errbacks":null,"chain":null,"chord":null}]'

    def headers(**changes: Any) -> dict[str, Any]:
        tid = _id()
        base = {"lang": "py", "task": TASK, "id": tid, "root_id": tid, "retries": 0}
        return {**base, **changes}

    def v1(**fields: str) -> bytes:
        values = {"task": f'"{TASK}"', "id": json.dumps(_id()), "args": "[]", "kwargs": "{}"}
        values.update(fields)
        return ("{" + ",".join(f'"{k}":{v}' for k, v in values.items()) + "}").encode()

    return {
        "nul_task": (ok_body, headers(task=TASK + "\x00")),
        "nul_id": (ok_body, headers(id="id\x00x")),
        "surrogate_id": (ok_body, headers(id="\udc00x")),
        "surrogate_task_v1": (v1(task=f'"{TASK}\\udc00"'), {}),
        "retries_1e400": (v1(retries="1e400"), {}),
        "retries_10e20": (v1(retries=str(10**20)), {}),
        "long_id": (ok_body, headers(id=secrets.token_hex(4500))),
        "deep_body": (b"[" * DEEP + b"]" * DEEP, headers()),
    }


def _migrate(broker: str, queue: str, dsn: str, tmp_path: Path) -> tuple[int, str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    env.pop("UJOBS_DATABASE_URL", None)
    args = ["migrate", "-A", "apps.migrate_proj", "--broker", broker, "-Q", queue]
    done = subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args, "--dsn", dsn, "--json", "--batch", "7"],
        capture_output=True,
        text=True,
        env=env,
        cwd=TESTS_DIR,
        timeout=180,
    )
    return done.returncode, done.stdout, done.stderr


# What each poison is quarantined as: (reason, words of the detail).
EXPECTED = {
    "nul_task": ("malformed", "task name holds a NUL"),
    "nul_id": ("malformed", "task id holds a NUL"),
    "surrogate_id": ("malformed", "task id holds a lone surrogate"),
    "surrogate_task_v1": ("malformed", "task name holds a lone surrogate"),
    "retries_1e400": ("malformed", "cannot convert float infinity"),
    "retries_10e20": ("malformed", "retries is 100000000000000000000, out of range"),
    "long_id": ("malformed", "task id is 9000 bytes long"),
    "deep_envelope": ("malformed", "envelope nests deeper than Python can read"),
    "deep_body": ("malformed", "RecursionError"),
}


def _check(dsn: str, valid: dict[str, str], poisons: list[str], report: dict[str, Any]) -> None:
    rows = ms.rows(dsn)
    assert sorted(r["task_id"] for r in rows) == sorted(valid), "every good message, once"
    assert {body_of(r)["args"][0] for r in rows} == set(valid.values())
    entries = ms.quarantined(dsn)
    got = [(e["reason"], e["detail"]) for e in entries]
    assert len(entries) == len(poisons), got
    for name, (reason, detail) in zip(poisons, got, strict=True):  # in broker order
        assert reason == EXPECTED[name][0] and EXPECTED[name][1] in detail, (name, reason, detail)
    assert report["moved"] == len(valid) and report["quarantined"] == len(poisons)


@pytest.fixture
def door_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable: {exc}")
    queue = f"door-{uuid.uuid4().hex[:10]}"
    client.set("door-current", queue)
    yield client
    ms.clean_redis(client, queue)
    client.close()


def test_redis_poison_values_are_quarantined_and_the_drain_goes_on(
    qdsn: str, door_redis: redis.Redis, tmp_path: Path
) -> None:
    queue = door_redis.get("door-current").decode()  # type: ignore[union-attr]
    poisons = redis_poisons(queue)
    valid: dict[str, str] = {}
    with ms.producer(REDIS_URL, queue) as p:
        for name, raw in poisons.items():
            valid[p.record.delay(f"before-{name}").id] = f"before-{name}"
            door_redis.lpush(queue, raw)
        valid[p.record.delay("last").id] = "last"

    code, out, err = _migrate(REDIS_URL, queue, qdsn, tmp_path)

    assert code == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    report = json.loads(out)
    _check(qdsn, valid, list(poisons), report)
    assert door_redis.llen(queue) == 0
    assert [
        k for k in door_redis.scan_iter(match=f"*{queue}*") if door_redis.type(k) == b"list"
    ] == []

    again, out, err = _migrate(REDIS_URL, queue, qdsn, tmp_path)  # a restart: nothing left
    assert again == 0, err[-3000:]
    assert json.loads(out)["taken"] == 0


@pytest.fixture
def door_amqp() -> Iterator[tuple[amqp.Connection, Any, str]]:
    try:
        conn = ms.amqp_connection()
        conn.connect()
    except OSError as exc:
        pytest.skip(f"RabbitMQ is not reachable: {exc}")
    channel = conn.channel()
    queue = f"door-{uuid.uuid4().hex[:10]}"
    channel.queue_declare(queue, durable=True, auto_delete=False)
    yield conn, channel, queue
    channel.queue_delete(queue)
    conn.close()


def test_amqp_poison_values_are_quarantined_and_the_drain_goes_on(
    qdsn: str, door_amqp: tuple[amqp.Connection, Any, str], tmp_path: Path
) -> None:
    _, channel, queue = door_amqp
    poisons = amqp_poisons()
    valid: dict[str, str] = {}
    with ms.producer(ms.AMQP_URL, queue) as p:
        for name, (body, headers) in poisons.items():
            valid[p.record.delay(f"before-{name}").id] = f"before-{name}"
            message = amqp.Message(
                body,
                content_type="application/json",
                content_encoding="utf-8",
                application_headers=headers,
                delivery_mode=2,
            )
            channel.basic_publish(message, exchange="", routing_key=queue)
        valid[p.record.delay("last").id] = "last"

    code, out, err = _migrate(ms.AMQP_URL, queue, qdsn, tmp_path)

    assert code == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    report = json.loads(out)
    _check(qdsn, valid, list(poisons), report)
    assert report["remaining"] == 0

    again, out, err = _migrate(ms.AMQP_URL, queue, qdsn, tmp_path)
    assert again == 0, err[-3000:]
    assert json.loads(out)["taken"] == 0


def test_a_row_the_database_refuses_is_found_by_splitting_the_batch(qdsn: str) -> None:
    """A value no check before the INSERT caught (here: an input forced past them) is refused by
    Postgres itself; the batch is split until that message is alone, it is quarantined as
    ``db_rejected`` with the database's words, and the others are inserted once."""
    info = ms.app_info()
    ctx = Context(info, Accept(), REDIS_URL, "redis")
    items = [
        Taken(
            _redis_raw("door-split", f'[["m{i}"],{{}},{{}}]', _headers_text()),
            "redis",
            "door-split",
        )
        for i in range(9)
    ]
    prepared = prepare(items, ctx)
    assert len(prepared.good) == 9
    taken, decoded = prepared.good[5]
    # what jsonb refuses: a NUL escape in the headers, which are stored as jsonb
    decoded.input = decoded.input.replace('"lang":"py"', '"lang":"p\\u0000y"', 1)
    with psycopg.connect(qdsn, autocommit=True) as conn:
        results = commit_prepared(conn, prepared, ctx)
    assert sorted(r.outcome for r in results) == ["moved"] * 8 + ["quarantined"]
    rows = ms.rows(qdsn)
    assert sorted(body_of(r)["args"][0] for r in rows) == sorted(
        f"m{i}" for i in range(9) if i != 5
    )
    [entry] = ms.quarantined(qdsn)
    assert entry["reason"] == "db_rejected" and "unsupported Unicode escape" in entry["detail"]
    assert bytes(entry["raw"]) == taken.raw


def test_an_infrastructure_error_stops_the_batch_and_quarantines_nothing(qdsn: str) -> None:
    """A lost connection is not the message's fault: nothing is quarantined, the error rises."""
    info = ms.app_info()
    ctx = Context(info, Accept(), REDIS_URL, "redis")
    items = [
        Taken(_redis_raw("door-infra", '[["x"],{},{}]', _headers_text()), "redis", "door-infra")
    ]
    with (
        psycopg.connect(qdsn, autocommit=True) as conn,
        psycopg.connect(qdsn, autocommit=True) as admin,
    ):
        admin.execute("select pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            commit_prepared(conn, prepare(items, ctx), ctx)
    assert ms.quarantined(qdsn) == [] and ms.rows(qdsn) == []

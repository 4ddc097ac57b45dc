"""Poison in a Celery queue: each kind is quarantined with its reason and its raw bytes, acked,
and the valid messages behind it are drained; nothing untrusted is ever executed. Then the
operator's side: ``migrate quarantine ls | show | retry | discard`` and ``--dry-run``.

The whole module runs with ``pickle.loads``/``load``/``Unpickler`` and every non-safe YAML
loader made to raise (an exception no ``except Exception`` can swallow), and a pickle whose ``__reduce__`` would create a marker file."""

from __future__ import annotations

import base64
import json
import pickle
import uuid
import zlib
from pathlib import Path
from typing import Any

import migrate_support as ms
import pytest
import redis
import yaml
from click.testing import CliRunner
from kombu import Connection
from migrate_support import qdsn, queue, r  # noqa: F401 - shared fixtures

from apps.celery_harness import body_of
from ujobs_bridge._internal.cli import cli


class Marker:
    """Unpickling this creates ``path`` (the file must never appear)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


class UnsafeCall(BaseException):
    """Not an Exception: no ``except Exception`` in the drainer can swallow it."""


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise UnsafeCall("untrusted bytes reached an unsafe loader")


@pytest.fixture(autouse=True)
def _no_unsafe_loaders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pickle, "loads", _refuse)
    monkeypatch.setattr(pickle, "load", _refuse)
    monkeypatch.setattr(pickle, "Unpickler", _refuse)
    monkeypatch.setattr(yaml, "unsafe_load", _refuse)
    monkeypatch.setattr(yaml, "full_load", _refuse)
    for loader in (yaml.Loader, yaml.UnsafeLoader, yaml.FullLoader):  # safe_load uses SafeLoader
        monkeypatch.setattr(loader, "__init__", _refuse)


def _raw(queue: str, body: bytes, content_type: str, headers: dict[str, Any]) -> None:
    """Publish bytes Celery would never make, through kombu itself."""
    with Connection(ms.REDIS_URL) as conn:
        producer = conn.Producer()
        producer.publish(
            body,
            routing_key=queue,
            content_type=content_type,
            content_encoding="binary" if "pickle" in content_type else "utf-8",
            headers=headers,
            declare=[],
        )


def _headers(task: str = "migrate_proj.record") -> dict[str, Any]:
    task_id = str(uuid.uuid4())
    return {"lang": "py", "task": task, "id": task_id, "root_id": task_id, "retries": 0}


def publish_poison_and_valid(queue: str, marker: Path) -> dict[str, str]:
    """One of each poison kind, each followed by a valid message; returns valid id → tag."""
    valid: dict[str, str] = {}
    with ms.producer(
        ms.REDIS_URL, queue, accept_content=["json", "pickle", "msgpack", "yaml"]
    ) as p:

        def ok(tag: str, **options: Any) -> None:
            valid[p.record.apply_async((tag,), **options).id] = tag

        ok("first")
        _raw(queue, b'[["half a list", {}', "application/json", _headers())
        ok("after-bad-json")
        p.record.apply_async((Marker(str(marker)),), serializer="pickle")
        ok("after-pickle")
        _raw(
            queue,
            f'!!python/object/apply:builtins.open ["{marker}", "w"]'.encode(),
            "application/x-yaml",
            _headers(),
        )
        ok("after-yaml")
        p.app.send_task("migrate_proj.added_later", args=(7,))
        ok("after-unknown")
        p.add.delay("x" * (20 * 1024 * 1024), "")
        ok("after-20mib")
        bomb = zlib.compress(b'[["' + b"a" * (64 * 1024 * 1024) + b'"], {}, {}]', 9)
        _raw(queue, bomb, "application/json", {**_headers(), "compression": "application/x-gzip"})
        ok("after-bomb")
        ok("zlib", compression="zlib")
        ok("bzip2", compression="bzip2")
        ok("msgpack", serializer="msgpack")
        ok("yaml", serializer="yaml")
    return valid


EXPECTED_REASONS = [
    "malformed",
    "pickle_refused",
    "unsafe_yaml",
    "unknown_task",
    "too_large",
    "decompression_bomb",
]


def test_each_poison_kind_is_quarantined_with_its_reason_and_the_valid_behind_it_drained(
    qdsn: str, r: redis.Redis, queue: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    valid = publish_poison_and_valid(queue, marker)

    stats = ms.drain(qdsn, ms.REDIS_URL, [queue])

    assert not marker.exists(), "untrusted bytes ran code"
    assert sorted(ms.ledger_ids(qdsn)) == sorted(valid), "every valid message became a row"
    q = ms.quarantined(qdsn)
    assert [e["reason"] for e in q] == EXPECTED_REASONS  # in broker order
    assert dict(stats.reasons) == dict.fromkeys(EXPECTED_REASONS, 1)
    assert stats.outcomes["moved"] == len(valid)
    by_reason = {e["reason"]: e for e in q}
    assert by_reason["unknown_task"]["task"] == "migrate_proj.added_later"
    assert by_reason["too_large"]["size"] > 20 * 1024 * 1024, "raw bytes kept whole"
    envelope = json.loads(bytes(by_reason["malformed"]["raw"]))
    assert base64.b64decode(envelope["body"]) == b'[["half a list", {}'
    assert all(e["format"] == "redis" and e["seen"] == 1 for e in q)
    assert [k for k in r.scan_iter(match=f"*{queue}*") if r.type(k) == b"list"] == []
    rows = {row["task_id"]: row for row in ms.rows(qdsn)}
    assert {body_of(rows[i])["args"][0] for i in valid} == set(valid.values())

    # Drained again (a redelivery after a crash): no second row, no second entry.
    with redis.Redis.from_url(ms.REDIS_URL) as client:
        client.lpush(queue, bytes(by_reason["malformed"]["raw"]))
    again = ms.drain(qdsn, ms.REDIS_URL, [queue])
    assert again.outcomes["quarantine_seen"] == 1 and len(ms.quarantined(qdsn)) == 6


def _cli(*args: str) -> Any:
    return CliRunner(env={"COLUMNS": "200"}).invoke(cli, list(args), catch_exceptions=False)


def test_quarantine_ls_show_retry_discard(qdsn: str, queue: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with ms.producer(ms.REDIS_URL, queue, accept_content=["json", "pickle"]) as p:
        p.app.send_task("migrate_proj.added_later", args=(7,))
        p.record.apply_async((Marker(str(marker)),), serializer="pickle")
        _raw(queue, b"{nope", "application/json", _headers())
    ms.drain(qdsn, ms.REDIS_URL, [queue])

    listed = json.loads(_cli("migrate", "quarantine", "ls", "--dsn", qdsn, "--json").output)
    ids = {e["reason"]: e["id"] for e in listed["entries"]}
    assert set(ids) == {"unknown_task", "pickle_refused", "malformed"}
    assert listed["open_by_reason"] == dict.fromkeys(ids, 1)
    table = _cli("migrate", "quarantine", "ls", "--dsn", qdsn).output
    assert "unknown_task" in table and "migrate_proj.added_later" in table

    shown = json.loads(
        _cli("migrate", "quarantine", "show", str(ids["malformed"]), "--dsn", qdsn, "--json").output
    )
    assert (
        shown["reason"] == "malformed"
        and '"content-type": "application/json"' in shown["raw_preview"]
    )

    # The task now exists (a deploy): retry makes the job, marks the entry retried.
    result = _cli(
        "migrate",
        "quarantine",
        "retry",
        str(ids["unknown_task"]),
        "-A",
        "apps.migrate_proj_v2",
        "--dsn",
        qdsn,
        "--json",
    )
    retried = json.loads(result.output)
    assert result.exit_code == 0 and retried["ok"] and retried["job_id"]
    assert [row["name"] for row in ms.rows(qdsn)] == ["migrate_proj.added_later"]
    # Pickle without --accept-pickle stays quarantined (exit 1), and nothing was unpickled.
    result = _cli(
        "migrate",
        "quarantine",
        "retry",
        str(ids["pickle_refused"]),
        "-A",
        "apps.migrate_proj_v2",
        "--dsn",
        qdsn,
    )
    assert result.exit_code == 1 and "pickle_refused" in result.output
    assert not marker.exists()
    assert (
        "discarded"
        in _cli("migrate", "quarantine", "discard", str(ids["malformed"]), "--dsn", qdsn).output
    )
    again = _cli("migrate", "quarantine", "discard", str(ids["malformed"]), "--dsn", qdsn)
    assert again.exit_code == 1 and "already resolved" in again.output

    left = json.loads(_cli("migrate", "quarantine", "ls", "--dsn", qdsn, "--json").output)
    assert [e["reason"] for e in left["entries"]] == ["pickle_refused"]
    everything = json.loads(
        _cli("migrate", "quarantine", "ls", "--all", "--dsn", qdsn, "--json").output
    )
    assert {e["reason"]: e["resolution"] for e in everything["entries"]} == {
        "unknown_task": "retried",
        "pickle_refused": None,
        "malformed": "discarded",
    }


def test_dry_run_counts_per_queue_and_task_and_changes_nothing(
    qdsn: str, r: redis.Redis, queue: str
) -> None:
    with ms.producer(ms.REDIS_URL, queue) as p:
        for i in range(5):
            p.add.delay(i, i)
        p.add.apply_async((0, 0), countdown=600)
        p.add.apply_async((0, 1), eta="2031-06-01T00:00:00+00:00")
        p.record.apply_async(("late",), countdown=1200, priority=7)
        p.app.send_task("migrate_proj.added_later", args=(1,))
        _raw(queue, b"{nope", "application/json", _headers())
    before = {k: r.lrange(k, 0, -1) for k in r.scan_iter(match=f"{queue}*")}

    result = _cli(
        "migrate",
        "-A",
        "apps.migrate_proj",
        "--broker",
        ms.REDIS_URL,
        "-Q",
        queue,
        "--dry-run",
        "--json",
        "--dsn",
        qdsn,
    )

    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    assert {k: r.lrange(k, 0, -1) for k in r.scan_iter(match=f"{queue}*")} == before
    assert ms.rows(qdsn) == [] and ms.quarantined(qdsn) == []
    tasks = {t["task"]: t for t in report["per_task"]}
    assert tasks["migrate_proj.add"]["moved"] == 7
    assert tasks["migrate_proj.record"]["moved"] == 1
    assert tasks["migrate_proj.added_later"]["quarantined_by_reason"] == {"unknown_task": 1}
    assert report["quarantined_by_reason"] == {"malformed": 1, "unknown_task": 1}
    assert report["eta_max"].startswith("2031-06-01") and report["eta_min"] < report["eta_max"]
    assert report["dry_run"] is True and report["taken"] == 10
    text = _cli(
        "migrate",
        "-A",
        "apps.migrate_proj",
        "--broker",
        ms.REDIS_URL,
        "-Q",
        queue,
        "--dry-run",
        "--dsn",
        qdsn,
    ).output
    assert "dry run" in text and "migrate_proj.added_later" in text and "ETA range" in text


def test_limit_stops_after_n_and_the_final_report_reads_per_queue(
    qdsn: str, r: redis.Redis, queue: str
) -> None:
    with ms.producer(ms.REDIS_URL, queue) as p:
        for i in range(10):
            p.record.delay(f"n{i}")
        p.app.send_task("migrate_proj.added_later", args=(1,))
    base = [
        "migrate",
        "-A",
        "apps.migrate_proj",
        "--broker",
        ms.REDIS_URL,
        "-Q",
        queue,
        "--dsn",
        qdsn,
    ]

    first = _cli(*base, "--limit", "4")

    assert first.exit_code == 0, first.output
    assert len(ms.rows(qdsn)) == 4 and r.llen(queue) == 7
    assert (
        "migrate (done)" in first.stdout
        and queue in first.stdout
        and "4 message(s)" in first.stdout
    )
    second = _cli(*base, "--json")
    report = json.loads(second.stdout)
    assert (report["moved"], report["quarantined"], report["remaining"]) == (6, 1, 0)
    assert report["per_queue"][queue]["quarantined_by_reason"] == {"unknown_task": 1}
    assert len(ms.rows(qdsn)) == 10 and r.llen(queue) == 0


def test_usage_errors_name_the_fix(qdsn: str) -> None:
    missing = _cli("migrate", "--broker", ms.REDIS_URL, "--dsn", qdsn)
    assert missing.exit_code == 2 and "-A/--app is required" in missing.output
    both = _cli("migrate", "-A", "apps.migrate_proj", "-Q", "a", "--all-queues", "--dsn", qdsn)
    assert both.exit_code == 2 and "exclude each other" in both.output
    no_broker = _cli("migrate", "-A", "apps.migrate_proj", "--dsn", qdsn)
    assert no_broker.exit_code == 2 and "pass --broker URL" in no_broker.output
    bad_content = _cli(
        "migrate",
        "-A",
        "apps.migrate_proj",
        "--broker",
        ms.REDIS_URL,
        "--accept-content",
        "json,xml",
        "--dsn",
        qdsn,
    )
    assert bad_content.exit_code == 2 and "unknown serializer 'xml'" in bad_content.output
    pickle_by_content = _cli(
        "migrate",
        "-A",
        "apps.migrate_proj",
        "--broker",
        ms.REDIS_URL,
        "--accept-content",
        "json,pickle",
        "--dsn",
        qdsn,
    )
    assert pickle_by_content.exit_code == 2 and "--accept-pickle" in pickle_by_content.output

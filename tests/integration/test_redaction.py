"""One redaction wherever text leaves the process: a job whose arguments and error carry secrets
of every shape (``password=``, ``token=``, ``pwd:``, a JSON ``"api_key"``, a URL's password with
and without its ``://``, an ``Authorization`` header) shows none of them on the dashboard's
``/jobs``, ``/dead`` and job page (a real dashboard process), in ``jobs show``/``ls``/``dead``
(text and ``--json``), in the worker's JSON log lines, or in the task events a Celery worker
sends to Flower (read back from the broker with Celery's own receiver); ``jobs show
--show-secrets`` is the one way to see them as stored."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from dashboard_support import Dashboard
from events_support import captured, redis_or_skip

from apps import celery_events_app as ev
from apps.celery_harness import bound, worker
from celery_compat.events import switch as event_switch
from celery_compat.events import worker_events
from celery_compat.events.emitter import close_emitter
from ujobs_bridge import Worker, WorkerConfig, job
from ujobs_bridge._internal.cli import cli
from ujobs_bridge._internal.observe import logs
from ujobs_bridge.client import Client
from ujobs_bridge.testing import run_until_idle

pytestmark = pytest.mark.timeout(180)

SECRETS = ("hunter2", "s3cretpw", "tok_ABC123", "Pwd_777", "AK_999", "Nosl4sh", "Bear_888")
ERROR = (
    "could not log in: password=hunter2 dsn=postgresql://bob:s3cretpw@db/prod token=tok_ABC123"
    ' pwd: Pwd_777 {"api_key": "AK_999"} via postgresql//bob:Nosl4sh@db/prod'
    " Authorization: Bearer Bear_888"
)
ARGS_SECRETS = ("ArgPwd_1", "ArgUrl_2", "ArgBearer_3")


@job(queue="leaky", max_attempts=1)
def leaky(settings: dict[str, Any]) -> None:
    raise ValueError(ERROR)


def _clean(text: str, *also: str) -> None:
    for secret in (*SECRETS, *also):
        assert secret not in text, (secret, text[:2000])


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The root logger's lines as the worker writes them with ``--log-format json``."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.formatter("json"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield out
    finally:
        root.removeHandler(handler)


def test_a_jobs_secrets_are_hidden_on_the_dashboard_in_the_cli_and_in_json_logs(
    dsn: str, client: Client, db: psycopg.Connection[Any], tmp_path: Path, json_log: io.StringIO
) -> None:
    settings = {
        "pwd": "ArgPwd_1",
        "cache": "redis//:ArgUrl_2@cache:6379/0",
        "headers": {"Authorization": "Bearer ArgBearer_3"},
        "note": "visible",
    }
    ref = leaky.configure(client=client).enqueue(settings)
    run_until_idle(Worker(dsn, {leaky.name: leaky}, WorkerConfig(queues=("leaky",))))
    (stored,) = db.execute("select last_error from x_jobs where id = %s", (ref.id,)).fetchone()
    assert "hunter2" in stored  # the row keeps what was raised; only what is shown is redacted

    # JSON log lines: the dead letter's line, its message and its traceback
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    mine = [line for line in lines if line.get("job_id") == str(ref.id)]
    assert mine and any("password=***" in json.dumps(line) for line in mine), lines
    _clean(json_log.getvalue())

    # the CLI, as text and as JSON
    runner = CliRunner()
    for args in (
        ["jobs", "show", str(ref.id)],
        ["jobs", "show", str(ref.id), "--json"],
        ["jobs", "ls", "--queue", "leaky"],
        ["jobs", "ls", "--queue", "leaky", "--json"],
        ["jobs", "dead", "--json"],
        ["jobs", "dead"],
    ):
        result = runner.invoke(cli, [*args, "--dsn", dsn], env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        _clean(result.output, *ARGS_SECRETS)
    shown = json.loads(runner.invoke(cli, ["jobs", "show", str(ref.id), "--json", "--dsn", dsn])
                       .stdout)  # fmt: skip
    assert (
        "password=***" in shown["last_error"] and "postgresql//bob:****@db" in shown["last_error"]
    )
    assert shown["input"]["args"][0]["note"] == "visible"
    as_stored = runner.invoke(cli, ["jobs", "show", str(ref.id), "--json", "--show-secrets",
                                    "--dsn", dsn])  # fmt: skip
    assert "hunter2" in as_stored.stdout and "ArgPwd_1" in as_stored.stdout
    more = runner.invoke(cli, ["jobs", "show", str(ref.id), "--json", "--dsn", dsn],
                         env={"UJOBS_SECRET_KEYS": "note, cache"})  # fmt: skip
    assert json.loads(more.stdout)["input"]["args"][0] | {"headers": None} == {
        "pwd": "***", "cache": "***", "headers": None, "note": "***"
    }  # fmt: skip

    # the dashboard's pages
    dash = Dashboard(dsn, tmp_path / "dash.log")
    try:
        for path in ("/jobs?queue=leaky", "/dead", f"/jobs/{ref.id}"):
            status, page = dash.request(path)
            assert status == 200, (path, page[:500])
            assert "ValueError" in page
            _clean(page, *ARGS_SECRETS)
        assert "password=***" in dash.request(f"/jobs/{ref.id}")[1]
    finally:
        dash.close()


@pytest.fixture
def events_app() -> Iterator[Any]:
    yield ev.app
    close_emitter(ev.app)
    event_switch.release()
    event_switch.set_enabled(False)


def test_task_events_sent_to_flower_carry_no_secret(dsn: str, events_app: Any) -> None:
    redis_or_skip()
    node = f"redact@{ev.__name__}"
    options = {"task_events": True, "heartbeat_interval": 5}
    with (
        captured(events_app) as capture,
        bound(events_app, dsn),
        worker(events_app, dsn, queues=("events",), start=False) as w,
    ):
        events = worker_events.start(events_app, w, options, node, dsn)
        assert events is not None
        w.start()
        events.ready()
        try:
            result = ev.boom.delay(ERROR)
            failed = capture.one("task-failed", uuid=result.id)
            received = capture.one("task-received", uuid=result.id)
        finally:
            events.shutdown()
    assert "ValueError" in failed["exception"] and "password=***" in failed["exception"]
    assert "password=***" in received["args"]
    sent = [e for e in capture.events if e.get("uuid") == result.id]
    _clean(json.dumps(sent, default=str))


REPR_SECRETS = ("KwPwd_1", "Nested_9", "UrlPw_3")


def test_celery_argument_reprs_carry_no_secret_to_flower_or_json_logs(
    dsn: str, events_app: Any, json_log: io.StringIO
) -> None:
    """A Celery task's ``argsrepr``/``kwargsrepr`` (a password kwarg, a URL with its password,
    a secret-named dict) leave the process in its task-sent events (through the Postgres
    sender, and on a broker producer it was handed), its task-received and task-failed events,
    and Celery's own failure log line (``celery.app.trace``'s context, as a JSON line): none of
    them carries a secret, while the row keeps what was sent."""
    redis_or_skip()
    node = f"redact-reprs@{ev.__name__}"
    options = {"task_events": True, "heartbeat_interval": 5}
    secrets = {
        "password": "KwPwd_1",
        "settings": {"credentials": {"user": "u", "pw": "Nested_9"}, "n": 1},
    }
    url = "postgresql://bob:UrlPw_3@db/prod"
    events_app.conf.task_send_sent_event = True
    try:
        with (
            captured(events_app) as capture,
            bound(events_app, dsn),
            worker(events_app, dsn, queues=("events",), start=False) as w,
        ):
            events = worker_events.start(events_app, w, options, node, dsn)
            assert events is not None
            try:
                pooled = ev.login.apply_async((url,), secrets)
                with events_app.connection_for_write() as connection:
                    producer = events_app.amqp.Producer(connection)  # a broker's, as kombu's
                    handed = ev.login.apply_async((url,), secrets, producer=producer)
                w.start()
                events.ready()
                for sent in (pooled, handed):
                    capture.one("task-failed", uuid=sent.id)
                    received = capture.one("task-received", uuid=sent.id)
                    assert "'password': '***'" in received["kwargs"], received
                    assert "'credentials': '***'" in received["kwargs"], received
                    task_sent = capture.one("task-sent", uuid=sent.id)
                    assert "'password': '***'" in task_sent["kwargs"], task_sent
                    assert "bob:****@db" in task_sent["args"], task_sent
            finally:
                events.shutdown()
    finally:
        events_app.conf.task_send_sent_event = False
    ours = [e for e in capture.events if e.get("uuid") in (pooled.id, handed.id)]
    _clean(json.dumps(ours, default=str), *REPR_SECRETS)
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    failures = [line for line in lines if line.get("logger") == "celery.app.trace"]
    assert failures and all("kwargs" in line.get("data", {}) for line in failures), lines
    _clean(json_log.getvalue(), *REPR_SECRETS)
    with psycopg.connect(dsn) as conn:
        stored = conn.execute(
            "select input::text from x_jobs where input -> 'headers' ->> 'id' = %s",
            (handed.id,),
        ).fetchone()
    assert stored is not None and "Nested_9" in stored[0]  # redacted only where it is shown

"""Secrets and malformed URLs at the command line, as real ``ujobs-bridge`` processes.

``jobs show`` / ``jobs ls --json`` hide secret-looking arguments AND Celery's ``argsrepr`` /
``kwargsrepr`` headers that repeat them; a malformed DSN or broker URL, given to any command,
prints one clear error with the password masked, exit 1, and no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from apps import celery_tasks as t
from apps.celery_harness import bound, celery_listeners_closed  # noqa: F401 - session cleanup
from ujobs_bridge._internal.config.dsn import mask_dsn
from ujobs_bridge.testing import amqp_url, redis_url

TESTS_DIR = Path(__file__).resolve().parents[1]
SECRET = "hunter2-s3cret"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), full.get("PYTHONPATH", "")])
    full.pop("UJOBS_DATABASE_URL", None)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "ujobs_bridge", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=TESTS_DIR,
        timeout=120,
    )


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    t.reset()
    with bound(t.app, dsn):
        yield t.app


def test_jobs_show_and_ls_hide_secrets_in_celerys_argument_reprs(app: Any, dsn: str) -> None:
    login = t.app.send_task(
        t.identity.name, kwargs={"value": 1, "password": SECRET, "api_token": SECRET}
    )
    t.add.delay(1, 2)
    shown = run("jobs", "show", _job_of(dsn, login.id), "--dsn", dsn, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    headers = data["input"]["headers"]
    body = json.loads(data["input"]["body"])  # the message body, kept as kombu's JSON text
    assert body[1] == {"value": 1, "password": "***", "api_token": "***"}
    assert SECRET not in headers["kwargsrepr"] and "'password': '***'" in headers["kwargsrepr"]
    assert SECRET not in shown.stdout
    table = run("jobs", "show", _job_of(dsn, login.id), "--dsn", dsn)
    assert table.returncode == 0 and SECRET not in table.stdout and "kwargsrepr" in table.stdout
    listed = run("jobs", "ls", "--dsn", dsn, "--json")
    assert listed.returncode == 0 and SECRET not in listed.stdout
    assert len(json.loads(listed.stdout)) == 2
    opted_in = run("jobs", "show", _job_of(dsn, login.id), "--show-input", "--dsn", dsn, "--json")
    assert SECRET in json.loads(opted_in.stdout)["input"]["headers"]["kwargsrepr"]


def _job_of(dsn: str, task_id: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select id from x_jobs"
            " where coalesce(input -> 'headers' ->> 'id', input ->> 'id') = %s",
            (task_id,),
        ).fetchone()
    assert row is not None
    return str(row[0])


MALFORMED_DSNS = [
    f"postgresql://u:{SECRET}@[::1/db",
    f"host=127.0.0.1 password={SECRET} dbname",
    f"host=127.0.0.1 password='{SECRET}",
    f"postgresql://u:{SECRET}@127.0.0.1:5432/db?foo=bar",
    f"postgresql://u:{SECRET}%zz@127.0.0.1/db",
]


COMMANDS = [
    ["jobs", "ls"],
    ["db", "status"],
    ["worker", "-A", "apps.basic_jobs"],
    ["scheduler", "-A", "apps.basic_jobs"],
    [
        "migrate",
        "-A",
        "apps.migrate_proj",
        "--broker",
        redis_url(5),
        "-Q",
        "door-none",
    ],
]
# Every malformed DSN through one command; the first through every command.
CASES = [(bad, COMMANDS[0]) for bad in MALFORMED_DSNS] + [
    (MALFORMED_DSNS[0], c) for c in COMMANDS[1:]
]


@pytest.mark.parametrize(
    ("bad", "command"), CASES, ids=[f"{c[0]}-{i}" for i, (_, c) in enumerate(CASES)]
)
def test_a_malformed_dsn_is_one_clear_error_without_the_password(
    bad: str, command: list[str]
) -> None:
    done = run(*command, "--dsn", bad)
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "UJ_DSN_INVALID" in text and "hint:" in text
    assert SECRET not in text and "Traceback" not in text


def test_a_malformed_dsn_in_the_environment_is_refused_the_same_way() -> None:
    done = run("jobs", "ls", env={"UJOBS_DATABASE_URL": MALFORMED_DSNS[0]})
    assert (
        done.returncode == 1
        and "UJ_DSN_INVALID" in done.stderr
        and "UJOBS_DATABASE_URL" in done.stderr
    )
    assert SECRET not in done.stdout + done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("broker", "code"),
    [
        (f"redis://u:{SECRET}@[::1/0", "UJ_BROKER_URL_INVALID"),
        (f"redis://u:{SECRET}@127.0.0.1:port/0", "UJ_BROKER_URL_INVALID"),
        ("the test kit's vhost, a wrong password", "UJ_BROKER_UNAVAILABLE"),
        (f"redis://:{SECRET}@127.0.0.1:1/5", "UJ_BROKER_UNAVAILABLE"),  # nothing listens
    ],
)
def test_a_bad_broker_url_is_one_clear_error_without_the_password(
    dsn: str, broker: str, code: str
) -> None:
    if broker.startswith("the test kit's vhost"):
        parts = urlsplit(amqp_url())
        netloc = f"{parts.username}:{SECRET}@{parts.hostname}:{parts.port or 5672}"
        broker = urlunsplit(parts._replace(netloc=netloc))
    done = run(
        "migrate", "-A", "apps.migrate_proj", "--broker", broker, "-Q", "door-none", "--dsn", dsn
    )
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert code in text and SECRET not in text and "Traceback" not in text
    assert mask_dsn(broker) in text


@pytest.mark.parametrize(
    ("dsn", "masked"),
    [
        ("postgresql://u:pw@[::1/db", "postgresql://u:****@[::1/db"),
        (
            "postgresql://u:a@h/db?sslpassword=b&password=c&sslmode=require",
            "postgresql://u:****@h/db?sslpassword=****&password=****&sslmode=require",
        ),
        (
            "host=h sslpassword=b password = 'c d' user=u",
            "host=h sslpassword=**** password = **** user=u",
        ),
        ("host=h password='unterminated secret", "host=h password=****"),
        ("amqp://guest:pa/ss#word@h//", "amqp://guest:****@h//"),
        ("sqs://KEY:SEC@", "sqs://KEY:****@"),
        ("redis://h:6379/0?password=p", "redis://h:6379/0?password=****"),
        ("postgresql://h/db", "postgresql://h/db"),
    ],
)
def test_mask_dsn_masks_every_secret_and_never_raises(dsn: str, masked: str) -> None:
    assert mask_dsn(dsn) == masked

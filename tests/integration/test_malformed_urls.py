"""Every malformed URL is refused with its password masked, whatever its shape (no ``://``, a
port that is no number, a host that is no host name), wherever it comes from: ``--dsn``,
``UJOBS_DATABASE_URL``, the ``-A`` app's ``ujobs_database_url``, ``migrate --broker``. The
password never appears in the output; a bad port is ``UJ_DSN_INVALID``, not an unreachable
database. ``celery -A proj worker`` on the bridge says it in the same one line as
``ujobs-bridge worker`` (a real ``celery`` process), never with a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from cli_proc import TESTS_DIR
from click.testing import CliRunner

from ujobs_bridge._internal.cli import cli

SECRET = "S3cretPW"
DSN_SHAPES = [
    f"postgresql//postgres:{SECRET}@127.0.0.1/db",  # no ":"
    f"postgresql:/postgres:{SECRET}@127.0.0.1/db",  # one slash
    f"postgres:{SECRET}@127.0.0.1/db",  # no scheme at all
    f"postgresql//postgres:{SECRET}/x@127.0.0.1/db",  # a slash in the password
    f"postgresql://postgres:{SECRET}@127.0.0.1:5432:5432/db",  # port twice
    f"postgresql://postgres:{SECRET}@127.0.0.1:99999/db",  # port out of range
    f"postgresql://postgres:{SECRET}@bad%20host/db",  # a host with a space
    f"postgresql://postgres:{SECRET}@[bad/db",  # an IPv6 bracket never closed
    f"host=127.0.0.1 password={SECRET} port=abc",  # key=value with a bad port
]
BROKER_SHAPES = [
    f"redis//:{SECRET}@127.0.0.1:6379/0",
    f"redis:/:{SECRET}@127.0.0.1:6379/0",
    f"redis://:{SECRET}@127.0.0.1:6379:6379/0",
    f"amqp://guest:{SECRET}@bad host:5672//",
]


@pytest.fixture
def app_with_database_url() -> Iterator[Any]:
    """The ``-A apps.celery_cli_worker`` app of this process, its ``ujobs_database_url`` set by
    the test and restored after."""
    from apps.celery_cli_worker import app

    before = app.conf.ujobs_database_url
    yield app
    app.conf.ujobs_database_url = before


def _run(args: list[str], env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli, args, env={"UJOBS_DATABASE_URL": None, **(env or {})})


def _refused(result: Any, code: str) -> None:
    assert result.exit_code == 1, result.output
    assert f"[{code}]" in result.output, result.output
    assert SECRET not in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("shape", DSN_SHAPES)
def test_a_malformed_dsn_is_refused_masked_from_every_source(
    shape: str, app_with_database_url: Any
) -> None:
    _refused(_run(["jobs", "ls", "--dsn", shape]), "UJ_DSN_INVALID")
    _refused(_run(["jobs", "ls"], env={"UJOBS_DATABASE_URL": shape}), "UJ_DSN_INVALID")
    app_with_database_url.conf.ujobs_database_url = shape
    _refused(_run(["jobs", "ls", "-A", "apps.celery_cli_worker"]), "UJ_DSN_INVALID")


@pytest.mark.parametrize("shape", BROKER_SHAPES)
def test_a_malformed_broker_url_is_refused_masked(shape: str, dsn: str) -> None:
    result = _run(["migrate", "-A", "apps.migrate_proj", "--broker", shape, "--dsn", dsn,
                   "--dry-run"])  # fmt: skip
    _refused(result, "UJ_BROKER_URL_INVALID")


def test_celery_worker_on_the_bridge_fails_in_one_masked_line() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
    env.pop("UJOBS_DATABASE_URL", None)
    env["CELERY_CLI_TEST_DSN"] = f"postgresql://postgres:{SECRET}@127.0.0.1:5432:5432/db"
    out = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "apps.celery_cli_worker", "worker"],
        capture_output=True,
        text=True,
        env=env,
        cwd=TESTS_DIR,
        timeout=120,
        check=False,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert SECRET not in text and "Traceback" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: [UJ_DSN_INVALID] the -A app's ujobs_database_url "
        "postgresql://postgres:****@127.0.0.1:5432:5432/db is malformed: "
        "the port '5432:5432' is not a number from 1 to 65535"
    ], text

"""Logs an operator can use: a failing plain ``@job`` logs its retry and its dead letter with the
job's ids, in JSON lines that parse one by one (a real worker subprocess), and a Celery message's
task id and traceparent ride along."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_proc import CliProc

from conftest import wait_for
from ujobs_bridge._internal.observe import logs
from ujobs_bridge._internal.worker import job_log
from ujobs_bridge.client import Client
from ujobs_bridge.records import ClaimedJob, JobState, Settlement


@pytest.fixture
def procs() -> Iterator[list[CliProc]]:
    started: list[CliProc] = []
    yield started
    for proc in started:
        proc.close()


def _json_lines(text: str) -> list[dict[str, object]]:
    """Every line of the output (stdout and stderr), each one JSON object: the command's own
    status lines too, so a log shipper never meets a line it cannot parse."""
    out = []
    for line in text.splitlines():
        parsed = json.loads(line)
        assert isinstance(parsed, dict), line
        out.append(parsed)
    return out


def test_a_failing_plain_job_logs_its_retry_and_dead_letter_as_json_lines(
    dsn: str, client: Client, tmp_path: Path, procs: list[CliProc], db: object
) -> None:
    from apps.basic_jobs import always_fails

    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ref = always_fails.configure(client=client, traceparent=traceparent).enqueue()
    proc = CliProc(
        ["worker", "-A", "apps.basic_jobs", "--poll", "0.2", "--log-format", "json",
         "--loglevel", "DEBUG", "--pool", "processes", "-c", "1", "--dsn", dsn],
        tmp_path / "worker.log",
    )  # fmt: skip
    procs.append(proc)
    wait_for(lambda: '"outcome": "dead"' in proc.output(), timeout=60, what="the dead letter log")
    proc.term()
    assert proc.wait(timeout=30) == 0, proc.output()
    lines = _json_lines(proc.output())
    said = [str(line["message"]) for line in lines if line["logger"] == "ujobs_bridge.cli"]
    assert [m.split(" ")[0] for m in said] == ["database:", "worker", "worker:", "worker"]
    assert " ready: " in said[1] and "shutting down" in said[2] and "stopped:" in said[3]
    # the body's own line, logged in the pool child, is JSON too
    assert [line["message"] for line in lines if line["logger"] == "apps.basic_jobs"] == [
        "always_fails: about to fail"
    ] * 2
    # and so is what it prints, as Celery's worker logs a body's stdout/stderr (redirected)
    printed = [line for line in lines if line["logger"] == "ujobs_bridge.redirected"]
    assert [(line["level"], line["message"]) for line in printed] == [
        ("WARNING", "always_fails: printed"),
        ("WARNING", "always_fails: printed on stderr"),
    ] * 2
    mine = [line for line in lines if line.get("job_id") == str(ref.id)]
    by_outcome = {line["outcome"]: line for line in mine}
    retry, dead = by_outcome["retried"], by_outcome["dead"]
    assert retry["level"] == "WARNING" and retry["attempt"] == 1 and retry["delay_s"] == 0
    assert dead["level"] == "ERROR" and dead["attempt"] == 2 and dead["max_attempts"] == 2
    for line in (retry, dead):
        assert line["job_name"] == "apps.basic_jobs.always_fails"
        assert line["queue"] == "basic"
        assert line["traceparent"] == traceparent
        assert "this job never works" in str(line["error"])  # the traceback rides along
        assert "Transient: this job never works" in str(line["message"])
    assert [line["attempt"] for line in mine if line["outcome"] == "claimed"] == [1, 2]
    assert all(line["level"] == "DEBUG" for line in mine if line["outcome"] == "claimed")


def test_the_text_format_says_it_in_one_sentence(
    dsn: str, client: Client, tmp_path: Path, procs: list[CliProc]
) -> None:
    from apps.basic_jobs import always_fails

    ref = always_fails.configure(client=client).enqueue()
    proc = CliProc(
        ["worker", "-A", "apps.basic_jobs", "--poll", "0.2", "--dsn", dsn], tmp_path / "w.log"
    )
    procs.append(proc)
    wait_for(lambda: "job dead:" in proc.output(), timeout=60, what="the dead letter log")
    proc.term()
    assert proc.wait(timeout=30) == 0, proc.output()
    out = proc.output()
    assert (
        f"WARNING ujobs.job: job failed, retry in 0.0s: apps.basic_jobs.always_fails[{ref.id}] attempt 1/2"
        in out
    )
    assert f"ERROR ujobs.job: job dead: apps.basic_jobs.always_fails[{ref.id}] attempt 2/2" in out
    assert "Traceback" not in out  # the traceback is JSON's `error`, or a DEBUG line
    assert "job claimed" not in out  # DEBUG lines stay out at the default INFO


def test_a_celery_message_logs_its_task_id(caplog: pytest.LogCaptureFixture) -> None:
    task_id = str(uuid.uuid4())
    claimed = ClaimedJob(
        id=uuid.uuid4(), name="proj.tasks.add", queue="celery",
        input={"headers": {"id": task_id, "task": "proj.tasks.add"}, "args": [], "embed": {}},
        attempt=3, max_attempts=3, lease_token=uuid.uuid4(), expired=False,
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )  # fmt: skip
    settlement = Settlement(
        claimed.id, claimed.lease_token, JobState.DEAD, error="ValueError: boom"
    )
    with caplog.at_level(logging.DEBUG, logger="ujobs.job"):
        job_log.settled(claimed, settlement)
    record, traceback_line = caplog.records  # the traceback follows at DEBUG
    assert traceback_line.levelname == "DEBUG" and "ValueError: boom" in traceback_line.getMessage()
    line = json.loads(logs.JsonFormatter().format(record))
    assert line["task_id"] == task_id and line["attempt"] == 3 and line["outcome"] == "dead"
    assert line["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")
    assert line["level"] == "ERROR" and line["message"].endswith("ValueError: boom")


def test_a_plain_input_has_no_task_id() -> None:
    assert logs.celery_task_id({"headers": "x"}) is None
    assert logs.celery_task_id([1, 2]) is None
    assert logs.celery_task_id({"a": 1}) is None


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["worker", "--log-format", "json", "--bogus"], "error: No such option '--bogus'."),
        (["worker", "--log-format=json", "-A"], "error: Option '-A' requires an argument."),
        (["scheduler", "--pool", "x", "--log-format", "json"], "error: No such option '--pool'."),
        (["worker"], "error: Missing option '-A' / '--app'."),  # by $UJOBS_LOG_FORMAT
        (["worker", "-A", "x", "--pool", "bogus"], "error: [UJ_CONFIG_INVALID] pool 'bogus'"),
    ],
)
def test_a_usage_error_is_one_json_object_too(
    args: list[str], error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """click's own lines (usage, the hint, the error) are one JSON object under JSON lines,
    whether asked on the command line or by $UJOBS_LOG_FORMAT; exit code 2 as before."""
    from click.testing import CliRunner

    from ujobs_bridge._internal.cli import cli

    monkeypatch.setenv("UJOBS_LOG_FORMAT", "json")
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    (line,) = _json_lines(result.output)
    assert line["level"] == "ERROR" and str(line["message"]).startswith(error), line
    assert line["exit_code"] == 2


def test_help_under_json_lines_and_read_commands_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from ujobs_bridge._internal.cli import cli

    helped = CliRunner().invoke(cli, ["worker", "--log-format", "json", "--help"])
    assert helped.exit_code == 0
    assert any("--log-format" in str(line["message"]) for line in _json_lines(helped.output))
    monkeypatch.setenv("UJOBS_LOG_FORMAT", "json")  # a read command takes no --log-format
    plain = CliRunner().invoke(cli, ["jobs", "ls", "--bogus"])
    assert plain.exit_code == 2 and "Usage: cli jobs ls" in plain.output

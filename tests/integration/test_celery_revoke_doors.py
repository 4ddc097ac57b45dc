"""A revoke is real whichever door it comes through: Celery's own CLI (``celery -A proj control
revoke|terminate``, a raw ``broadcast``), ``app.control.revoke`` with any ``terminate``/``signal``
Celery accepts (Flower sends ``terminate=0``), and a worker's pidbox hearing it from a plain
Celery app; and a cancel from the engine's side (``ujobs-bridge jobs cancel``, the dashboard's
cancel). Each is recorded: ``inspect revoked`` lists the id on the worker, and the task never
runs (or, terminated, stops). Celery's CLI runs in this process (its click group, unchanged)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from celery import states
from celery.bin.celery import celery as celery_cli
from celery.exceptions import TaskRevokedError
from click.testing import CliRunner

from apps import celery_revoke_tasks as rt
from apps.celery_harness import (
    bound,
    celery_listeners_closed,  # noqa: F401 - closes LISTENs at session end
    jobs,
)
from celery_compat.contrib.testing.worker import start_worker
from conftest import wait_for
from ujobs_bridge.ext import control as remote

NODE = "doors@test"


@pytest.fixture
def app(dsn: str) -> Iterator[Any]:
    rt.reset()
    with bound(rt.app, dsn):
        yield rt.app
    rt.GATE.set()  # never leave a body blocked


def celery(*args: str) -> Any:
    """Celery's own command line, in this process, on the bound test app."""
    result = CliRunner().invoke(celery_cli, ["-A", "apps.celery_revoke_tasks", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def revoked_on_worker(app: Any) -> list[str]:
    replies = app.control.inspect(destination=[NODE], timeout=5).revoked() or {}
    return list(replies.get(NODE, []))


def revoke_row(dsn: str, task_id: str) -> tuple[bool] | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        sql = "select terminate from x_celery_revoked where task_id = %s"
        row = conn.execute(sql, (task_id,)).fetchone()
    return None if row is None else (bool(row[0]),)


def test_celerys_cli_revoke_is_recorded_and_the_waiting_task_never_runs(app: Any, dsn: str) -> None:
    with start_worker(app, concurrency=1, perform_ping_check=False, hostname=NODE):
        first = rt.hold.delay("first")
        assert rt.STARTED.wait(10)  # the only slot is busy: the next one waits
        second = rt.mark.delay("second")
        out = celery("control", "revoke", second.id, "--timeout", "5")
        assert f"{NODE}: OK" in out.output and "flagged as revoked" in out.output
        wait_for(lambda: second.id in revoked_on_worker(app), what="inspect revoked to list it")
        rt.GATE.set()
        assert first.get(timeout=10) == "first"
        with pytest.raises(TaskRevokedError):
            second.get(timeout=10)
    assert rt.RAN["second"] == 0
    assert second.state == states.REVOKED
    assert revoke_row(dsn, second.id) == (False,)
    assert [r["state"] for r in jobs(dsn, rt.mark.name)] == ["cancelled"]


def test_celerys_cli_terminate_stops_the_running_task(app: Any, dsn: str) -> None:
    with start_worker(app, concurrency=1, perform_ping_check=False, hostname=NODE):
        running = rt.hold.delay("running")
        assert rt.STARTED.wait(10)
        out = celery("control", "terminate", "KILL", running.id, "--timeout", "5")
        assert f"{NODE}: OK" in out.output, out.output
        with pytest.raises(TaskRevokedError):
            running.get(timeout=10)
        assert running.id in revoked_on_worker(app)
    assert rt.RAN["running:finished"] == 0  # interrupted, not let finish
    assert running.state == states.REVOKED
    assert revoke_row(dsn, running.id) == (True,)
    assert str(running.result) == "terminated"  # Celery's TaskRevokedError('terminated')
    (row,) = jobs(dsn, rt.hold.name)
    assert row["state"] == "cancelled"
    assert row["last_error"] == "UJ_JOB_CANCELLED: terminated (SIGKILL)"  # Celery's word


def test_a_second_worker_with_a_taken_node_name_gets_celerys_warning(app: Any, dsn: str) -> None:
    """A worker checks, as it starts and before its own presence row exists, whether a live
    worker already has its node name."""
    import warnings

    from celery.exceptions import DuplicateNodenameWarning

    from celery_compat.worker import mingle

    with warnings.catch_warnings(record=True) as alone:
        warnings.simplefilter("always")
        mingle.warn_if_name_taken(dsn, NODE, {})  # the first worker of that name
    assert [w for w in alone if issubclass(w.category, DuplicateNodenameWarning)] == []
    with start_worker(app, concurrency=1, perform_ping_check=False, hostname=NODE):
        with pytest.warns(DuplicateNodenameWarning) as caught:
            mingle.warn_if_name_taken(dsn, NODE, {})  # a second one starting
        with warnings.catch_warnings(record=True) as skipped:
            warnings.simplefilter("always")
            mingle.warn_if_name_taken(dsn, NODE, {"without_mingle": True})  # as in Celery
    assert str(caught[0].message) == (
        f"Received multiple replies from node name: {NODE}.\n"
        "Please make sure you give each node a unique nodename using\n"
        "the celery worker `-n` option."
    )
    assert [w for w in skipped if issubclass(w.category, DuplicateNodenameWarning)] == []


@pytest.mark.parametrize(
    ("terminate", "signal", "recorded"),
    [
        (0, "SIGTERM", False),  # Flower's form: strtobool gives 0/1
        (1, "SIGTERM", True),
        (True, 9, True),
        (True, "9", True),
        (True, "KILL", True),
        (False, None, False),
    ],
)
def test_app_control_revoke_takes_every_terminate_and_signal_celery_accepts(
    app: Any, dsn: str, terminate: Any, signal: Any, recorded: bool
) -> None:
    later = rt.mark.apply_async(("later",), countdown=3600)
    assert app.control.revoke(later.id, terminate=terminate, signal=signal) is None
    assert revoke_row(dsn, later.id) == (recorded,)
    assert later.state == states.REVOKED
    assert [r["state"] for r in jobs(dsn, rt.mark.name)] == ["cancelled"]


def test_a_signal_celery_refuses_is_refused_before_anything_is_written(app: Any, dsn: str) -> None:
    from celery_compat.control import revoking

    later = rt.mark.apply_async(("later",), countdown=3600)
    with pytest.raises(ValueError, match="unknown signal 'kill'"):
        app.control.revoke(later.id, terminate=True, signal="kill")
    assert revoke_row(dsn, later.id) is None
    assert revoking.signal_name("TERM") == "SIGTERM" and revoking.signal_name(9) == "SIGKILL"


def raw(dsn: str, command: str, arguments: dict[str, Any]) -> Any:
    """``command`` as a worker's pidbox hears it from a plain Celery app or Flower over the
    broker: the command alone, nothing recorded by the sender; the worker's reply value."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        (reply,) = remote.broadcast(
            conn,
            f"celery.{command}",
            json.dumps(arguments),
            destination=[NODE],
            reply=True,
            timeout=5,
            command_set="celery",
        )
    return json.loads(reply.value_json)


def test_a_revoke_the_worker_hears_first_is_recorded_by_the_worker(app: Any, dsn: str) -> None:
    later = rt.mark.apply_async(("later",), countdown=3600)
    with start_worker(app, concurrency=1, perform_ping_check=False, hostname=NODE):
        args = {"task_id": [later.id], "terminate": 0, "signal": "SIGTERM"}
        assert raw(dsn, "revoke", args) == {"ok": f"tasks { {later.id} } flagged as revoked"}
        wait_for(lambda: later.id in revoked_on_worker(app), what="inspect revoked to list it")
        # what a Celery worker starting beside it asks (its Mingle step), answered as Celery's
        hello = raw(dsn, "hello", {"from_node": "celery@elsewhere", "revoked": []})
        assert later.id in hello["revoked"] and isinstance(hello["clock"], int)
        # a command this worker does not have: Celery's error reply (logged at DEBUG only)
        assert raw(dsn, "no_such_command", {}) == {"error": "KeyError('no_such_command')"}
    assert later.state == states.REVOKED
    assert revoke_row(dsn, later.id) == (False,)
    assert [r["state"] for r in jobs(dsn, rt.mark.name)] == ["cancelled"]


def test_a_cancel_from_the_cli_or_the_dashboard_is_listed_by_inspect_revoked(
    app: Any, dsn: str
) -> None:
    """An operator cancels a Celery task's job with ``ujobs-bridge jobs cancel`` or the
    dashboard's button: ``inspect revoked`` (Celery's CLI, a live bridge worker) lists it, and it
    never runs. Requeued, it is live again, no longer listed, and runs; a purged one is never
    listed (Celery's purge revokes nothing)."""
    from dashboard_support import InProcessDashboard

    from ujobs_bridge._internal.cli import cli as engine_cli

    by_cli = rt.mark.apply_async(("by-cli",), countdown=3600)
    by_dashboard = rt.mark.apply_async(("by-dashboard",), countdown=3600)
    purged = rt.mark.apply_async(("purged",), queue="to_purge")
    rows = {r["input"]["headers"]["id"]: r["id"] for r in jobs(dsn, rt.mark.name)}
    out = CliRunner().invoke(engine_cli, ["jobs", "cancel", str(rows[by_cli.id]), "--dsn", dsn])
    assert out.exit_code == 0, out.output
    dashboard = InProcessDashboard(dsn)
    try:
        page = f"/jobs/{rows[by_dashboard.id]}"
        status, _ = dashboard.post(f"{page}/cancel", page)
        assert status == 303
    finally:
        dashboard.close()
    assert celery("purge", "-f", "-Q", "to_purge").exit_code == 0
    with start_worker(app, concurrency=1, perform_ping_check=False, hostname=NODE):
        listed = revoked_on_worker(app)
        assert by_cli.id in listed and by_dashboard.id in listed
        assert purged.id not in listed  # Celery's purge revokes nothing
        out = celery("inspect", "revoked", "--timeout", "5")  # Celery's own command says so too
        assert by_cli.id in out.output and by_dashboard.id in out.output, out.output
        requeued = CliRunner().invoke(
            engine_cli, ["jobs", "requeue", str(rows[by_cli.id]), "--dsn", dsn]
        )
        assert requeued.exit_code == 0, requeued.output
        assert by_cli.id not in revoked_on_worker(app)  # live again: no longer revoked
        assert by_cli.get(timeout=30) == "by-cli"  # and it runs (not dropped as revoked)
    assert rt.RAN["by-dashboard"] == 0
    assert {r["input"]["headers"]["id"]: r["state"] for r in jobs(dsn, rt.mark.name)} == {
        by_cli.id: "done",
        by_dashboard.id: "cancelled",
        purged.id: "cancelled",
    }

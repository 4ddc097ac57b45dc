"""A celery_compat app in a cutover: its ``broker_url`` names a Redis broker (db 3 of the test
kit's Redis by default, ``EVENTS_APP_BROKER`` to change it), so the bridge worker's ``-E`` events
are published there as well as stored in Postgres. Tasks that succeed, fail, retry once, are
rejected and nap until revoked, for the event tests (``tests/test_celery_events*.py``)."""

from __future__ import annotations

import os
import time
from typing import Any

from celery.exceptions import Reject

from celery_compat import Celery
from ujobs_bridge.testing import redis_url

app = Celery("celery_events_app")
_broker = os.environ.get("EVENTS_APP_BROKER")  # "" means no broker: Postgres only
app.conf.broker_url = redis_url(3) if _broker is None else _broker
app.conf.task_default_queue = "events"
app.conf.broker_connection_timeout = 2
if os.environ.get("EVENTS_APP_SENT_EVENT"):
    app.conf.task_send_sent_event = True


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def boom(message: str) -> None:
    raise ValueError(message)


@app.task(bind=True, max_retries=2, default_retry_delay=0)
def flaky(self: Any) -> str:
    if self.request.retries == 0:
        raise self.retry(countdown=0)
    return "second time"


@app.task
def login(url: str, password: str = "", settings: dict[str, Any] | None = None) -> None:
    """Fails with its secret-laden arguments in its reprs (the redaction tests)."""
    raise ValueError("login refused")


@app.task
def refuse() -> None:
    raise Reject("not for us", requeue=False)


@app.task
def nap(seconds: float) -> str:
    """Runs ``seconds`` unless interrupted (a revoke with ``terminate``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return "woke up"


@app.task(ignore_result=True)
def noop() -> None:
    return None

"""Capture Celery events from a broker with Celery's own ``app.events.Receiver``, for the event tests.

``Capture`` runs the receiver on a thread, keeps every event it hands over, and is known to be
subscribed only once a probe event it published itself came back (Redis fan-out is pub/sub:
what is published before the subscription is gone, so a test must not start before it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from conftest import wait_for
from ujobs_bridge.testing import redis_url

BROKER = redis_url(3)  # this branch's Redis db (of the test kit's server)
PROBE = "custom-probe"


def redis_or_skip() -> None:
    try:
        redis.Redis.from_url(BROKER, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis at {BROKER}: {exc}")


class Capture:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._conn = app.connection_for_read()
        self.receiver = app.events.Receiver(self._conn, handlers={"*": self._on_event})
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_event(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(dict(event))

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def start(self) -> None:
        self._thread.start()
        with self.app.connection_for_write() as conn:
            dispatcher = self.app.events.Dispatcher(conn, hostname="probe@test")

            def probed() -> bool:
                dispatcher.send(PROBE)
                return bool(self.of(PROBE))

            wait_for(probed, timeout=30, what="the event receiver to subscribe")
            dispatcher.close()

    def stop(self) -> None:
        self.receiver.should_stop = True
        self._thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self._conn.release()

    def of(self, type_: str, **match: Any) -> list[dict[str, Any]]:
        with self._lock:
            found = list(self.events)
        return [
            e
            for e in found
            if e.get("type") == type_ and all(e.get(k) == v for k, v in match.items())
        ]

    def one(self, type_: str, **match: Any) -> dict[str, Any]:
        found = wait_for(lambda: self.of(type_, **match), timeout=45, what=f"{type_} {match}")
        assert isinstance(found, list)
        return found[0]


@contextlib.contextmanager
def captured(app: Any) -> Iterator[Capture]:
    capture = Capture(app)
    capture.start()
    try:
        yield capture
    finally:
        capture.stop()

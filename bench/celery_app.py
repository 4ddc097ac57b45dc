"""The Celery app and tasks the bench's Celery workers load (``celery -A bench.celery_app``).

Why it exists: Celery needs an importable module holding the app. The producer side (the bench
process) builds the same app with ``make_app`` and explicit arguments; the worker side reads them
from the environment variables that ``celery_system`` sets on the subprocess. Settings are
Celery's defaults plus ``task_ignore_result=True``: the tasks signal through Redis themselves
(``noop`` INCRs a counter; ``ping`` RPUSHes ``"<sent> <now>"`` with ``now`` taken on the body's
first line).

What it is not: tuned. No prefetch, ack or serializer changes: this is Celery as a project that
follows the docs would run it.
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

_redis: redis.Redis | None = None


def _client(url: str) -> redis.Redis:
    global _redis
    if _redis is None:  # created lazily, so each prefork child opens its own connection
        _redis = redis.Redis.from_url(url, socket_timeout=10)
    return _redis


def make_app(
    *, broker: str, queue: str, redis_url: str, counter_key: str, latency_key: str
) -> Celery:
    app = Celery("ujb_bench", broker=broker, set_as_current=False)
    # shared=False: a shared task is added to EVERY app on finalization, and the bench process
    # builds one app per broker; the second would then run the first one's closures.
    app.conf.update(
        task_ignore_result=True,
        task_default_queue=queue,
        broker_connection_retry_on_startup=True,
    )

    @app.task(name="ujb_bench.noop", shared=False)
    def noop() -> None:
        _client(redis_url).incr(counter_key)

    @app.task(name="ujb_bench.ping", shared=False)
    def ping(sent: float) -> None:
        now = time.time()
        _client(redis_url).rpush(latency_key, f"{sent!r} {now!r}")

    return app


app = make_app(
    broker=os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/13"),
    queue=os.environ.get("BENCH_CELERY_QUEUE", "ujb_bench_unset"),
    redis_url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"),
    counter_key=os.environ.get("BENCH_COUNTER_KEY", "ujb_bench:unset:done"),
    latency_key=os.environ.get("BENCH_LATENCY_KEY", "ujb_bench:unset:latency"),
)

"""``ujobs_bridge.testing``: the test kit for code that declares and enqueues jobs.

Why it exists: a job is tested like any function, but against the real engine: the real
schema, the real insert, claim, attempt core and settle. The kit gives

- ``TemporaryDatabase``: a private database (pid + random name) with the schema installed by the
  real migration runner; ``reset()`` empties every ujobs table, ``drop()`` removes it;
- ``perform(my_job.call(...), client=client)``: run ONE attempt now and get back a ``Performed``
  (the row's state, output, error, attempt, the row itself); ``perform_again`` runs the next one;
- ``run_until_idle(worker)``: tick a real ``Worker`` until nothing it can run is due;
- ``enqueued(client, name=my_job, args=[...])``: the matching job rows, oldest first;
- ``PrivateCluster``: a Postgres server of the test's own (temporary ``initdb``, free port) to
  stop, crash and restart in outage tests;
- ``PgBouncer``: a real PgBouncer in transaction mode in front of a server (``dsn(dbname)``);
- ``redis_url(db)`` / ``amqp_url()``: a Redis database and a RabbitMQ vhost of the test
  process's own (``UJOBS_TEST_REDIS_URL`` / ``UJOBS_TEST_AMQP_URL`` when set, else a private
  ``redis-server`` and a vhost made on first use, removed by ``BROKERS.close()``);
  ``PrivateRedis`` and ``RabbitVhost`` to make more;
- a pytest plugin, ``pytest -p ujobs_bridge.testing.pytest`` (fixtures ``ujobs_database``,
  ``ujobs_dsn``, ``ujobs_client``, ``ujobs_clock``).

What it is not: an in-memory fake. Every database helper needs PostgreSQL
(``UJOBS_TEST_ADMIN_DSN``); the broker helpers need ``redis-server`` and RabbitMQ.
Nothing here imports Celery; Celery apps have ``celery_compat.contrib.pytest``.
"""

from __future__ import annotations

from ujobs_bridge.testing.brokers import (
    AMQP_URL_ENV,
    BROKERS,
    REDIS_URL_ENV,
    PrivateRedis,
    RabbitVhost,
    TestBrokers,
    amqp_url,
    redis_url,
)
from ujobs_bridge.testing.cluster import PrivateCluster
from ujobs_bridge.testing.database import (
    ADMIN_DSN_ENV,
    DEFAULT_ADMIN_DSN,
    TemporaryDatabase,
    admin_dsn_from_env,
    dsn_for,
)
from ujobs_bridge.testing.enqueued import enqueued
from ujobs_bridge.testing.idle import run_until_idle
from ujobs_bridge.testing.perform import Performed, perform, perform_again
from ujobs_bridge.testing.pgbouncer import PgBouncer

__all__ = [
    "ADMIN_DSN_ENV",
    "AMQP_URL_ENV",
    "BROKERS",
    "DEFAULT_ADMIN_DSN",
    "REDIS_URL_ENV",
    "Performed",
    "PgBouncer",
    "PrivateCluster",
    "PrivateRedis",
    "RabbitVhost",
    "TemporaryDatabase",
    "TestBrokers",
    "admin_dsn_from_env",
    "amqp_url",
    "dsn_for",
    "enqueued",
    "perform",
    "perform_again",
    "redis_url",
    "run_until_idle",
]

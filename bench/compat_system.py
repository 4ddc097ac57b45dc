"""celery_compat on the bridge, measured in the Celery-shaped cells next to real Celery.

Why it exists: the cutover claim is "same Celery code, durable, and not slower". So this system
drives the bridge only through Celery's API, as an unchanged codebase would
(``bench.compat_tasks``: a ``celery_compat.Celery`` app and a ``@shared_task`` no-op, results
ignored as in ``bench.celery_app``)::

    noop.delay()                                      # one by one: each one a durable commit
    app.conf.ujobs_send_commit = "off"; noop.delay()  # one by one, before the WAL flush
    8 threads x noop.delay(); 8 processes x noop.delay()   # concurrent senders, both ways
    with celery_compat.enqueue_in(conn, batch=True):  # 1,000 per block (one INSERT), ONE commit
        for _ in range(1000): noop.delay()
    conn.commit()
    ujobs-bridge worker --dsn DSN -A bench.compat_tasks -Q bench_compat -c 8   # ONE process

One-by-one sends go through the app's own pool (``app.use_ujobs_client``: a ``Client`` with
the default pool size), in autocommit, so each ``delay()`` returns after its row committed.
The transaction cell uses a plain psycopg connection of the bench (not autocommit), as a web
request's connection would be. The drain's messages are enqueued the transaction way before the
clock starts; completion is ``count(*)`` of ``done`` rows, polled every ``poll_s``.

What it is not: the engine's own cells (``ujobs_system``) or a test of celery_compat's
behaviour (``tests/test_celery_*``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from . import bridge_cli, cells, pg
from .bridge_cli import CONCURRENCY
from .procs import Group
from .settings import Settings


class CompatSystem:
    name = "celery-compat"

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.dbname = settings.database_name(self.name)
        self.dsn = ""
        self.client: Any = None
        self._admin: psycopg.Connection[Any] | None = None  # autocommit: resets, counting
        self._tx: psycopg.Connection[Any] | None = None  # the "application" connection

    # -- plumbing -------------------------------------------------------------------------
    @property
    def admin(self) -> psycopg.Connection[Any]:
        if self._admin is None:
            self._admin = pg.connect(self.dsn)
        return self._admin

    @property
    def tx(self) -> psycopg.Connection[Any]:
        if self._tx is None:
            self._tx = pg.connect(self.dsn, autocommit=False)
        return self._tx

    def _reset(self) -> None:
        pg.empty_jobs(self.admin, "x_celery_tasks", "x_celery_results")

    def _done(self) -> int:
        from .compat_tasks import QUEUE

        return bridge_cli.done_count(self.admin, QUEUE)

    def _send_in_blocks(self, n: int) -> None:
        """``n`` delays, ``TX_SIZE`` per ``enqueue_in`` block, one commit per block."""
        from celery_compat import enqueue_in

        from .compat_tasks import noop

        conn = self.tx
        for start in range(0, n, cells.TX_SIZE):
            with enqueue_in(conn, batch=True):
                for _ in range(min(cells.TX_SIZE, n - start)):
                    noop.delay()
            conn.commit()

    def _spawn_worker(self) -> Group:
        from .compat_tasks import QUEUE

        return bridge_cli.spawn_worker(
            "compat-worker",
            dsn=self.dsn,
            tasks="bench.compat_tasks",
            queue=QUEUE,
            log_dir=self.log_dir,
            extra=("--loglevel", "WARNING"),
        )

    # -- lifecycle ------------------------------------------------------------------------
    def setup(self) -> None:
        from ujobs_bridge import connect

        from . import compat_tasks

        assert compat_tasks.app.conf.task_ignore_result is True
        self.dsn = bridge_cli.fresh_database(self.dbname)
        self.client = connect(self.dsn, upgrade=False)
        compat_tasks.app.use_ujobs_client(self.client)
        compat_tasks.app.set_current()  # shared_task proxies resolve to this app

    def teardown(self) -> None:
        from . import compat_tasks

        try:
            compat_tasks.app.use_ujobs_client(None)
            if self.client is not None:
                self.client.close()
            for conn in (self._admin, self._tx):
                if conn is not None:
                    conn.close()
            self._admin = self._tx = None
        finally:
            if self.dsn:
                pg.drop(self.dbname)

    def describe(self) -> dict[str, str]:
        import celery

        return {
            "ujobs-bridge": bridge_cli.version(),
            "celery": celery.__version__,
            "app": "celery_compat.Celery, @shared_task noop, task_ignore_result=True",
            "worker": f"ONE ujobs-bridge worker -A bench.compat_tasks -c {CONCURRENCY}",
        }

    # -- Celery-shaped cells --------------------------------------------------------------
    def _send_commit(self, value: str) -> None:
        from . import compat_tasks

        compat_tasks.app.conf.ujobs_send_commit = value

    def delay_one(self, n: int) -> dict[str, float]:
        from .compat_tasks import noop

        def send(count: int) -> None:
            for _ in range(count):
                noop.delay()

        out = {".delay() (each one a commit)": cells.enqueue_rate(send, n, self._reset)}
        self._send_commit("off")
        try:
            out['.delay(), ujobs_send_commit="off" (returns before the WAL flush)'] = (
                cells.enqueue_rate(send, n, self._reset)
            )
        finally:
            self._send_commit("on")
        return out

    def delay_concurrent(self, n: int) -> dict[str, float]:
        """``cells.SENDER_THREADS`` threads of this process sharing the app (its pool: the
        default size), then ``producers.PRODUCERS`` processes; each way with the default send
        commit and with ``"off"``."""
        from . import compat_tasks, producers

        # The app's own task, not the shared_task proxy: in a thread other than the one that
        # made the app current, a proxy resolves to Celery's default app (as under real Celery).
        noop = compat_tasks.app.tasks[compat_tasks.noop.name]

        def send(count: int) -> None:
            for _ in range(count):
                noop.delay()

        threads, procs = cells.SENDER_THREADS, producers.PRODUCERS
        out: dict[str, float] = {}
        for commit in ("on", "off"):
            suffix = "" if commit == "on" else ', ujobs_send_commit="off"'
            self._send_commit(commit)
            try:
                out[f"{threads} threads of one process{suffix}"] = cells.threaded_rate(
                    send, n, self._reset, threads
                )
            finally:
                self._send_commit("on")
            self._reset()
            kind = "compat" if commit == "on" else "compat-off"
            out[f"{procs} processes{suffix}"] = producers.rate(kind, self.dsn, n)
            self._reset()
        return out

    def delay_tx(self, n: int) -> dict[str, float]:
        rate = cells.enqueue_rate(self._send_in_blocks, n, self._reset)
        return {f"{cells.TX_SIZE:,} x .delay() in enqueue_in(conn), one commit": rate}

    def drain_shared(self, n: int) -> dict[str, cells.DrainResult]:
        self._reset()
        self._send_in_blocks(n)
        self.admin.execute("analyze x_jobs")
        result = cells.timed_drain(
            n=n, spawn=lambda: [self._spawn_worker()], done_count=self._done, settings=self.settings
        )
        self._reset()
        return {f"1 process x ujobs-bridge worker -c {CONCURRENCY}": result}

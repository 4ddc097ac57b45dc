"""Enqueue from several producer processes at once, one commit per job: what many web processes
calling ``.delay()`` together do to the database.

Why it exists: the one-by-one enqueue cell has one producer, whose commits never wait for one
another. Many producers can share a WAL flush (group commit), unless something serializes their
commits: a NOTIFY does, since Postgres holds its notify lock from just before a notifying
transaction's commit until that commit is flushed. Since migration 0021 an insert notifies only
a queue that a worker waits for, so this cell measures the bridge both ways: no worker waiting
(every worker busy with a backlog: the inserts send nothing) and a worker waiting (a node
registered with its queue marked, as an idle worker does: every insert notifies, which is what
every insert did before 0021). The raw ceiling runs the same processes with a bare autocommit
``INSERT`` and with the ``INSERT`` plus a ``pg_notify`` in the same statement. The same
processes send Celery-shaped ``.delay()`` calls for the concurrent-senders cell
(``cells.DELAY_MANY``): on the bridge (``compat``; ``compat-off``: ``ujobs_send_commit="off"``)
and through real Celery to its broker (``celery``: the DSN argument is the broker URL, the
queue follows it).

Each of ``PRODUCERS`` processes (``python -m bench.producers KIND DSN COUNT``) connects, sends
``WARMUP_ENQUEUES`` jobs, says ``ready``, waits for ``go`` on stdin, sends its share and says
``done``: the clock runs from the first ``go`` to the last ``done``, so no process's start-up
or connection is timed.

What it is not: a drain (nothing consumes the jobs) or a latency figure.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

PRODUCERS = 8
PROJECT_ROOT = Path(__file__).resolve().parent.parent
WAITING_WORKER = "bench:waiting-worker"  # the node whose mark stands for a waiting worker


def rate(kind: str, dsn: str, n: int, producers: int = PRODUCERS, *extra: str) -> float:
    """Jobs/s of ``n`` one-by-one enqueues of ``kind`` split over ``producers`` processes
    (``extra``: more arguments of ``kind``'s sender)."""
    share = max(1, n // producers)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.producers", kind, dsn, str(share), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=PROJECT_ROOT,
        )
        for _ in range(producers)
    ]
    try:
        for proc in procs:
            _expect(proc, "ready")
        t0 = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            _expect(proc, "done")
        elapsed = time.perf_counter() - t0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    return share * producers / elapsed


def _expect(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != word:
        raise RuntimeError(f"a producer process said {line!r} instead of {word!r}")


def _sender(kind: str, dsn: str, *extra: str) -> Callable[[], object]:
    if kind in ("ujobs", "ujobs-off"):
        from ujobs_bridge import connect

        from .ujobs_tasks import noop

        client = connect(dsn, upgrade=False, send_commit="off" if kind == "ujobs-off" else "on")
        call = noop.configure(client=client)
        return call.enqueue
    if kind in ("compat", "compat-off"):
        from ujobs_bridge import connect

        from . import compat_tasks

        compat_tasks.app.use_ujobs_client(connect(dsn, upgrade=False))
        compat_tasks.app.set_current()
        compat_tasks.app.conf.ujobs_send_commit = "off" if kind == "compat-off" else "on"
        return compat_tasks.app.tasks[compat_tasks.noop.name].delay  # type: ignore[no-any-return]
    if kind == "celery":
        from .celery_app import make_app

        queue, redis_url, counter_key = extra
        app = make_app(
            broker=dsn, queue=queue, redis_url=redis_url, counter_key=counter_key,
            latency_key=counter_key,
        )  # fmt: skip
        return app.tasks["ujb_bench.noop"].delay
    import psycopg

    from .raw_system import INSERT_NOTIFY, INSERT_ONE, PAYLOAD

    conn = psycopg.connect(dsn, autocommit=True)
    if kind == "raw":
        return lambda: conn.execute(INSERT_ONE, (PAYLOAD,))
    return lambda: conn.execute(INSERT_NOTIFY, (PAYLOAD, time.time()))


def main(kind: str, dsn: str, count: int, *extra: str) -> None:
    from . import cells

    send = _sender(kind, dsn, *extra)
    for _ in range(cells.WARMUP_ENQUEUES):
        send()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    for _ in range(count):
        send()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:])

"""The demo's Celery app wired to the bridge, as the Celery and migrate parts of the demo run it.

Why it exists: both Celery-side parts of ``ujobs-bridge demo`` (``celery_compat/cli/demo.py``,
``migrate/cli/demo.py``) run ``celery_compat.cli.demo_app``'s app the way a cut-over project does: the
app sends and reads results through a bridge ``Client`` (``app.use_ujobs_client``) and an
in-process bridge ``Worker`` runs its tasks on the part's own queue (built with
``celery_compat.worker.execution.jobs_for_app``, as ``worker -A`` does). ``app_worker`` sets that up and
always takes it down again (worker stopped, app unbound and closed, client closed), so the two
parts cannot leave a worker running or an app bound to a closed client; ``row_states`` is how
each part sums up the rows its queue holds afterwards.

What it is not: the parts themselves (what they send and check) or the app
(``celery_compat/demo_app.py``, plain Celery code).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from celery_compat.worker import revoked_ids
from celery_compat.worker.execution import jobs_for_app
from ujobs_bridge.client import Client
from ujobs_bridge.ext import loaders as loading
from ujobs_bridge.ext.database import ResolvedDatabase
from ujobs_bridge.ext.worker import Worker, WorkerConfig
from ujobs_bridge.records import JobRecord

CLIENT_POOL = 4
POLL_S = 0.1
STOP_TIMEOUT_S = 5.0


@contextmanager
def app_worker(resolved: ResolvedDatabase, queue: str, *, concurrency: int) -> Iterator[Worker]:
    """``demo_app.app`` bound to a bridge client, and a Worker (not started) for ``queue``."""
    # lazy: importing demo_app builds the demo's Celery app, only when a part runs it
    from celery_compat.cli import demo_app

    app = demo_app.app
    client = Client(resolved, max_size=CLIENT_POOL)
    app.use_ujobs_client(client)
    worker = Worker(
        resolved.dsn,
        loading.build(jobs_for_app(app)),
        WorkerConfig(
            queues=(queue,),
            concurrency=concurrency,
            poll_s=POLL_S,
            shutdown_timeout_s=STOP_TIMEOUT_S,
        ),
        channels=(revoked_ids.channel(),),
    )
    try:
        yield worker
    finally:
        worker.stop(timeout_s=STOP_TIMEOUT_S)
        app.use_ujobs_client(None)
        app.close()
        client.close()


def row_states(rows: Iterable[JobRecord]) -> dict[str, int]:
    """State -> how many of ``rows`` are in it, by state name."""
    return dict(sorted(Counter(r.state.value for r in rows).items()))

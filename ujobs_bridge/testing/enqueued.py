"""``enqueued(...)``: the jobs a test's code enqueued, to assert on name, queue, state and args.

Why it exists: the usual assertion after calling code that enqueues is "this job was enqueued
with these arguments" (procrastinate's and Oban's ``assert_enqueued``). ``enqueued`` reads the
rows through the engine's ``db`` functions and filters them, oldest first, so a test writes
``assert [j.input for j in enqueued(client, name=send_welcome)] == [...]`` or uses ``args=``.

What it is not: a wait. It reads what is committed now; pair it with ``run_until_idle`` or
``perform`` to run the jobs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from ujobs_bridge._internal.db import job_reads as reads_db
from ujobs_bridge._internal.jobs.payload import decode_input
from ujobs_bridge.client import Client
from ujobs_bridge.job import JobDefinition
from ujobs_bridge.records import JobRecord, JobState

LIMIT = 10_000


def enqueued(
    source: Client | psycopg.Connection[Any],
    *,
    name: str | JobDefinition[Any, Any] | None = None,
    queue: str | None = None,
    state: str | JobState | None = None,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    limit: int = LIMIT,
) -> list[JobRecord]:
    """The jobs matching every filter given (any state unless ``state=``), oldest first.
    ``args``/``kwargs`` compare with the decoded input the job will be called with."""
    job_name = name.name if isinstance(name, JobDefinition) else name
    with _connection(source) as conn:
        rows = reads_db.job_list(
            conn,
            state=JobState(state).value if state is not None else None,
            queue=queue,
            name=job_name,
            limit=limit,
        )
    rows.reverse()  # job_list answers newest first
    return [row for row in rows if _input_matches(row, args, kwargs)]


def _input_matches(
    row: JobRecord, args: Sequence[Any] | None, kwargs: dict[str, Any] | None
) -> bool:
    if args is None and kwargs is None:
        return True
    got_args, got_kwargs = decode_input(row.input)
    if args is not None and list(got_args) != list(args):
        return False
    return kwargs is None or got_kwargs == kwargs


@contextmanager
def _connection(source: Client | psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    if isinstance(source, Client):
        with source.pool.connection() as conn:
            yield conn
    else:
        yield source

"""ujobs_django's SQL seam: its statements (``sql/tasks.sql``) and the only code that runs them.

Why it exists: a ``django.tasks`` result is read from the engine's job row, its settled attempts
and its live lease, on Django's own connection (so a result read inside the ``atomic()`` block
that enqueued it sees the row). The statement lives in a ``.sql`` file, as every statement of
the project does.

What it is not: a schema part. ujobs_django adds no table: a ``django.tasks`` task is a job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, LiteralString
from uuid import UUID

from ujobs_bridge.ext.database import load_folder

QUERIES: dict[str, LiteralString] = load_folder(__name__)


def q(name: str) -> LiteralString:
    """The statement called ``name``; a KeyError names the missing block."""
    return QUERIES[name]


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One attempt of a job: settled (``outcome`` set) or running now (``outcome`` None)."""

    worker: str | None
    started_at: datetime | None
    outcome: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class TaskRow:
    """What a ``django.tasks`` result is built from: the job row and its attempts, oldest first."""

    id: UUID
    name: str
    queue: str
    input: Any
    output: Any
    state: str
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None
    attempts: tuple[AttemptRow, ...]


def _json(value: Any) -> Any:
    """A jsonb column as Django's cursor hands it over (Django's psycopg 3 setup loads jsonb as
    text, for its JSONField to decode)."""
    return json.loads(value) if isinstance(value, str) else value


def _instant(text: Any) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) else None


def task_row(cursor: Any, job_id: UUID) -> TaskRow | None:
    """The row of job ``job_id`` read on ``cursor`` (a cursor of Django's connection)."""
    cursor.execute(q("django_task_get"), {"id": job_id})
    found = cursor.fetchone()
    if found is None:
        return None
    (id_, name, queue, input_, output, state, last_error, created_at, finished_at, attempts) = found
    return TaskRow(
        id=id_,
        name=name,
        queue=queue,
        input=_json(input_),
        output=_json(output),
        state=state,
        last_error=last_error,
        created_at=created_at,
        finished_at=finished_at,
        attempts=tuple(
            AttemptRow(
                worker=a.get("worker"),
                started_at=_instant(a.get("started_at")),
                outcome=a.get("outcome"),
                error=a.get("error"),
            )
            for a in (_json(attempts) or [])
        ),
    )

"""A Celery protocol-v2 message as an ``x_jobs`` row: the one shape sending and migrate share.

Why it exists: a task sent through the facade and a message drained from a Celery broker must
become the SAME row, so the worker runs both through one path. The row keeps the whole message
(headers, body ``[args, kwargs, embed]``, properties) in ``input``, encoded with kombu's JSON so
the types Celery's JSON serializer carries (datetime, UUID, Decimal, bytes) come back as they
went in. The task name is the row's ``name``; ``eta`` is ``run_at``; the message's identity
(task id, retries, replaced-task nesting) keys the ledger that makes enqueue idempotent.

What it is not: a broker decoder (``migrate`` turns broker bytes into a ``CeleryMessage``) or a
sender (``sending.py`` builds one from Celery's own ``create_task_message``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from kombu.utils import json as kombu_json

from ujobs_bridge import tracing
from ujobs_bridge.ids import new_job_id

PRIORITY_MIN, PRIORITY_MAX = 0, 255

# kombu's JSON (it registers datetime, UUID, Decimal, bytes); typed here because kombu is not.
_dumps: Callable[[Any], str] = kombu_json.dumps
_loads: Callable[[str], Any] = kombu_json.loads


def parse_instant(value: Any) -> datetime | None:
    """An ``eta``/``expires`` header (ISO text or datetime) as an aware datetime; naive is UTC."""
    if value is None or value == "":
        return None
    instant = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class CeleryMessage:
    """One protocol-v2 task message, decoded."""

    headers: dict[str, Any]
    args: list[Any]
    kwargs: dict[str, Any]
    embed: dict[str, Any]
    queue: str
    properties: dict[str, Any] = field(default_factory=dict)
    job_id: UUID = field(default_factory=new_job_id)

    @property
    def task(self) -> str:
        return str(self.headers["task"])

    @property
    def task_id(self) -> str:
        return str(self.headers["id"])

    @property
    def retries(self) -> int:
        return int(self.headers.get("retries") or 0)

    @property
    def nesting(self) -> int:
        return int(self.headers.get("replaced_task_nesting") or 0)

    @property
    def eta(self) -> datetime | None:
        return parse_instant(self.headers.get("eta"))

    @property
    def expires(self) -> datetime | None:
        return parse_instant(self.headers.get("expires"))

    @property
    def priority(self) -> int:
        value = self.properties.get("priority")
        if value is None:
            value = (self.properties.get("delivery_info") or {}).get("priority")
        if value is None:
            return 0
        return max(PRIORITY_MIN, min(PRIORITY_MAX, int(value)))

    def input_json(self) -> str:
        """The row's ``input``: the whole message, in kombu's JSON (types preserved)."""
        return str(
            _dumps(
                {
                    "args": list(self.args),
                    "kwargs": dict(self.kwargs),
                    "embed": dict(self.embed),
                    "headers": dict(self.headers),
                    "properties": dict(self.properties),
                }
            )
        )

    def params(
        self, max_attempts: int, now: datetime | None, *, input_json: str | None = None
    ) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "retries": self.retries,
            "nesting": self.nesting,
            "id": self.job_id,
            "name": self.task,
            "queue": self.queue,
            "input": self.input_json() if input_json is None else input_json,
            "max_attempts": max_attempts,
            "priority": self.priority,
            "run_at": self.eta,
            "now": now,
            "traceparent": (self.headers.get("traceparent") or tracing.current_traceparent()),
            "enqueued_by": "celery_compat",
        }


def is_celery_input(value: Any) -> bool:
    return isinstance(value, dict) and "headers" in value and "embed" in value


# kombu's decoder hook (kombu >= 5.3); without it every input takes the text round trip.
_object_hook: Callable[[dict[str, Any]], Any] | None = getattr(kombu_json, "object_hook", None)
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


class _NotPlainJson(Exception):
    """A value psycopg's jsonb decoding cannot have produced: take the slow, exact path."""


def _restore(value: Any) -> Any:
    """What ``kombu loads(json.dumps(value))`` returns, without the text round trip: a copy in
    which every object goes through kombu's ``object_hook`` bottom-up, as the decoder does."""
    kind = type(value)
    if kind is dict:
        if _object_hook is None or not all(type(k) is str for k in value):
            raise _NotPlainJson
        return _object_hook({k: _restore(v) for k, v in value.items()})
    if kind is list:
        return [_restore(v) for v in value]
    if kind in _JSON_SCALARS:
        return value
    raise _NotPlainJson


def from_input(value: Any, *, queue: str, job_id: UUID | None = None) -> CeleryMessage:
    """Rebuild the message from a row's ``input`` (as psycopg decoded the jsonb); ``job_id``: the
    row's id (else a new one is drawn)."""
    try:
        restored = _restore(value)
    except _NotPlainJson:
        restored = _loads(json.dumps(value))
    return CeleryMessage(
        headers=dict(restored.get("headers") or {}),
        args=list(restored.get("args") or []),
        kwargs=dict(restored.get("kwargs") or {}),
        embed=dict(restored.get("embed") or {}),
        queue=queue,
        properties=dict(restored.get("properties") or {}),
        job_id=new_job_id() if job_id is None else job_id,
    )

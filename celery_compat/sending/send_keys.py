"""Which sends are deduplicated, and by what: Celery's send semantics on a table.

Why it exists: Celery runs every message an app sends, including one re-sent under an id it
already used (a frozen signature sent twice, ``self.request.retries -= 1; raise self.retry()``,
which re-sends the running message's own (task id, retries)). What must still be absorbed are
duplicates the app never meant: a transport or a crash replaying a send. The rule, decided here
and nowhere else:

* a send from outside a running task body (client code, a view, a test) has NO key: every one is
  a new job, as on a broker;
* a beat occurrence (header ``ujobs_occurrence``, sent by ``ujobs-bridge scheduler`` or by celery
  beat's ``celery_compat.beat.scheduler``) is keyed by its identity (task id, retries,
  replaced-task nesting; its task id is derived from entry and instant): both schedulers sending
  one occurrence store it once;
* a send from inside a running task body is keyed by the sending job row, the message's identity
  and its ordinal among this run's sends of that identity: a row re-run after a crash (its
  worker died after the send, before the row was settled) replays its sends into the same keys
  and they are absorbed, so a crash loop stays one row bounded by ``ujobs_max_deliveries`` and
  never multiplies; the next row (the retry the run sent, even under the same key) is a new
  sender with keys of its own, so it runs;
* ``migrate`` keys every drained message by its identity (a broker cannot tell a redelivery from
  a re-publish), as the transport duplicate it may be.

The running body's own re-sends (same task id) are held until its outcome is stored
(``running_body``), so a body that crashes after sending sends nothing.

What it is not: the ledger's SQL (``db/message_jobs.py``) or the sender (``sending.py``).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

# The sender of keys that are a message's own identity (beat occurrences, drained messages).
NO_SENDER = UUID(int=0)
OCCURRENCE_HEADER = "ujobs_occurrence"


@dataclass(frozen=True, slots=True)
class SendKey:
    """A ledger key: a second send under the same key is absorbed."""

    task_id: str
    retries: int
    nesting: int
    sent_by: UUID = NO_SENDER
    ordinal: int = 0


def identity_key(message: Any) -> SendKey:
    """The key of a message's own identity (what beat occurrences and drained messages use)."""
    return SendKey(message.task_id, message.retries, message.nesting)


@dataclass(slots=True)
class RunningBody:
    """The task body running in this context: its row, its task id, what it sent."""

    job_id: UUID
    task_id: str
    held: list[tuple[Any, SendKey]] = field(default_factory=list)
    sent: dict[tuple[str, int, int], int] = field(default_factory=dict)

    def key_for(self, message: Any) -> SendKey:
        identity = (message.task_id, message.retries, message.nesting)
        ordinal = self.sent.get(identity, 0)
        self.sent[identity] = ordinal + 1
        return SendKey(*identity, sent_by=self.job_id, ordinal=ordinal)


_running: contextvars.ContextVar[RunningBody | None] = contextvars.ContextVar(
    "celery_compat_running_body", default=None
)


class running_body:
    """While task ``task_id`` (row ``job_id``) runs: key its sends, and hold back the messages
    it sends under its own task id (its ``self.retry``); the executor sends those
    (``BridgeAMQP.insert_now``) after the tracer stored the outcome. ``with`` gives the list
    of what was held, ``(message, key)`` pairs.

    Why hold: Celery publishes the retry and THEN stores RETRY. On a broker that gap is hidden
    by the round trip; here a ``countdown=0`` retry can run and store SUCCESS inside it, and the
    late RETRY then overwrites SUCCESS (``get()`` waits forever). A body that crashes after its
    send sends nothing; a crash after the send replays it under the same key (absorbed).

    A class rather than a generator: it is entered once per task run."""

    __slots__ = ("_body", "_token")

    def __init__(self, job_id: UUID, task_id: str) -> None:
        self._body = RunningBody(job_id, task_id)
        self._token: contextvars.Token[RunningBody | None] | None = None

    def __enter__(self) -> list[tuple[Any, SendKey]]:
        self._token = _running.set(self._body)
        return self._body.held

    def __exit__(self, *exc_info: object) -> None:
        assert self._token is not None
        _running.reset(self._token)


def key_of(message: Any) -> tuple[SendKey | None, bool]:
    """(the key ``message`` is sent under, whether the running body holds it back)."""
    body = _running.get()
    if body is not None:
        return body.key_for(message), message.task_id == body.task_id
    if OCCURRENCE_HEADER in message.headers:
        return identity_key(message), False
    return None, False


def hold(message: Any, key: SendKey) -> None:
    """Hold ``message`` until the running body's outcome is stored (see ``running_body``)."""
    body = _running.get()
    assert body is not None, "hold() outside a running task body"
    body.held.append((message, key))

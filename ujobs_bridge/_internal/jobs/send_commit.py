"""How durable a send is when it returns: the send commit a user chooses, and where it applies.

Why it exists: by default a send (an engine ``enqueue``, a Celery ``.delay()``) returns once its
commit is flushed to the WAL, so a server crash cannot lose a job the caller was told about.
That flush is most of a one-by-one send's cost, and a broker such as Redis without an fsynced
append-only file flushes nothing. A user may choose, knowingly, per client or app and per call:

- ``"on"`` (the default): the send's commit waits as the server's ``synchronous_commit`` says
  (PostgreSQL's default: until the commit is flushed); nothing is set.
- ``"local"``: ``synchronous_commit = local`` for the send's own transaction: flushed locally,
  not waiting for synchronous standbys (the same as ``"on"`` on a server without them).
- ``"off"``: ``synchronous_commit = off`` for the send's own transaction: it returns before
  the flush; a server crash can lose the sends of the last moments (up to three times
  ``wal_writer_delay``, 600 ms by default), never corrupting anything.

It applies only to a transaction the send owns (the client's or app's pooled connection, one
statement or one batch). A send that joins the caller's transaction (``conn=``,
``enqueue_in``, Django's ``atomic()``) commits when and as the caller commits: a per-call choice
there is refused (``UJ_SEND_COMMIT_IN_TRANSACTION``), a client's or app's default is not used.
A Celery task's own re-send that the worker writes with the task's outcome (``self.retry``,
under a send key) is as durable as that outcome's commit.

What it is not: a server setting. The level is set with ``set_config(..., true)`` inside the
send's own statement (``db/sql``), so it ends with that transaction and never reaches another.
"""

from __future__ import annotations

from typing import Literal

from ujobs_bridge.errors import ConfigError, ErrorCode

SendCommit = Literal["on", "local", "off"]
SEND_COMMITS: tuple[str, ...] = ("on", "local", "off")
DEFAULT: SendCommit = "on"


def checked(value: object, *, what: str) -> SendCommit:
    """``value`` if it is one of ``SEND_COMMITS``; refused otherwise (``what``: where it was set)."""
    if isinstance(value, str) and value in SEND_COMMITS:
        return value  # type: ignore[return-value]
    raise ConfigError(
        f"{what} must be one of {', '.join(repr(v) for v in SEND_COMMITS)}, got {value!r}",
        hint='"on" (the default) waits for the WAL flush; "local" skips synchronous standbys; '
        '"off" returns before the flush (a server crash can lose the last moments of sends)',
        code=ErrorCode.JOB_OPTION_INVALID,
    )


def level(value: SendCommit | None) -> str | None:
    """The ``synchronous_commit`` a send's own statement sets: None (set nothing) for ``"on"``."""
    return None if value is None or value == "on" else value


def refused_in_transaction(what: str) -> ConfigError:
    """A per-call send commit on a send that joins the caller's transaction."""
    return ConfigError(
        f"{what} was given for a send that joins your transaction: it commits when and as "
        "your transaction commits",
        hint="drop the option inside a transaction (set synchronous_commit on your own "
        "transaction with SET LOCAL if you mean to), or send outside it",
        code=ErrorCode.SEND_COMMIT_IN_TRANSACTION,
    )

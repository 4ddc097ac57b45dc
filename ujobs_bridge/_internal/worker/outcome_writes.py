"""Writing outcomes: a batch despite one bad item, and the shutdown's last flush despite an outage.

Why it exists: outcomes go to the database as one document per batch, so ONE item the database
refuses (an error message or a return value with a NUL character or a lone surrogate, a result
too large for ``jsonb``) fails the whole batch. Retried as it is, the batch fails forever: the
worker never claims again and the other jobs' results are lost. ``write_isolating`` splits a
rejected batch in halves until the bad item stands alone, then stores it repaired
(``sanitized``: NUL escaped as the text ``\\u0000``, lone surrogates escaped, the error text
truncated) or, if even that is refused, failed with a clear code (``UJ_OUTPUT_TOO_LARGE``,
``UJ_OUTPUT_REJECTED``: the job ends ``dead`` with the database's reason). An error of the
connection (``connections.connection_state``: an outage, or a prepared statement the session
lost behind a transaction pooler) is not the data's fault: nothing is split, everything not
written yet is kept for the next pass, on a fresh connection. So is an error that even the bare, failed form of an item cannot get past
(a missing table, a revoked grant): no job is failed for the database's own state.

``flush_all`` is the shutdown's last write: every outcome still owed, retried with backoff
through an outage until a deadline, never raised (SIGTERM during an outage exits cleanly).

What it is not: the batching (``outcome_batch.py``) or the claim loop's pacing (``loop.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from uuid import UUID

import psycopg

from ujobs_bridge._internal.db.connections import Backoff, connection_state
from ujobs_bridge._internal.worker.outcome_batch import OutcomeBatch
from ujobs_bridge.errors import ErrorCode
from ujobs_bridge.records import JobState, Settlement

log = logging.getLogger("ujobs.worker")

ERROR_LIMIT = 32_000  # characters of an error text kept (head and tail)
ERROR_HEAD = 4_000
OUTPUT_LIMIT = 200 * 1024 * 1024  # a jsonb value cannot exceed 255 MB; leave room for the rest

Write = Callable[[list[Settlement]], set[UUID]]


def clean_text(text: str) -> str:
    """``text`` as Postgres accepts it: NUL as the six characters ``\\u0000``, a lone surrogate
    as its ``\\udxxx`` escape."""
    if "\x00" in text:
        text = text.replace("\x00", "\\u0000")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def truncated(text: str, limit: int = ERROR_LIMIT) -> str:
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    tail = limit - ERROR_HEAD
    return f"{text[:ERROR_HEAD]}\n... [{cut} characters cut] ...\n{text[-tail:]}"


def _clean_value(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean_value(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): _clean_value(v) for k, v in value.items()}
    return value


def sanitized(s: Settlement) -> Settlement | None:
    """``s`` with its error text and output made storable; ``None`` if there is nothing to fix
    (or the output is too large to be stored at all)."""
    error = None if s.error is None else truncated(clean_text(s.error))
    output = s.output_json
    if output is not None:
        if len(output) > OUTPUT_LIMIT:
            return None
        try:
            output = json.dumps(_clean_value(json.loads(output)))
        except ValueError:
            return None
    if error == s.error and output == s.output_json:
        return None
    return replace(s, error=error, output_json=output)


def refused(s: Settlement, exc: BaseException) -> Settlement:
    """The bare form of an outcome the database would not store: a finished job's result
    becomes a failure with a code; any other outcome keeps its state and loses its text."""
    reason = truncated(clean_text(str(exc).strip().splitlines()[0] if str(exc).strip() else ""))
    too_large = (isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith("54")) or len(
        s.output_json or ""
    ) > OUTPUT_LIMIT
    code = ErrorCode.OUTPUT_TOO_LARGE if too_large else ErrorCode.OUTPUT_REJECTED
    if s.state is JobState.DONE:
        size = len(s.output_json or "")
        return replace(
            s,
            state=JobState.DEAD,
            output_json=None,
            error=f"{code.value}: the job's result ({size} characters of JSON) could not be "
            f"stored: {reason}",
        )
    return replace(
        s, output_json=None, error=f"{code.value}: the error text could not be stored: {reason}"
    )


def write_batch(write: Write, batch: list[Settlement], outcomes: OutcomeBatch) -> None:
    """Write ``batch``; a batch the database refuses is written by halves (``write_isolating``);
    on an infrastructure error it goes back to ``outcomes`` and the error is raised."""
    try:
        matched = write(batch)
    except Exception as exc:
        if connection_state(exc):
            outcomes.restore(batch)
            raise
        log.warning("ujobs.worker.outcomes_refused: isolating the bad item: %s", exc)
        write_isolating(write, batch, outcomes)
        return
    outcomes.written(batch, matched)


def flush_all(
    flush: Callable[[], object],
    outcomes: OutcomeBatch,
    *,
    reset: Callable[[], None],
    until: float,
    hurry: threading.Event,
) -> None:
    """Call ``flush`` until nothing is owed, retrying through an outage with backoff until
    ``until`` (monotonic) or ``hurry``; what is left then is logged, never raised (its jobs run
    again once their leases run out)."""
    pace = Backoff(cap_s=2.0)
    while outcomes:
        try:
            flush()
            pace.reset()
            continue
        except Exception as exc:
            reset()
            pause = pace.next()
            if hurry.is_set() or time.monotonic() + pause > until:
                log.error(
                    "ujobs.worker.outcomes_unwritten: %d outcome(s) could not be written before "
                    "the worker exits (%s); their jobs run again once their leases run out [%s]",
                    len(outcomes.leases()),
                    exc,
                    ErrorCode.DATABASE_UNAVAILABLE.value,
                )
                return
            log.warning("ujobs.worker.db_error: %s", exc)
        hurry.wait(pause)


def write_isolating(write: Write, batch: list[Settlement], outcomes: OutcomeBatch) -> None:
    """Write ``batch`` (which ``write`` refused as a whole) by halves until each part is written
    or its one bad item is stored repaired. On an infrastructure error, or an error no repair
    gets past, whatever is not written yet goes back to ``outcomes`` and the error is raised."""
    chunks = [batch]
    while chunks:
        chunk = chunks.pop()
        try:
            outcomes.written(chunk, write(chunk))
            continue
        except Exception as exc:
            if connection_state(exc):
                outcomes.restore([s for c in [chunk, *chunks] for s in c])
                raise
            failure = exc
        if len(chunk) > 1:
            middle = len(chunk) // 2
            chunks += [chunk[middle:], chunk[:middle]]
            continue
        try:
            _repair(write, chunk[0], failure, outcomes)
        except Exception:
            outcomes.restore([s for c in [chunk, *chunks] for s in c])
            raise


def _repair(write: Write, bad: Settlement, failure: Exception, outcomes: OutcomeBatch) -> None:
    """Store the one outcome the database refused: sanitized, else refused with a code."""
    fixed = sanitized(bad)
    if fixed is not None:
        try:
            outcomes.written([fixed], write([fixed]))
            log.warning(
                "ujobs.worker.outcome_sanitized: job %s: stored with NUL or surrogates escaped "
                "and the error text truncated (%s)",
                bad.id,
                failure,
            )
            return
        except Exception as exc:
            if connection_state(exc):
                raise
            failure = exc
    bare = refused(bad, failure)
    outcomes.written([bare], write([bare]))  # refused too: not the item's fault, raised
    log.error("ujobs.worker.outcome_refused: job %s: %s", bad.id, bare.error)

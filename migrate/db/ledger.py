"""The Celery message ledger as the drain reads it: the arguments of the job a message already is.

Why it exists: a redelivered or re-sent message whose (task id, retries, nesting) is in the
ledger (as a drained message's or a beat occurrence's key) is a duplicate only if it carries the
same arguments; the drain compares them, and this module is the only code that runs that read
(``migrate_ledger_arguments`` in ``sql/migrate.sql``).

What it is not: the ledger's writer (celery_compat's ``db/message_jobs.py`` inserts the ledger
row and the job in one statement).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from celery_compat.sending.message_row import from_input
from migrate.db import q


@dataclass(frozen=True, slots=True)
class LedgerKey:
    """What the ledger deduplicates a Celery message by."""

    task_id: str
    retries: int
    nesting: int


def stored_arguments(
    conn: psycopg.Connection[Any], keys: Sequence[LedgerKey]
) -> dict[LedgerKey, tuple[Any, Any]]:
    """key → (args, kwargs) of the job the ledger points at, for the keys whose job is still there
    (the retention sweep may have removed it and kept nothing to compare)."""
    params = {
        "task_ids": [k.task_id for k in keys],
        "retries": [k.retries for k in keys],
        "nestings": [k.nesting for k in keys],
    }
    rows = conn.execute(q("migrate_ledger_arguments"), params).fetchall()
    return {LedgerKey(str(r[0]), int(r[1]), int(r[2])): _arguments(r[3]) for r in rows}


def arguments_of(input_text: str) -> tuple[Any, Any]:
    """(args, kwargs) of a row ``input`` as the drain encoded it, read as the worker reads it."""
    return _arguments(json.loads(input_text))


def _arguments(value: Any) -> tuple[Any, Any]:
    message = from_input(value, queue="")
    return message.args, message.kwargs

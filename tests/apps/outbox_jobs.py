"""A job to stage through the outbox; nothing runs it in the outbox tests (rows stay ``ready``)."""

from __future__ import annotations

from ujobs_bridge import job


@job(queue="outbox-tests")
def deliver(seq: int) -> None:
    """The n-th staged row's job."""

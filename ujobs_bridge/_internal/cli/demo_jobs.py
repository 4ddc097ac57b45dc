"""The jobs ``ujobs-bridge demo`` runs: ordinary module-level ``@job`` functions.

Why it exists: the demo should exercise the engine the way an application does. These jobs are
importable by name, so a real worker runs them too::

    ujobs-bridge worker -A ujobs_bridge._internal.cli.demo_jobs -Q demo-<hex>

``process_order`` fails on purpose on its first ``fail_attempts`` attempts (it reads its attempt
number from ``current_job()``, so the plan is deterministic and the retries the database shows can
be checked against it); ``charge_card`` always fails and ends as a dead letter.

What it is not: test fixtures (``tests/apps``) or a benchmark (``bench/``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from ujobs_bridge._internal.jobs.context import current_job
from ujobs_bridge.job import job

DEMO_QUEUE = "demo"  # the declared queue; the demo enqueues into a queue unique to each run
BACKOFF_S = 0.05


class PaymentGatewayTimeout(Exception):
    """A transient failure: worth another attempt."""


class CardDeclined(Exception):
    """A failure no retry fixes."""


@job(queue=DEMO_QUEUE, max_attempts=5, backoff=BACKOFF_S, backoff_cap=1.0, jitter=True)
def process_order(order_id: int, fail_attempts: int = 0) -> dict[str, Any]:
    """Price an order; attempts up to ``fail_attempts`` time out at the 'payment gateway'."""
    attempt = current_job().attempt
    if attempt <= fail_attempts:
        raise PaymentGatewayTimeout(
            f"order {order_id}: payment gateway timed out (attempt {attempt})"
        )
    digest = hashlib.sha256(f"order:{order_id}".encode()).hexdigest()
    return {"order_id": order_id, "total_cents": int(digest[:6], 16) % 100_000, "attempt": attempt}


@job(queue=DEMO_QUEUE, max_attempts=3, backoff=BACKOFF_S, backoff_cap=1.0, jitter=True)
def charge_card(order_id: int, card_last4: str) -> None:
    """Always declined: retried ``max_attempts`` times, then dead-lettered."""
    raise CardDeclined(f"order {order_id}: card ending {card_last4} was declined (expired)")

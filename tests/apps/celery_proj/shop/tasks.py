"""The shop app's tasks, written for plain Celery: ``from celery import shared_task`` is left
untouched, yet with the project's celery_compat app these tasks run on the bridge."""

from __future__ import annotations

from collections import Counter
from typing import Any

from celery import shared_task

RAN: Counter[str] = Counter()


class PaymentGatewayDown(Exception):
    pass


@shared_task
def send_invoice(order_id: int) -> str:
    RAN["send_invoice"] += 1
    return f"invoice {order_id} sent"


@shared_task(
    bind=True,
    autoretry_for=(PaymentGatewayDown,),
    retry_backoff=True,
    retry_jitter=False,
    retry_kwargs={"max_retries": 3},
)
def charge(self: Any, order_id: int, fail_times: int) -> str:
    RAN["charge"] += 1
    if self.request.retries < fail_times:
        raise PaymentGatewayDown(f"gateway down for order {order_id}")
    return f"charged {order_id} after {self.request.retries} retries"


@shared_task(bind=True, max_retries=2)
def sync_stock(self: Any, sku: str, fail_times: int) -> str:
    RAN["sync_stock"] += 1
    try:
        if self.request.retries < fail_times:
            raise ConnectionError(f"warehouse unreachable for {sku}")
    except ConnectionError as exc:
        raise self.retry(exc=exc, countdown=30) from exc
    return f"{sku} synced"


@shared_task
def notify(order_id: int) -> str:
    """Sends another shared task from inside a task (the proxy must resolve to this app)."""
    RAN["notify"] += 1
    return str(send_invoice.delay(order_id).id)

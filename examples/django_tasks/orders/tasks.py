"""The example's ``django.tasks`` tasks, found by ``manage.py ujobs_worker`` in this app's
``tasks.py`` (plain Django code: nothing here names ujobs-bridge).

``RAN`` records what ran in this process, in order (the tests read it)."""

from __future__ import annotations

from typing import Any

try:  # Django 6+
    from django.tasks import TaskContext, task
except ImportError:  # Django 4.2-5.2: the django-tasks backport, same API
    from django_tasks import TaskContext, task

RAN: list[str] = []


@task()
def add(a: int, b: int) -> int:
    RAN.append(f"add {a} {b}")
    return a + b


@task(priority=50)
def rush(label: str) -> str:
    RAN.append(f"rush {label}")
    return label


@task(priority=-50)
def whenever(label: str) -> str:
    RAN.append(f"whenever {label}")
    return label


class PaymentDeclined(Exception):
    """A failure of the task's own."""


@task()
def charge(amount: int) -> None:
    RAN.append(f"charge {amount}")
    raise PaymentDeclined(f"card declined for {amount}")


@task(backend="retrying", takes_context=True)
def flaky_sync(context: TaskContext, shop: str) -> str:
    RAN.append(f"flaky_sync {shop} attempt {context.attempt}")
    if context.attempt == 1:
        raise ConnectionError(f"{shop} did not answer")
    return f"{shop} synced"


@task(queue_name="emails")
def send_receipt(order_id: int) -> dict[str, Any]:
    RAN.append(f"receipt {order_id}")
    return {"order": order_id, "sent": True}


@task(takes_context=True)
def whoami(context: TaskContext, note: str) -> dict[str, Any]:
    RAN.append(f"whoami {note}")
    seen = whoami.get_result(context.task_result.id)  # its own result, read while it runs
    return {
        "id": context.task_result.id,
        "attempt": context.attempt,
        "note": note,
        "status": seen.status,
        "started": seen.started_at is not None,
    }


@task()
async def add_later(a: int, b: int) -> int:
    RAN.append(f"add_later {a} {b}")
    return a + b

"""The app's Celery tasks, found by ``app.autodiscover_tasks()``; a ``PeriodicTask`` row names
them by their dotted name (``reports.tasks.nightly_report``)."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task
def nightly_report(label: str, **options: Any) -> str:
    return f"report {label}"

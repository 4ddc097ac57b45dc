"""The project's tasks, bound to the project's app as in Celery's guide."""

from __future__ import annotations

from .celery import app


@app.task
def add(x: int, y: int) -> int:
    return x + y

"""``celery_compat.utils.log``: Celery's task loggers (``get_task_logger``), re-exported.

What it is not: a logging setup; Celery's own functions, unchanged.
"""

from __future__ import annotations

from celery.utils.log import get_logger, get_task_logger

__all__ = ["get_logger", "get_task_logger"]

"""``celery_compat.utils``: mirrors ``celery.utils`` for the submodules apps import (``log``).

What it is not: a utilities grab-bag; it only holds Celery's module names.
"""

from __future__ import annotations

from celery.utils import uuid

__all__ = ["uuid"]

"""``DjangoTask``: a task base with ``delay_on_commit``/``apply_async_on_commit`` (Celery 5.4+).

Why it exists: ``celery.contrib.django.task.DjangoTask`` exists from Celery 5.4 on and is what
Celery's Django fixup makes every task's base; code written against it calls
``task.delay_on_commit(...)``. This is the same class where Celery has it (so ``isinstance``
checks and the fixup agree) and an identical one on Celery 5.3.

On the bridge, prefer plain ``delay()`` inside ``transaction.atomic()`` when Django's database is
the jobs database: the message row is written in your transaction (no window where the commit
happened and the send did not, or the reverse). ``delay_on_commit`` sends after the commit, in
its own transaction, exactly like Celery; it returns ``None`` (no ``AsyncResult``), as Celery's.

What it is not: a transaction manager; Django's ``transaction.on_commit`` decides when it runs.
"""

from __future__ import annotations

import functools
from typing import Any

try:  # Celery 5.4+
    from celery.contrib.django.task import DjangoTask as _Base

    _CELERY_HAS_IT = True
except ImportError:  # pragma: no cover - Celery 5.3
    from celery import Task as _Base

    _CELERY_HAS_IT = False


class DjangoTask(_Base):  # type: ignore[misc]
    """Task base whose sends can wait for the surrounding Django transaction to commit."""

    def delay_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """``delay(*args, **kwargs)`` once the current Django transaction commits."""
        from django.db import transaction  # optional: Django, in a Django project only

        transaction.on_commit(functools.partial(self.delay, *args, **kwargs))

    def apply_async_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """``apply_async(*args, **kwargs)`` once the current Django transaction commits."""
        from django.db import transaction  # optional: Django, in a Django project only

        transaction.on_commit(functools.partial(self.apply_async, *args, **kwargs))


__all__ = ["DjangoTask"]

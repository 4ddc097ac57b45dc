"""``celery_compat.result``: Celery's ``celery.result``, re-exported so ``s/celery/celery_compat/``
on imports is the whole change.

What it is not: a copy. These are Celery's own objects; the bridge changes what is behind the
app (sending, results, execution), not these names.
"""

from __future__ import annotations

from celery.result import *  # noqa: F403
from celery.result import __all__ as __all__

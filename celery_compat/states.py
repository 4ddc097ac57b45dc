"""``celery_compat.states``: Celery's ``celery.states``, re-exported so ``s/celery/celery_compat/``
on imports is the whole change.

What it is not: a copy. These are Celery's own objects; the bridge changes what is behind the
app (sending, results, execution), not these names.
"""

from __future__ import annotations

from celery.states import *  # noqa: F403
from celery.states import __all__ as __all__

"""``celery_compat.exceptions``: Celery's ``celery.exceptions``, re-exported so ``s/celery/celery_compat/``
on imports is the whole change.

What it is not: a copy. These are Celery's own objects; the bridge changes what is behind the
app (sending, results, execution), not these names.
"""

from __future__ import annotations

from celery.exceptions import *  # noqa: F403
from celery.exceptions import __all__ as __all__

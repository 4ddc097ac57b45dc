"""One project seen from both systems during the cutover, for ``test_celery_two_systems.py``.

``bridge`` is the project's celery_compat app: tasks named ``two.kept_*`` are listed in
``ujobs_broker_tasks``, so ``.delay()`` still publishes them to the Celery broker, and its
``result_backend`` is the one the Celery workers store into. ``celery`` is the same project as a
plain ``celery.Celery`` app, run by a real Celery worker. Both name the test kit's own Redis
(db 12: this file's), never a shared server's db 0.
"""

from __future__ import annotations

from typing import Any

import celery

from celery_compat import Celery
from ujobs_bridge.testing import redis_url

REDIS_DB = 12
REDIS_URL = redis_url(REDIS_DB)
CONF: dict[str, Any] = {
    "broker_url": REDIS_URL,
    "result_backend": REDIS_URL,
    "broker_connection_retry_on_startup": True,
    "worker_hijack_root_logger": False,
}

bridge = Celery("two_systems_bridge", set_as_current=False)
bridge.conf.update(CONF, ujobs_broker_tasks=["two.kept_*"])
plain = celery.Celery("two_systems_celery", set_as_current=False)
plain.conf.update(CONF)


def _add(x: int, y: int) -> int:
    return x + y


def _fail(why: str) -> None:
    raise ValueError(why)


kept_add = bridge.task(name="two.kept_add", shared=False)(_add)
kept_fail = bridge.task(name="two.kept_fail", shared=False)(_fail)
moved_add = bridge.task(name="two.moved_add", shared=False)(_add)
for name, body in (("two.kept_add", _add), ("two.kept_fail", _fail)):
    plain.task(name=name, shared=False)(body)

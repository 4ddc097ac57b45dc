"""``result.get()`` inside a task body raises, as in a Celery worker process.

Why it exists: a Celery worker process sets ``task_join_will_block`` so ``result.get()`` inside
a task raises (``disable_sync_subtasks``) unless wrapped in ``allow_join_result()``. Bridge
bodies share the process with whatever else runs there (an app's web threads, tests), so the
flag is kept per body thread: ``celery.result``'s two names are replaced, when this module is
imported, by thread-aware ones that fall back to Celery's process-wide flag outside a body.

What it is not: the run of a task (``execution.py`` enters :func:`joins_will_block` around the
tracer), nor a change to ``allow_join_result()``, which still works inside a body.
"""

from __future__ import annotations

import threading

import celery._state as celery_state
import celery.result as celery_result

_JOINS = threading.local()


def _join_will_block() -> bool:
    value = getattr(_JOINS, "will_block", None)
    return bool(celery_state.task_join_will_block() if value is None else value)


def _set_join_will_block(blocks: bool) -> None:
    if getattr(_JOINS, "will_block", None) is None:
        celery_state._set_task_join_will_block(blocks)
    else:
        _JOINS.will_block = bool(blocks)


def _install_join_guard() -> None:
    celery_result.task_join_will_block = _join_will_block
    celery_result._set_task_join_will_block = _set_join_will_block


class joins_will_block:
    """Inside a task body: ``result.get()`` raises, as in a Celery worker. (A class rather
    than a generator: it is entered once per task run.)"""

    __slots__ = ("_previous",)

    def __enter__(self) -> None:
        self._previous = getattr(_JOINS, "will_block", None)
        _JOINS.will_block = True

    def __exit__(self, *exc_info: object) -> None:
        _JOINS.will_block = self._previous


_install_join_guard()

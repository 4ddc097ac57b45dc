"""celery_compat: Celery 5's API on ujobs-bridge's durable Postgres engine.

Replace the word ``celery`` in imports (``from celery_compat import Celery, shared_task``), or
only the app's class, and tasks, ``delay``/``apply_async``, retries, canvas, results, beat,
signals and eager tests keep working, except that nothing is lost: every message is a row in
``x_jobs``, committed (inside your transaction if you are in one, see ``enqueue_in``) before
``delay()`` returns.

Everything here is Celery's own object except ``Celery`` (``app.py``) and ``enqueue_in``
(``transaction.py``); ``shared_task`` and friends bind to the current app, so untouched modules
that still say ``from celery import shared_task`` land on the bridge too.

``Celery`` and ``enqueue_in`` are imported when first asked for (PEP 562 ``__getattr__``): every
``import celery_compat.<submodule>`` runs this file, and what only reads messages (``ujobs-bridge
migrate``) needs neither the app class nor the engine's client behind it.

What it is not: a re-implementation of Celery. It needs the ``celery`` package (5.3-5.7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery import (
    Task,
    chain,
    chord,
    chunks,
    current_app,
    current_task,
    group,
    maybe_signature,
    shared_task,
    signature,
    states,
    uuid,
    xmap,
    xstarmap,
)

if TYPE_CHECKING:
    from celery_compat.app import Celery
    from celery_compat.sending.transaction import enqueue_in


# import cost: the app and the sending machinery load when Celery or enqueue_in is first used
def __getattr__(name: str) -> Any:
    if name == "Celery":
        from celery_compat.app import Celery

        value: Any = Celery
    elif name == "enqueue_in":
        from celery_compat.sending.transaction import enqueue_in

        value = enqueue_in
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # bound for good: the next look-up does not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Celery",
    "Task",
    "chain",
    "chord",
    "chunks",
    "current_app",
    "current_task",
    "enqueue_in",
    "group",
    "maybe_signature",
    "shared_task",
    "signature",
    "states",
    "uuid",
    "xmap",
    "xstarmap",
]

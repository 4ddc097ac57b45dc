"""``app.control`` for celery_compat apps: remote control over Postgres; revoke a durable row.

Why it exists: Celery's remote control is a broadcast over the broker answered by the workers
alive at that moment. A celery_compat app has no broker; its workers register nodes in Postgres
and read a mailbox there (the engine's remote control, ``ujobs_bridge.ext.control``).
``broadcast`` (and so every ``inspect()`` command, ``ping``, ``rate_limit``, ``time_limit``,
``add_consumer``, ``cancel_consumer``, ``pool_grow``/``pool_shrink``, ``autoscale``,
``shutdown``, ``enable_events``/``disable_events``, ``celery inspect|control|status``) sends
Celery's command as the engine's ``celery.<command>`` (the Celery set a Celery app's worker
answers, ``worker_commands.py``) through the engine's ``broadcast``: the same arguments
(``destination``, ``timeout``, ``limit``, ``reply``, ``callback``, ``pattern``/``matcher``) and
Celery's reply shapes (a list of ``{node: reply}``; ``inspect()`` flattens it with Celery's own
code). ``ping()`` answers only for live workers, and only Celery workers answer: a worker of
``@job`` functions alone has no Celery set, so it is neither asked nor waited for.
``purge()`` cancels the app's ready messages in Postgres and returns how many.

A revoke (``revoke``, and Celery's raw ``broadcast('revoke'|'terminate')`` that ``celery
control revoke|terminate`` sends) is made durable here, before any worker is asked
(``revoking.py``: recorded, the task's rows cancelled, REVOKED stored), so it holds with no
worker alive; with ``reply=True`` the live workers acknowledge it as Celery's do (they find it
recorded and only reply).

What it is not: the workers' side (``worker_control.py`` and the engine's panel).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery.app.control import Control
from celery.utils.functional import maybe_list
from kombu.matcher import match
from kombu.utils import json as kombu_json

from celery_compat.control import revoking
from celery_compat.control.names import COMMAND_SET, celery_node
from celery_compat.control.names import command as set_command
from celery_compat.db import message_jobs
from ujobs_bridge.ext import control as remote

log = logging.getLogger("celery_compat.control")
# kombu's JSON, as Celery's mailbox serializes (typed here because kombu is not)
_dumps: Callable[[Any], str] = kombu_json.dumps
_loads: Callable[[str], Any] = kombu_json.loads
_match: Callable[..., bool] = match  # kombu's matcher takes str (its hints say bytes)

REVOKING = ("revoke", "terminate")  # Celery's commands that revoke by task id


class BridgeControl(Control):  # type: ignore[misc]
    def revoke(
        self,
        task_id: Any,
        destination: Any = None,
        terminate: Any = False,
        signal: Any = "SIGTERM",
        **kwargs: Any,
    ) -> list[dict[str, Any]] | None:
        ids = [str(t) for t in maybe_list(task_id) or []]
        if kwargs.get("reply"):  # Celery: one reply per live worker that handled the broadcast
            arguments = {"task_id": ids, "terminate": terminate, "signal": signal}
            return self.broadcast("revoke", arguments, destination=destination, **kwargs)
        revoking.revoke_tasks(self.app, ids, terminate=terminate, signal=signal)
        return None

    def purge(self, connection: Any = None) -> int:
        """Cancel the app's ready messages in Postgres (every queue it consumes or routes to),
        as Celery's purge discards the queued messages; returns how many, and logs it."""
        counts = self.purge_queues(app_queues(self.app))
        total = sum(counts.values())
        log.info("Purged %d messages from %d queues in Postgres", total, len(counts))
        return total

    discard_all = purge

    def purge_queues(self, queues: Any) -> dict[str, int]:
        """Cancel the ready messages of ``queues``; how many per queue."""
        with self.app.ujobs_client.pool.connection() as conn:
            return message_jobs.purge_ready(conn, sorted({str(q) for q in queues}))

    def broadcast(
        self,
        command: str,
        arguments: Any = None,
        destination: Any = None,
        connection: Any = None,
        reply: bool = False,
        timeout: float | None = 1.0,
        limit: int | None = None,
        callback: Any = None,
        channel: Any = None,
        pattern: Any = None,
        matcher: Any = None,
        **extra_kwargs: Any,
    ) -> list[dict[str, Any]] | None:
        """Celery's ``broadcast`` through the Postgres mailbox (see the module docstring)."""
        if destination is not None and not isinstance(destination, list | tuple):
            raise ValueError(f"destination must be a list/tuple not {type(destination)}")
        arguments = dict(arguments or {}, **extra_kwargs)
        if command in REVOKING:  # Celery's CLI sends these raw: the revoke is made durable here
            revoking.revoke_tasks(
                self.app,
                maybe_list(arguments.get("task_id")) or [],
                terminate=command == "terminate" or arguments.get("terminate"),
                signal=arguments.get("signal"),
            )
        with self.app.ujobs_client.pool.connection() as conn:
            if pattern and matcher:
                live = [n for n in remote.nodes_live(conn, None) if celery_node(n.info)]
                destination = sorted({n.name for n in live if _match(n.name, pattern, matcher)})
                if not destination:
                    return [] if reply else None
            on_reply = None
            if callback is not None:

                def on_reply(answer: remote.Reply) -> None:
                    callback({answer.node: _loads(answer.value_json)})

            got = remote.broadcast(
                conn,
                set_command(command),
                _dumps(arguments),
                destination=None if destination is None else [str(d) for d in destination],
                reply=reply,
                timeout=1.0 if timeout is None else timeout,  # Celery: None is the default
                limit=limit,
                on_reply=on_reply,
                command_set=COMMAND_SET,
            )
        if not reply:
            return None
        return [{answer.node: _loads(answer.value_json)} for answer in got]


def app_queues(app: Any) -> set[str]:
    """The queues the app's messages go to: its declared queues, the default queue, and every
    queue a task routes to (its ``queue=`` or ``task_routes``)."""
    # import cost: the execution loads only when the queues are asked for
    from celery_compat.worker.execution import jobs_for_app

    names = {str(name) for name in app.amqp.queues}
    names.add(str(app.conf.task_default_queue or "celery"))
    names.update(str(d.queue) for d in jobs_for_app(app))
    return names

"""What the drainer needs from the ``-A`` Celery app, read once: task names, queues, broker.

Why it exists: the app is the only source of code names the drainer trusts. A message whose task
name the app does not register is quarantined (never resolved by importing a name from data:
that would run code a message chose). The app also supplies the defaults an operator expects: the broker URL and
its transport options (``global_keyprefix``, ``sep``, ``priority_steps``), the queues Celery
would route its tasks to, which serializers it accepts, and ``ujobs_max_deliveries``.

What it is not: the app. Nothing here runs or sends a task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PIDBOX_SUFFIXES = (".pidbox", ".reply.celery.pidbox")


@dataclass(frozen=True, slots=True)
class AppInfo:
    tasks: frozenset[str]
    queues: tuple[str, ...] = ("celery",)
    routing: dict[str, str] = field(default_factory=dict)  # routing key → queue name
    max_attempts: int = 3
    accept_content: tuple[str, ...] = ("json",)
    broker_url: str | None = None
    transport_options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_app(cls, app: Any) -> AppInfo:
        app.loader.import_default_modules()
        app.finalize(auto=True)
        conf = app.conf
        queues: dict[str, None] = {}
        routing: dict[str, str] = {}
        for name, task in sorted(app.tasks.items()):
            if name.startswith("celery."):
                continue
            route = app.amqp.router.route({}, name, (), {}, task)
            queue = route.get("queue")
            queue_name = getattr(queue, "name", None) or queue or conf.task_default_queue
            if queue_name:
                queues[str(queue_name)] = None
        for queue_obj in app.amqp.queues.values():
            queues[str(queue_obj.name)] = None
            routing[str(queue_obj.routing_key or queue_obj.name)] = str(queue_obj.name)
        accept = tuple(str(a) for a in (conf.accept_content or ("json",)))
        return cls(
            tasks=frozenset(str(n) for n in app.tasks),
            queues=tuple(queues),
            routing=routing,
            max_attempts=int(conf.get("ujobs_max_deliveries") or 3),
            accept_content=accept,
            broker_url=conf.broker_read_url or conf.broker_url,
            transport_options=dict(conf.broker_transport_options or {}),
        )

    def queue_for_routing_key(self, routing_key: str) -> str:
        """The queue a routing key reaches (Celery's direct/topic default: the key names it)."""
        return self.routing.get(routing_key, routing_key)

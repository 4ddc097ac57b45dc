"""``ujobs-bridge migrate``: drain a live Celery broker into ``x_jobs``, nothing lost, nothing twice.

Why it exists: at cutover the work already sitting in Redis, RabbitMQ or another kombu broker
must become job rows of exactly the shape celery_compat's sender makes, each message once
(the ``x_celery_tasks`` ledger), with poison kept aside rather than dropped. Modules, by concern:
``decoding`` (bytes → values, untrusted), ``protocol`` (values → ``CeleryMessage``, v1 → v2),
``batch`` (one transaction per batch), ``quarantine``, the transports (``redis_drain``,
``amqp_drain``, ``kombu_drain``), ``runner`` (the loop) and ``report``.

What it is not: a Celery consumer. It never executes a task, never calls ``Message.decode()``,
and never imports code by a name found in a message.
"""

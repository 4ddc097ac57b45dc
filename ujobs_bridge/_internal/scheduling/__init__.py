"""Periodic work: cron and interval schedules, ``task()``, the leader lease and the scheduler.

Why it is a package: Celery beat's replacement is four concerns with one boundary: when a task is
due (``cron.py``), what fires (``task.py``), who may fire (``leader.py``), and the round that
fires each occurrence once (``scheduler.py``).

What it is not: a worker. Scheduled tasks only enqueue jobs; workers run them.

Imports nothing: the public names (``Scheduler``, ``task``, ``PeriodicTask``, ``Occurrence``) are
the root's (``ujobs_bridge``) and ``ujobs_bridge.ext.scheduling``'s; importing a submodule does
not import the scheduler.
"""

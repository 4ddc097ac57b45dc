"""Throughput, latency and memory benchmark: ujobs-bridge against Celery and a bare Postgres loop.

Why it exists: the project's claims ("faster than Celery", "close to the raw Postgres ceiling",
"flat memory") are only worth something if one command measures them, in one run, on the same
machine, with the noise shown. ``python -m bench`` does that; see ``__main__.py`` for the flags.

Layout (one module per concern, one per system):

- ``procs``: worker subprocesses in their own process groups, RSS sampling, deadlines.
- ``settings`` / ``pg`` / ``cells``: run parameters, bench-only databases, the shared cell
  procedures (timed enqueue, timed drain, idle pick-up latency loop).
- ``bridge_cli``: the ``ujobs-bridge`` CLI as the bridge-side systems drive it (``db upgrade``
  on a fresh database, ``worker`` subprocesses, the count of done rows).
- ``celery_system`` (+ ``celery_app``), ``raw_system`` (+ ``raw_consumer``), ``ujobs_system``
  (+ ``ujobs_tasks``): the systems, each with the same cell functions.
- ``compat_system`` (+ ``compat_tasks``): celery_compat on the bridge, measured only in the
  Celery-shaped cells (``.delay()`` one by one, 1,000 in one transaction, a one-process drain of
  ``@shared_task`` no-ops), beside the Celery systems measured the same way.
- ``migrate_system`` (+ ``migrate_app``): ``ujobs-bridge migrate`` (the CLI, a subprocess)
  draining 20,000 messages real Celery published to Redis and to RabbitMQ (``--cells
  drain-broker``; ``--only migrate``).
- ``runner``: rounds, cleanup; ``results``: the figures, as JSON; ``report``: the tables;
  ``targets``: the project targets, computed from the same figures.
- ``soak``: the chaos soak (``python -m bench.soak``), a package of its own: every workload
  on real processes while faults land, then the loss table (``bench/soak/__init__.py``).

What it is not: a test suite (nothing here asserts; targets are reported, not enforced), nor part
of the shipped package (``bench`` is not in ``[tool.setuptools.packages.find]``).
"""

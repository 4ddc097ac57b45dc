"""The chaos soak: ``python -m bench.soak`` runs every workload while it breaks things on purpose.

Why it exists: "never lose, never wedge" is a claim about a whole system under faults that
overlap, not about one fault in one test. The soak starts its OWN Postgres (the test kit's
``PrivateCluster``: a temporary ``initdb`` on a free port, so it never restarts a shared
server), then for ``--duration`` seconds runs plain ``@job`` jobs (some failing then
succeeding, a few poison), durable step jobs, Celery tasks through ``celery_compat``, a
seconds-level periodic task under two ``ujobs-bridge scheduler`` processes, and a
``ujobs-bridge migrate --follow`` draining a Redis queue that real Celery keeps filling, on
several real ``ujobs-bridge worker`` processes (thread and process pools). Folded into that mix
at low rates (``mix``): results over the workers' ``--max-result-bytes``, bodies that hang past
their timeout deaf to their signal (with retries), exceptions whose ``__str__`` raises, and
instants at the edges of the range or set by hand to ``-infinity``, 1 BC and year 10000.
Meanwhile a fault injector, on a seeded schedule, SIGKILLs workers (once with every slot and
prefetched place full), SIGSTOPs them (and SIGCONTs), terminates random backends and restarts
the server ``-m fast`` and ``-m immediate`` (once for longer than the lease). Bodies leave an
append-only record of every execution outside the database, so the verdict can count what ran
against what the database says (and against each attempt ``x_job_attempts`` recorded). Then it
lets the system settle, probes how many bodies each worker can still run at once, and prints
the loss table; the exit code is 1 if any loss column is not zero.

Layout (one module per concern):

- ``settings``: the run's parameters; ``plan``: the seeded fault schedule; ``mix``: what each
  item a producer sends is planned to do.
- ``marks``: the execution records bodies write (one append-only file per process), and the
  slot probe.
- ``jobs`` / ``celery_tasks`` / ``source``: the bodies (``-A`` targets of the workers, the
  scheduler and migrate) and the plain Celery app that publishes to Redis.
- ``fleet``: the supervised processes (restarted when they exit, as systemd would).
- ``faults``: the injector; ``producers``: the threads that enqueue and keep a ledger.
- ``verdict``: from records, ledger, faults and rows to the figures; ``table``: printing them.
- ``run``: one soak, phase by phase, always cleaned up.

What it is not: a benchmark (rates are kept low on purpose) or a substitute for the fault tests
(``tests/test_outages.py`` and friends pin each fault down alone).
"""

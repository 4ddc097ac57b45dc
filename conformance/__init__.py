"""Celery's own integration tests, run against real Celery on Redis and against celery_compat.

Why it exists: "a Celery user cannot tell the difference" is only a claim until Celery's own
tests say so. ``python -m conformance`` fetches the celery sdist matching the installed celery
version (at run time, into a cache dir; Celery's test files are never committed here), extracts
``t/integration/test_tasks.py`` and ``test_canvas.py`` with what they import, and runs them
twice with pytest: once on real Celery (local Redis as broker and result backend, Celery's own
integration ``conftest.py``), once on celery_compat through ``shim_conftest.py`` (the session
app and worker are ``celery_compat.contrib.pytest``'s, on a Postgres database made for the run;
the ``manager`` fixture and Celery's ``Manager`` are Celery's own, unmodified).
It prints passed/failed/skipped/error per file side by side, and each test that passes on
Celery but not on the bridge with the first line of its failure and, where known, the reason
(``known.py``). Results are also written as JSON under ``conformance/results/``.

What it is not: part of the shipped packages, nor a copy of Celery's tests.
"""

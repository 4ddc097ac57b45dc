"""``celery_compat.contrib.testing``: ``start_worker`` runs a real bridge worker in-process
(``worker.py``). Celery's own integration-test ``Manager``
(``celery.contrib.testing.manager.Manager``) needs nothing from here: it drives a bridge worker
unmodified, through ``app.control`` over Postgres.

What it is not: a mock; the worker claims real rows from the app's database.
"""

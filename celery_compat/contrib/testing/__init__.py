"""``celery_compat.contrib.testing``: ``start_worker`` runs a real bridge worker in-process
(``worker.py``); ``manager.Manager`` is Celery's integration-test manager with its worker
questions answered from job rows.

What it is not: a mock; the worker claims real rows from the app's database.
"""

"""``celery_compat.contrib.testing``: ``start_worker`` runs a real bridge worker in-process.

What it is not: a mock; the worker claims real rows from the app's database.
"""

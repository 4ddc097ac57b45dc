"""``ujobs_django``: Django on the durable engine — a ``django.tasks`` backend and ``manage.py``
commands that run the bridge's worker and scheduler from Django's own settings.

Why it exists: Django 6 ships ``django.tasks`` (DEP 14) with no production backend, and a Django
team should not need ``-A`` or a DSN of its own to run jobs. Put ``"ujobs_django"`` in
``INSTALLED_APPS`` and::

    TASKS = {"default": {"BACKEND": "ujobs_django.backend.UjobsTaskBackend"}}

then ``@task`` functions enqueue durable jobs (inside ``transaction.atomic()`` they commit or
roll back with it) and ``python manage.py ujobs_worker`` runs them. On Python 3.11, where
Django 6 does not install, the same API comes from the ``django-tasks`` package (the backport
DEP 14 was developed as); ``compat.py`` picks whichever is installed.

What it is not: Celery's Django integration (``celery_compat.contrib.django``) — nothing here
imports Celery. The read-only models over the engine's tables and their admin are an app of
their own, opt-in: ``ujobs_django.jobs``.
"""

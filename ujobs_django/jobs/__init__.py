"""``ujobs_django.jobs``: the bridge's jobs, dead letters, schedules and workers in Django's
admin, with retry, cancel and discard actions. Put ``"ujobs_django.jobs"`` in
``INSTALLED_APPS`` (beside ``django.contrib.admin``) and run ``migrate`` once (for the
permissions): staff with ``view`` permission see the lists; each action needs its own
permission (``ujobs_jobs.retry_job``, ``cancel_job``, ``retry_deadletter``,
``discard_deadletter``).

Why it is an app of its own, and named so: the models are read-only views of the engine's
tables (``x_jobs``, ``x_scheduler_state``, ``x_worker_nodes``), which a project that only uses
the ``django.tasks`` backend (``ujobs_django``) may not want in its admin or its permission
table; so it is opt-in. Not ``ujobs_django.admin``: Django's admin imports the ``admin`` module
of every installed app, and that name is the ``ujobs_django`` app's own. Not under
``celery_compat``: nothing here is Celery's; the jobs a Celery project sends are the same rows.

What it is not: an editor. Nothing is added, changed or deleted through the models; the actions
call the engine's ``ujobs_bridge.ext.operator.act``, the function the dashboard's buttons call.
"""

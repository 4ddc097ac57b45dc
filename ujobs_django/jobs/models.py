"""Read-only Django models over the engine's tables: ``Job`` (``x_jobs``), ``DeadLetter`` (the
dead rows of ``x_jobs``), ``Schedule`` (``x_scheduler_state``: each periodic task the scheduler
fires and how far it has fired), ``Worker`` (``x_worker_nodes``: each worker's presence row).

Why they exist: Django's admin lists models; unmanaged models over the tables let it list the
rows the engine writes, with no copy. They are never migrated (``managed = False``) and have
only the ``view`` permission, plus one per action (``Meta.permissions``).

What it is not: the schema (the engine owns the tables and their migrations; a column not named
here is simply not read), nor a way to write: the actions go through the engine's function.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import models

STATES = [(s, s) for s in ("ready", "running", "sleeping", "waiting", "done", "dead", "cancelled")]


class Job(models.Model):  # type: ignore[misc]
    """One row of ``x_jobs``: a job or a Celery message, in any state."""

    id = models.UUIDField(primary_key=True)
    name = models.TextField()
    queue = models.TextField()
    state = models.TextField(choices=STATES)
    priority = models.SmallIntegerField()
    attempt = models.IntegerField()
    max_attempts = models.IntegerField()
    run_at = models.DateTimeField()
    claimed_by = models.TextField(null=True)
    last_error = models.TextField(null=True)
    failure_kind = models.TextField(null=True)
    input = models.JSONField()
    output = models.JSONField(null=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = "x_jobs"
        ordering = ("-created_at",)
        default_permissions = ("view",)
        permissions = (
            ("retry_job", "Can retry (requeue) a dead or cancelled job"),
            ("cancel_job", "Can cancel a waiting or running job"),
        )

    def __str__(self) -> str:
        return f"{self.name} [{self.id}]"


class DeadLetterManager(models.Manager["DeadLetter"]):  # type: ignore[misc]
    def get_queryset(self) -> Any:
        return super().get_queryset().filter(state="dead")


class DeadLetter(Job):
    """A dead row of ``x_jobs``: its attempts ran out (or its workers kept dying)."""

    objects = DeadLetterManager()

    class Meta:
        proxy = True
        ordering = ("-updated_at",)
        verbose_name = "dead letter"
        default_permissions = ("view",)
        permissions = (
            ("retry_deadletter", "Can retry (requeue) a dead letter"),
            ("discard_deadletter", "Can discard a dead letter"),
        )


class Schedule(models.Model):  # type: ignore[misc]
    """One periodic task the scheduler fires (``x_scheduler_state``): its name and the instant
    up to which its occurrences have fired (its watermark)."""

    task = models.TextField(primary_key=True)
    watermark = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "x_scheduler_state"
        ordering = ("task",)
        default_permissions = ("view",)

    def __str__(self) -> str:
        return str(self.task)


class Worker(models.Model):  # type: ignore[misc]
    """One worker's presence row (``x_worker_nodes``), renewed by its heartbeat; a row whose
    ``expires_at`` has passed is a worker that stopped without saying so."""

    worker_id = models.TextField(primary_key=True)
    name = models.TextField()
    hostname = models.TextField()
    pid = models.IntegerField()
    queues = ArrayField(models.TextField())
    concurrency = models.IntegerField()
    pool = models.TextField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = "x_worker_nodes"
        ordering = ("name",)
        default_permissions = ("view",)

    def __str__(self) -> str:
        return str(self.name)

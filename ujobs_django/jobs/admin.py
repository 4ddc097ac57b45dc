"""Django's admin over the bridge's tables: jobs, dead letters, schedules and workers, read-only,
with retry, cancel and discard actions, each refused to a user without its permission.

Why it exists: a Django team's operators live in the admin. The lists read the engine's rows
through the unmanaged models (``models.py``) on the database ``settings.UJOBS_ADMIN_DATABASE``
names (a Django alias, default ``"default"``: the jobs database); an action runs the engine's
``ujobs_bridge.ext.operator.act`` (the function the dashboard's buttons call) on a connection
of its own to that database, with Django's credentials. Retry is the dashboard's *requeue*: a
dead or cancelled job gets fresh attempts.

Permissions: ``view`` shows a list; an action is offered, and runs, only for a user with its
permission (``ujobs_jobs.retry_job``, ``cancel_job``, ``retry_deadletter``,
``discard_deadletter``); a forged request for an action not offered is refused by the admin,
and the action checks again before it touches a row. A database role without the operator
duty (``ujobs-bridge db grant --operator``) is refused by Postgres, and the page says so.

What it is not: an editor (no add, change or delete); the dashboard (``ujobs-bridge
dashboard``) remains the place for the charts, attempts and steps of a job.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from ujobs_bridge.ext.operator import JobFilter, act
from ujobs_django.dsn import dsn_of
from ujobs_django.jobs.models import DeadLetter, Job, Schedule, Worker

CANCEL_ERROR = "UJ_JOB_CANCELLED: cancelled from the Django admin"
DATABASE_SETTING = "UJOBS_ADMIN_DATABASE"
NOT_AN_OPERATOR = (
    "The jobs database refused the action: the role in DATABASES may not act on jobs. "
    "Have the schema owner run `ujobs-bridge db grant --operator ROLE` for it."
)
VERBS = {"requeue": "retried", "cancel": "cancelled", "discard": "discarded"}


def jobs_database() -> str:
    """The Django alias of the jobs database (``UJOBS_ADMIN_DATABASE``, default ``default``)."""
    return str(getattr(settings, DATABASE_SETTING, "default"))


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[misc]
    """Lists and shows rows of the jobs database; never adds, changes or deletes one."""

    show_full_result_count = False  # a filtered list counts once, not twice
    if hasattr(admin, "ShowFacets"):  # Django 5.0+: no count per filter value on a big table
        show_facets = admin.ShowFacets.NEVER

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).using(jobs_database())

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def allowed(self, request: Any, action: str) -> bool:
        """Whether the user holds this model's permission for ``action`` (``retry``, ...)."""
        opts = self.opts
        return bool(request.user.has_perm(f"{opts.app_label}.{action}_{opts.model_name}"))

    def run(self, request: Any, queryset: Any, permission: str, action: str, state: Any) -> None:
        """``act`` on the selected rows (of ``state`` only, when given), after checking the
        permission again, and say what it did."""
        if not self.allowed(request, permission):
            raise PermissionDenied
        ids = list(queryset.values_list("id", flat=True))
        where = JobFilter(ids=ids, state=state)
        error = f"{CANCEL_ERROR} by {request.user.get_username()}"
        try:
            with psycopg.connect(dsn_of(jobs_database())) as conn:
                changed = act(conn, action, where, None, cancel_error=error)
        except psycopg.errors.InsufficientPrivilege:
            self.message_user(request, NOT_AN_OPERATOR, messages.ERROR)
            return
        except psycopg.errors.UniqueViolation:
            text = "Not retried: a live job holds the idempotency key of one of them."
            self.message_user(request, text, messages.WARNING)
            return
        verb = VERBS[action]
        skipped = len(ids) - (changed or 0)
        text = f"{verb.capitalize()} {changed} of {len(ids)} selected."
        if skipped:
            text += f" {skipped} not {verb}: their state does not allow it."
        self.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)


def short(text: str | None, limit: int = 100) -> str:
    """An error as one line of a list: its last line (a traceback's ``Type: message``), cut."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    return last if len(last) <= limit else last[: limit - 1] + "…"


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("name", "queue", "state", "attempt", "max_attempts", "run_at", "created_at")
    list_filter = ("state",)
    search_fields = ("name",)
    actions = ("retry", "cancel")
    readonly_fields = ("error",)
    exclude = ("last_error",)

    @admin.display(description="last error")  # type: ignore[untyped-decorator]
    def error(self, obj: Job) -> str:
        return str(obj.last_error or "")

    def has_retry_permission(self, request: Any) -> bool:
        return self.allowed(request, "retry")

    def has_cancel_permission(self, request: Any) -> bool:
        return self.allowed(request, "cancel")

    @admin.action(permissions=["retry"], description="Retry the selected dead or cancelled jobs")  # type: ignore[untyped-decorator]
    def retry(self, request: Any, queryset: Any) -> None:
        self.run(request, queryset, "retry", "requeue", None)

    @admin.action(permissions=["cancel"], description="Cancel the selected waiting or running jobs")  # type: ignore[untyped-decorator]
    def cancel(self, request: Any, queryset: Any) -> None:
        self.run(request, queryset, "cancel", "cancel", None)


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = ("name", "queue", "attempt", "failure_kind", "dead_since", "reason")
    search_fields = ("name",)
    actions = ("retry", "discard")

    @admin.display(description="dead since", ordering="updated_at")  # type: ignore[untyped-decorator]
    def dead_since(self, obj: DeadLetter) -> Any:
        return obj.updated_at

    @admin.display(description="last error")  # type: ignore[untyped-decorator]
    def reason(self, obj: DeadLetter) -> str:
        return short(obj.last_error)

    def has_retry_permission(self, request: Any) -> bool:
        return self.allowed(request, "retry")

    def has_discard_permission(self, request: Any) -> bool:
        return self.allowed(request, "discard")

    @admin.action(permissions=["retry"], description="Retry the selected dead letters")  # type: ignore[untyped-decorator]
    def retry(self, request: Any, queryset: Any) -> None:
        self.run(request, queryset, "retry", "requeue", "dead")

    @admin.action(permissions=["discard"], description="Discard the selected dead letters")  # type: ignore[untyped-decorator]
    def discard(self, request: Any, queryset: Any) -> None:
        self.run(request, queryset, "discard", "discard", "dead")


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyAdmin):
    list_display = ("task", "watermark", "updated_at")
    search_fields = ("task",)


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ("name", "hostname", "pid", "pool", "concurrency", "heartbeat_at", "alive")

    @admin.display(boolean=True, description="alive")  # type: ignore[untyped-decorator]
    def alive(self, obj: Worker) -> bool:
        return bool(obj.expires_at > timezone.now())

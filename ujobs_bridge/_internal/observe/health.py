"""Health checks: is the jobs database reachable, its schema current, a live worker on each
queue, and the oldest ready job young enough.

Why it exists: ``ujobs-bridge health`` (exit 0/1, for cron, CI and load balancers), the
dashboard's ``/healthz``/``/readyz`` and a worker's ``/readyz`` ask the same questions and must
answer them the same way. Each check says what it saw, so a failing probe explains itself.

What it is not: metrics (``metrics_db.py`` reads the same statements for Prometheus) or an
alerting rule: it answers now, for the thresholds it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.config.dsn import upgrade_command_for
from ujobs_bridge._internal.db import connections, observe, schema, session
from ujobs_bridge._internal.observe.metrics_db import live_workers
from ujobs_bridge.errors import SchemaError

HEALTH_ROLE = connections.Role("health")


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    skipped: bool = False  # could not be evaluated here (counts as passing)


@dataclass(frozen=True, slots=True)
class HealthReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks]}


def database_reachable(dsn: str) -> Check:
    try:
        with connections.connect(dsn, HEALTH_ROLE) as conn:
            session.database_now(conn)
    except psycopg.Error as exc:
        return Check("database", False, f"unreachable: {str(exc).strip().splitlines()[0]}")
    return Check("database", True, "reachable")


def check(
    dsn: str,
    *,
    queues: Sequence[str] = (),
    max_age_s: float | None = None,
    clock: Clock = SYSTEM_CLOCK,
    upgrade_command: str | None = None,
) -> HealthReport:
    """Every check, in order; a later check is skipped when the database is unreachable.
    ``queues``: those that must have a live worker and whose backlog age is checked (empty:
    every queue with jobs). ``upgrade_command``: what the schema check tells to run (default:
    ``db upgrade --dsn`` with this DSN, masked)."""
    upgrade_command = upgrade_command or upgrade_command_for(dsn)
    reachable = database_reachable(dsn)
    if not reachable.ok:
        return HealthReport([reachable])
    checks = [reachable]
    try:
        missing = schema.check(dsn)
    except psycopg.errors.UndefinedTable:
        checks.append(Check("schema", False, f"no ujobs-bridge schema: run `{upgrade_command}`"))
        return HealthReport(checks)
    except SchemaError as exc:  # newer than this package
        checks.append(Check("schema", False, exc.message))
        return HealthReport(checks)
    checks.append(
        Check(
            "schema",
            not missing,
            "current"
            if not missing
            else f"{len(missing)} migration(s) pending: run `{upgrade_command}`",
        )
    )
    with connections.connect(dsn, HEALTH_ROLE) as conn:
        depth = observe.observe_depth(conn, clock.sql_now()) if not missing else []
        workers = live_workers(conn)
    named = list(queues) or sorted({d.queue for d in depth})
    checks.extend(_worker_checks(named, workers))
    if max_age_s is not None:
        now = clock.now()
        oldest = {d.queue: d.oldest_due for d in depth if d.oldest_due is not None}
        for queue in named:
            due = oldest.get(queue)
            age = 0.0 if due is None else max(0.0, (now - due).total_seconds())
            checks.append(
                Check(
                    f"backlog:{queue}",
                    age <= max_age_s,
                    f"oldest ready job waited {age:.1f}s (limit {max_age_s:g}s)"
                    if due is not None
                    else "no ready job waiting",
                )
            )
    return HealthReport(checks)


def _worker_checks(queues: list[str], workers: dict[str, int] | None) -> list[Check]:
    if workers is None:
        return [
            Check(
                "workers",
                True,
                "skipped: this database has no worker presence to read yet",
                skipped=True,
            )
        ]
    return [
        Check(
            f"workers:{queue}",
            workers.get(queue, 0) > 0,
            f"{workers.get(queue, 0)} live worker(s)",
        )
        for queue in queues
    ]

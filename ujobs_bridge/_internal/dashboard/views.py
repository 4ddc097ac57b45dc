"""What the dashboard's pages show, read from the database and shaped for the templates: the
overview's per-queue numbers, the last hour's charts (throughput and failures, pick-up latency)
as SVG geometry, job rows, scheduled tasks.

Why it exists: pages should render numbers, not compute them; a test can compare these values
with the database directly. Reads go through the ``db`` package (``observe.py``, ``job_reads.py``,
``scheduling.py``); nothing here runs SQL.

What it is not: HTML. The templates draw; every value reaches them as data and Jinja2 escapes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from ujobs_bridge._internal.db import observe
from ujobs_bridge._internal.db import scheduling as sched_db
from ujobs_bridge._internal.scheduling.leader import DEFAULT_GROUP
from ujobs_bridge._internal.scheduling.task import PeriodicTask

CHART_MINUTES = 60
CHART_W, CHART_H = 610, 170


@dataclass
class QueueRow:
    queue: str
    ready: int = 0
    scheduled: int = 0
    running: int = 0
    sleeping: int = 0
    waiting: int = 0
    dead: int = 0
    oldest_due: datetime | None = None
    failed: dict[str, int] = field(default_factory=dict)  # a package's failure kind: its jobs

    @property
    def parked(self) -> int:
        return self.sleeping + self.waiting


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    w: float
    h: float
    label: str


@dataclass
class Chart:
    """Bars per minute, stacked: done, then the dead letters, then a package's own failures (its
    failure kinds: FAILURE), in an SVG of ``CHART_W``x``CHART_H``."""

    done: list[Bar] = field(default_factory=list)
    dead: list[Bar] = field(default_factory=list)
    failed: list[Bar] = field(default_factory=list)
    peak: int = 0
    total_done: int = 0
    total_dead: int = 0
    total_failed: dict[str, int] = field(default_factory=dict)  # failure kind: its jobs
    start: datetime | None = None
    end: datetime | None = None
    width: int = CHART_W
    height: int = CHART_H


@dataclass(frozen=True)
class LatencyMinute:
    """One minute of the latency chart: ``mean`` drawn inside ``max`` (a bar each)."""

    minute: str  # HH:MM
    picked: int
    mean_s: float
    max_s: float
    mean: Bar
    max: Bar


@dataclass
class LatencyChart:
    """Pick-up latency per minute over the last hour (jobs claimed in that minute: the mean and
    the largest wait from due to claim), scaled to the largest, in ``CHART_W``x``CHART_H``."""

    minutes: list[LatencyMinute] = field(default_factory=list)
    picked: int = 0
    mean_s: float | None = None  # over the hour, weighted by the jobs picked each minute
    max_s: float | None = None
    start: datetime | None = None
    end: datetime | None = None
    width: int = CHART_W
    height: int = CHART_H


def latency_text(seconds: float | None) -> str:
    """A wait for people: ms below a second, then seconds, minutes, hours."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return age_text(seconds)


def age_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{s / 60:.1f}m"
    if s < 86400:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def queue_rows(conn: psycopg.Connection[Any], now: datetime | None) -> list[QueueRow]:
    rows: dict[str, QueueRow] = {}
    for d in observe.observe_depth(conn, now):
        row = rows.setdefault(d.queue, QueueRow(d.queue))
        if d.state in ("ready", "scheduled", "running", "sleeping", "waiting", "dead"):
            setattr(row, d.state, d.jobs)
        elif d.state.isupper():  # a failure kind (FAILURE): not a dead letter
            row.failed[d.state] = d.jobs
        if d.oldest_due is not None:
            row.oldest_due = d.oldest_due
    return [rows[q] for q in sorted(rows)]


def chart(conn: psycopg.Connection[Any], now: datetime) -> Chart:
    """The last hour, a bar per minute: done, the dead letters above it, and above them the
    jobs a package ended with its own failure kind (FAILURE), each in its colour."""
    counts = observe.observe_finished_per_minute(conn, CHART_MINUTES, now)
    end = now.replace(second=0, microsecond=0)
    start = end - timedelta(minutes=CHART_MINUTES - 1)
    done: dict[datetime, int] = {}
    dead: dict[datetime, int] = {}
    failed: dict[datetime, dict[str, int]] = {}
    out = Chart(start=start, end=end)
    for c in counts:
        if c.state == "done":
            done[c.minute] = done.get(c.minute, 0) + c.jobs
        elif c.state == "dead":
            dead[c.minute] = dead.get(c.minute, 0) + c.jobs
        else:  # a failure kind
            kinds = failed.setdefault(c.minute, {})
            kinds[c.state] = kinds.get(c.state, 0) + c.jobs
            out.total_failed[c.state] = out.total_failed.get(c.state, 0) + c.jobs
    out.total_done = sum(done.values())
    out.total_dead = sum(dead.values())
    minutes = [start + timedelta(minutes=i) for i in range(CHART_MINUTES)]

    def total(m: datetime) -> int:
        return done.get(m, 0) + dead.get(m, 0) + sum(failed.get(m, {}).values())

    out.peak = max([total(m) for m in minutes] + [0])
    if out.peak == 0:
        return out
    slot = CHART_W / CHART_MINUTES
    scale = (CHART_H - 20) / out.peak
    for i, minute in enumerate(minutes):
        ok, lost, kinds = done.get(minute, 0), dead.get(minute, 0), failed.get(minute, {})
        bad = sum(kinds.values())
        label = minute.strftime("%H:%M")
        x = i * slot + 1
        h_ok, h_lost, h_bad = ok * scale, lost * scale, bad * scale
        if ok:
            out.done.append(Bar(x, CHART_H - h_ok, slot - 2, h_ok, f"{label}: {ok} done"))
        if lost:
            y = CHART_H - h_ok - h_lost
            out.dead.append(Bar(x, y, slot - 2, h_lost, f"{label}: {lost} dead letters"))
        if bad:
            y = CHART_H - h_ok - h_lost - h_bad
            words = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
            out.failed.append(Bar(x, y, slot - 2, h_bad, f"{label}: {words}"))
    return out


def latency_chart(conn: psycopg.Connection[Any], now: datetime) -> LatencyChart:
    """The last hour's pick-up latency, a bar per minute: the largest wait, the mean inside it."""
    end = now.replace(second=0, microsecond=0)
    start = end - timedelta(minutes=CHART_MINUTES - 1)
    out = LatencyChart(start=start, end=end)
    rows = observe.observe_pickup_per_minute(conn, CHART_MINUTES, now)
    if not rows:
        return out
    out.picked = sum(r.picked for r in rows)
    out.mean_s = sum(r.mean_s * r.picked for r in rows) / out.picked
    out.max_s = max(r.max_s for r in rows)
    slot = CHART_W / CHART_MINUTES
    scale = (CHART_H - 20) / out.max_s if out.max_s > 0 else 0.0
    for r in rows:
        i = round((r.minute - start).total_seconds() / 60)
        if not 0 <= i < CHART_MINUTES:
            continue
        label = (start + timedelta(minutes=i)).strftime("%H:%M")
        x = i * slot + 1
        h_max = max(1.0, r.max_s * scale)
        h_mean = max(1.0, r.mean_s * scale)
        title = (
            f"{label}: {r.picked} picked, mean {latency_text(r.mean_s)}, "
            f"max {latency_text(r.max_s)}"
        )
        out.minutes.append(
            LatencyMinute(
                minute=label,
                picked=r.picked,
                mean_s=r.mean_s,
                max_s=r.max_s,
                mean=Bar(x + 1, CHART_H - h_mean, max(1.0, slot - 4), h_mean, title),
                max=Bar(x, CHART_H - h_max, slot - 2, h_max, title),
            )
        )
    return out


@dataclass(frozen=True)
class TaskRow:
    name: str
    schedule: str
    policy: str
    next_fire: str
    last_occurrence: str
    last_was_catch_up: bool
    watermark: str


def task_rows(
    conn: psycopg.Connection[Any], tasks: dict[str, PeriodicTask], now: datetime
) -> tuple[list[TaskRow], sched_db.LeaderInfo | None]:
    """Every periodic task the app declares (or, without one, that the database has fired),
    with its next fire, last occurrence, watermark and catch-up policy; and the leader."""
    last = sched_db.last_fires(conn)
    marks = sched_db.watermarks(conn)
    leader = sched_db.leader_get(conn, DEFAULT_GROUP)
    rows = []
    for name in sorted(set(tasks) | set(last) | set(marks)):
        periodic = tasks.get(name)
        fired = last.get(name)
        mark = marks.get(name)
        rows.append(
            TaskRow(
                name=name,
                schedule=periodic.schedule.describe() if periodic else "(not declared by -A)",
                policy=str(periodic.catch_up) if periodic else "-",
                next_fire=periodic.schedule.next_after(now).isoformat(timespec="seconds")
                if periodic
                else "-",
                last_occurrence=fired[0].isoformat(timespec="seconds") if fired else "never",
                last_was_catch_up=bool(fired[1]) if fired else False,
                watermark=mark.isoformat(timespec="seconds") if mark else "-",
            )
        )
    return rows, leader

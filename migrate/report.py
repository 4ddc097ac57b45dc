"""What the operator sees: a live progress bar, the final table, ``--json``, the dry-run summary.

Why it exists: a cutover is run by a person watching a terminal. While draining, a rich progress
bar shows messages moved, the rate, and how many are still waiting in the broker. At the end one
table says what happened, per queue: moved, expired (recorded, never run), duplicates absorbed
by the ledger, quarantined by reason, redelivered. ``--dry-run`` reports per queue and task:
count, what would be quarantined and why, and the ETA range; on RabbitMQ, where reading a message
marks it redelivered, it reads none and reports the ready count per queue. ``--json`` prints the
same numbers for scripts.

What it is not: a log. Nothing here decides anything; it counts ``batch.Result`` values.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported when a table or a bar is made: --json uses neither
    from rich.console import Console
    from rich.progress import Progress, TaskID

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from migrate.batch import DUPLICATE, EXPIRED, MOVED, QUARANTINE_SEEN, QUARANTINED, Result
from migrate.quarantine import storable_text

OUTCOMES = (MOVED, EXPIRED, DUPLICATE, QUARANTINED, QUARANTINE_SEEN)


@dataclass
class Stats:
    """Counts of one drain (or dry run), overall and per queue / per task."""

    broker: str = ""
    queues: list[str] = field(default_factory=list)
    dry_run: bool = False
    outcomes: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    redelivered: int = 0
    per_queue: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    per_task: dict[tuple[str, str], Counter[str]] = field(
        default_factory=lambda: defaultdict(Counter)
    )
    eta_min: datetime | None = None
    eta_max: datetime | None = None
    started: float = field(default_factory=time.monotonic)
    elapsed_s: float = 0.0
    remaining: int | None = None
    stopped_by_signal: bool = False
    outages: int = 0  # --follow: database or broker outages ridden through
    # --dry-run on a broker that marks what it hands out (RabbitMQ): ready messages per queue,
    # counted by passive declare; none was read, so nothing is classified.
    counted: dict[str, int] | None = None

    @property
    def taken(self) -> int:
        return sum(self.outcomes.values())

    def add(self, results: Iterable[Result]) -> None:
        for r in results:
            self.outcomes[r.outcome] += 1
            queue = self.per_queue[r.taken.queue]
            queue[r.outcome] += 1
            name = r.task or "?"
            if r.reason and r.task:  # a poison message's task name may be anything: printable
                name = storable_text(r.task, 200)
            task = self.per_task[(r.taken.queue, name)]
            task[r.outcome] += 1
            if r.reason:
                self.reasons[r.reason] += 1
                queue[f"reason:{r.reason}"] += 1
                task[f"reason:{r.reason}"] += 1
            if r.redelivered:
                self.redelivered += 1
            if r.eta is not None:
                self.eta_min = r.eta if self.eta_min is None else min(self.eta_min, r.eta)
                self.eta_max = r.eta if self.eta_max is None else max(self.eta_max, r.eta)
        self.elapsed_s = time.monotonic() - self.started

    def rate(self) -> float:
        return self.taken / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        def breakdown(counts: Counter[str]) -> dict[str, Any]:
            out: dict[str, Any] = {o: counts.get(o, 0) for o in OUTCOMES}
            out["quarantined_by_reason"] = {
                k.split(":", 1)[1]: v for k, v in sorted(counts.items()) if k.startswith("reason:")
            }
            return out

        return {
            "broker": self.broker,
            "dry_run": self.dry_run,
            "queues": self.queues,
            "taken": self.taken,
            **{o: self.outcomes.get(o, 0) for o in OUTCOMES},
            "quarantined_by_reason": dict(sorted(self.reasons.items())),
            "redelivered": self.redelivered,
            "per_queue": {q: breakdown(c) for q, c in sorted(self.per_queue.items())},
            "per_task": [
                {"queue": q, "task": t, **breakdown(c)}
                for (q, t), c in sorted(self.per_task.items())
            ],
            "eta_min": self.eta_min.isoformat() if self.eta_min else None,
            "eta_max": self.eta_max.isoformat() if self.eta_max else None,
            "elapsed_s": round(self.elapsed_s, 3),
            "rate_per_s": round(self.rate(), 1),
            "remaining": self.remaining,
            **(
                {}
                if self.counted is None
                else {"counted": dict(self.counted), "read": 0, "how": COUNTED_HOW}
            ),
            "stopped_by_signal": self.stopped_by_signal,
            "outages": self.outages,
        }


class LiveProgress:
    """A rich progress bar: moved so far, rate, and messages still waiting in the broker."""

    def __init__(self, console: Console, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if not enabled:
            return

        self._progress = Progress(
            TextColumn("[bold]draining"),
            BarColumn(),
            TextColumn("{task.completed:,.0f} taken"),
            TextColumn("{task.fields[rate]:,.0f} msg/s"),
            TextColumn("{task.fields[left]} waiting"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )

    def __enter__(self) -> LiveProgress:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task("drain", total=None, rate=0.0, left="?")
        return self

    def update(self, stats: Stats, remaining: int | None) -> None:
        if self._task is None or self._progress is None:
            return
        left = "?" if remaining is None else f"{remaining:,}"
        total = None if remaining is None else stats.taken + remaining
        self._progress.update(
            self._task, completed=stats.taken, total=total, rate=stats.rate(), left=left
        )

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def _reasons_text(counts: Counter[str]) -> str:
    items = [(k.split(":", 1)[1], v) for k, v in sorted(counts.items()) if k.startswith("reason:")]
    return ", ".join(f"{k} {v}" for k, v in items)


def final_table(stats: Stats) -> Table:
    verb = "would" if stats.dry_run else "done"
    table = Table(title=Text(f"migrate ({verb}): {stats.taken:,} message(s) from {stats.broker}"))
    for col in ("queue", "moved", "expired", "duplicates", "quarantined", "reasons", "redelivered"):
        table.add_column(col, justify="right" if col not in ("queue", "reasons") else "left")
    for queue, c in sorted(stats.per_queue.items()):
        table.add_row(
            Text(queue),
            f"{c[MOVED]:,}",
            f"{c[EXPIRED]:,}",
            f"{c[DUPLICATE] + c[QUARANTINE_SEEN]:,}",
            f"{c[QUARANTINED]:,}",
            Text(_reasons_text(c)),
            "",
        )
    o = stats.outcomes
    table.add_row(
        Text("total", style="bold"),
        f"{o[MOVED]:,}",
        f"{o[EXPIRED]:,}",
        f"{o[DUPLICATE] + o[QUARANTINE_SEEN]:,}",
        f"{o[QUARANTINED]:,}",
        Text(", ".join(f"{k} {v}" for k, v in sorted(stats.reasons.items()))),
        f"{stats.redelivered:,}",
    )
    return table


COUNTED_HOW = (
    "counted by passive queue.declare; no message was read or sampled, since RabbitMQ marks "
    "every message it hands out as redelivered (tasks, per-task counts and quarantine reasons "
    "are known once moved)"
)


def counted_table(stats: Stats, counted: dict[str, int]) -> Table:
    total = sum(counted.values())
    table = Table(
        title=Text(f"dry run: {total:,} message(s) ready in {stats.broker}; nothing was changed"),
        caption=Text(COUNTED_HOW),
    )
    table.add_column("queue")
    table.add_column("ready", justify="right")
    for queue, count in counted.items():
        label = (
            f"{queue} (ETA messages, for any queue)"
            if queue.startswith("celery_delayed_")
            else queue
        )
        table.add_row(Text(label), f"{count:,}")
    return table


def dry_run_table(stats: Stats) -> Table:
    if stats.counted is not None:
        return counted_table(stats, stats.counted)
    table = Table(
        title=Text(f"dry run: {stats.taken:,} message(s) in {stats.broker}; nothing was changed")
    )
    for col in ("queue", "task", "count", "expired", "would quarantine", "why"):
        table.add_column(
            col, justify="right" if col in ("count", "expired", "would quarantine") else "left"
        )
    for (queue, task), c in sorted(stats.per_task.items()):
        count = sum(c[o] for o in OUTCOMES)
        table.add_row(
            Text(queue),
            Text(task),
            f"{count:,}",
            f"{c[EXPIRED]:,}",
            f"{c[QUARANTINED]:,}",
            Text(_reasons_text(c)),
        )
    return table


def print_report(console: Console, stats: Stats) -> None:
    console.print(dry_run_table(stats) if stats.dry_run else final_table(stats))
    if stats.eta_min is not None and stats.eta_max is not None:
        console.print(
            f"ETA range: {stats.eta_min.isoformat()} … {stats.eta_max.isoformat()}", highlight=False
        )
    if not stats.dry_run:
        console.print(
            f"{stats.taken:,} message(s) in {stats.elapsed_s:.2f} s ({stats.rate():,.0f}/s)"
        )
    if stats.outages:
        console.print(
            f"rode through {stats.outages} database/broker outage(s): what was in hand was "
            "taken again, the ledger absorbed what had been committed",
            highlight=False,
        )
    if stats.stopped_by_signal:
        console.print("stopped by signal: the batch in hand was finished")

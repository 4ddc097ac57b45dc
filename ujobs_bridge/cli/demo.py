"""``ujobs-bridge demo``: the whole story in one command, on the embedded default or ``--dsn``.

Why it exists: the first run should show, in under a minute and with nothing else installed,
what the engine promises. It upgrades the schema, starts an in-process ``Worker`` on a queue unique
to this run (``demo-<hex>``, so reruns never mix), enqueues a few thousand jobs in batches with
``client.enqueue_many``, some of which fail on their first attempt(s) and succeed on retry and
exactly one of which always fails and dead-letters, shows a progress bar, then reads the outcome
back FROM THE DATABASE: states, attempts, the dead letter and its last error, elapsed time and
throughput on the database clock. Nothing in the summary is a number the demo merely believes.
Then (unless ``--no-celery``) it runs a Celery-style app through the bridge: a chain, a group, a
task that retries once and a beat entry (``celery_demo.py``, app in ``demo_celery.py``); and it
moves a backlog real Celery published to a serverless kombu broker onto the bridge and runs it
(``migrate_demo.py``).

This module is the command: flags, the schema, the three parts in turn (the engine part is
``engine_demo.py``, the jobs ``demo_jobs.py``), what they print and the exit code they add up to.

What it is not: a benchmark (``python -m bench``) or a test.
"""

from __future__ import annotations

import os
import secrets
import shlex

import click
from rich.console import Console
from rich.markup import escape

from .. import validation
from ..db import schema
from ..dsn import ResolvedDatabase
from ..embedded import ENV_HOME
from ..errors import ConfigError
from ..worker.config import WorkerConfig
from . import celery_demo, engine_demo, migrate_demo
from .options import database, dsn_option, json_option, print_json

DEFAULT_JOBS = 3000
MAX_JOBS = 100_000
DEFAULT_TIMEOUT_S = 120.0


def _next_commands(resolved: ResolvedDatabase, queue: str, dead_id: str | None) -> list[str]:
    prefix = "ujobs-bridge"
    home = os.environ.get(ENV_HOME)
    if resolved.source == "embedded" and home:
        prefix = f"{ENV_HOME}={shlex.quote(home)} {prefix}"
    suffix = f" --dsn {shlex.quote(resolved.masked)}" if resolved.source == "flag" else ""
    commands = [f"{prefix} jobs ls --queue {queue}{suffix}"]
    if dead_id is not None:
        commands.append(f"{prefix} jobs show {dead_id}{suffix}")
    commands += [f"{prefix} jobs dead{suffix}", f"{prefix} jobs stats{suffix}"]
    return commands


def _render_next(console: Console, resolved: ResolvedDatabase, next_commands: list[str]) -> None:
    console.print("[bold]try next[/bold]")
    for cmd in next_commands:
        console.print(f"  [cyan]{escape(cmd)}[/cyan]", soft_wrap=True, highlight=False)
    if resolved.source == "flag" and resolved.masked != resolved.dsn:
        console.print("  [dim](the password is masked: put yours back in --dsn)[/dim]")


@click.command()
@click.option(
    "--jobs",
    "total",
    default=DEFAULT_JOBS,
    show_default=True,
    type=int,
    help="How many jobs to enqueue (one of them dead-letters).",
)
@click.option(
    "-c",
    "--concurrency",
    default=8,
    show_default=True,
    type=int,
    help="Worker threads running bodies.",
)
@click.option(
    "--timeout",
    "timeout_s",
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    type=float,
    help="Give up (exit 1) if the jobs have not all finished after this many seconds.",
)
@click.option(
    "--celery/--no-celery",
    "with_celery",
    default=True,
    show_default=True,
    help="Then run a Celery-style app (chain, group, retry, beat entry) through the bridge, and "
    "drain a backlog Celery published to a filesystem broker onto it.",
)
@dsn_option
@json_option
def demo(
    total: int,
    concurrency: int,
    timeout_s: float,
    with_celery: bool,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Enqueue jobs (some flaky, one hopeless), run a worker, and show what the database says;
    then run a Celery-style app through the bridge."""
    try:
        validation.positive_int("--jobs", total, minimum=2, maximum=MAX_JOBS)
        validation.seconds("--timeout", timeout_s)
        config = WorkerConfig(
            queues=(f"demo-{secrets.token_hex(4)}",),
            concurrency=concurrency,
            poll_s=0.1,  # retries come due after ~50 ms; poll often so the tail stays short
            shutdown_timeout_s=5.0,
        )
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    assert config.queues is not None
    queue = config.queues[0]

    resolved = database(dsn)  # the one line saying which database, password masked
    applied = schema.upgrade(resolved.dsn)
    err = Console(stderr=True)
    if not as_json:
        err.print(
            f"schema: applied {len(applied)} migration(s)" if applied else "schema: up to date"
        )
    plan = engine_demo.make_plan(total, queue)
    summary = engine_demo.run(resolved, config, plan, timeout_s=timeout_s, err=err, quiet=as_json)
    dead_id = str(summary.dead[0].id) if summary.dead else None
    next_commands = _next_commands(resolved, queue, dead_id)
    celery_part = migrate_part = None
    if with_celery:
        if not as_json:
            err.print("celery: running ujobs_bridge.demo_celery (chain, group, retry, beat entry)")
        celery_part = celery_demo.run(
            resolved, f"{queue}-celery", concurrency=concurrency, timeout_s=timeout_s
        )
        if not as_json:
            err.print("migrate: Celery publishes to a filesystem broker; drained, then run")
        migrate_part = migrate_demo.run(
            resolved, f"{queue}-migrate", concurrency=concurrency, timeout_s=timeout_s
        )
    if as_json:
        doc = {"database": resolved.masked, **engine_demo.as_json(summary, plan)}
        doc["next"] = next_commands
        if celery_part is not None and migrate_part is not None:
            doc["celery"] = celery_part.as_json()
            doc["migrate"] = migrate_part.as_json()
        print_json(doc)
    else:
        console = Console()
        engine_demo.render(console, summary, plan)
        if celery_part is not None and migrate_part is not None:
            celery_demo.render(console, celery_part)
            migrate_demo.render(console, migrate_part)
        _render_next(console, resolved, next_commands)
    problems = engine_demo.problems(summary, total, plan)
    if celery_part is not None and migrate_part is not None:
        problems += celery_part.problems() + migrate_part.problems()
    if problems:
        raise click.ClickException(
            "the database does not show the expected outcome: " + "; ".join(problems)
        )

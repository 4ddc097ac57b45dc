"""``ujobs-bridge demo``: the whole story in one command, on the embedded default or ``--dsn``.

Why it exists: the first run should show, in under a minute and with nothing else installed,
what the engine promises. It upgrades the schema, starts an in-process ``Worker`` on a queue unique
to this run (``demo-<hex>``, so reruns never mix), enqueues a few thousand jobs in batches with
``client.enqueue_many``, some of which fail on their first attempt(s) and succeed on retry and
exactly one of which always fails and dead-letters, shows a progress bar, then reads the outcome
back FROM THE DATABASE: states, attempts, the dead letter and its last error, elapsed time and
throughput on the database clock. Nothing in the summary is a number the demo merely believes.
Then (unless ``--no-celery``) it runs the parts the packages above the engine contribute through
the ``ujobs_bridge.demo`` entry-point group, in name order: ``celery`` runs a Celery-style app
through the bridge, a chain, a group, a task that retries once and a beat entry
(``celery_compat/cli/demo.py``, app in ``celery_compat/demo_app.py``); ``migrate`` moves a
backlog real Celery published to a serverless kombu broker onto the bridge and runs it
(``migrate/cli/demo.py``). Each part runs on its own queue ``<demo queue>-<part name>``.

This module is the command: flags, the schema, the engine part (``engine_demo.py``, the jobs
``demo_jobs.py``) and then the contributed parts, what they print and the exit code they add up
to. The engine imports no part: they come from installed metadata.

What it is not: a benchmark (``python -m bench``) or a test.
"""

from __future__ import annotations

import logging
import os
import secrets
import shlex
from typing import Any, Protocol

import click
from rich.console import Console
from rich.markup import escape

from ujobs_bridge._internal.cli import engine_demo
from ujobs_bridge._internal.cli.options import database, dsn_option, json_option, print_json
from ujobs_bridge._internal.config import plugins
from ujobs_bridge._internal.config.dsn import ResolvedDatabase
from ujobs_bridge._internal.config.embedded import ENV_HOME
from ujobs_bridge._internal.db import schema
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.worker.config import WorkerConfig
from ujobs_bridge.errors import ConfigError

DEFAULT_JOBS = 3000
MAX_JOBS = 100_000
DEFAULT_TIMEOUT_S = 120.0


class DemoOutcome(Protocol):
    """What a contributed demo part saw."""

    def problems(self) -> list[str]: ...

    def as_json(self) -> dict[str, Any]: ...

    def render(self, console: Console) -> None: ...


class DemoPart(Protocol):
    """An entry of the ``ujobs_bridge.demo`` group: a part run after the engine's own."""

    intro: str  # the line printed before it runs

    def run(
        self, resolved: ResolvedDatabase, queue: str, *, concurrency: int, timeout_s: float
    ) -> DemoOutcome: ...


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
            poll_s=0.1,  # the demo's retries come due soon; poll often so the tail stays short
            shutdown_timeout_s=5.0,
        )
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    assert config.queues is not None
    queue = config.queues[0]
    # The planned retries (hundreds) are the tour's point and its tables count them; one log
    # line each would bury the tables. Dead letters (ERROR) still show.
    logging.getLogger("ujobs.job").setLevel(logging.ERROR)

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
    outcomes: list[tuple[str, DemoOutcome]] = []
    if with_celery:
        parts: list[tuple[str, DemoPart]] = list(plugins.load_all(plugins.DEMO_GROUP))
        for name, part in parts:
            if not as_json:
                err.print(part.intro)
            outcome = part.run(
                resolved, f"{queue}-{name}", concurrency=concurrency, timeout_s=timeout_s
            )
            outcomes.append((name, outcome))
    if as_json:
        doc = {"database": resolved.masked, **engine_demo.as_json(summary, plan)}
        doc["next"] = next_commands
        for name, outcome in outcomes:
            doc[name] = outcome.as_json()
        print_json(doc)
    else:
        console = Console()
        engine_demo.render(console, summary, plan)
        for _name, outcome in outcomes:
            outcome.render(console)
        _render_next(console, resolved, next_commands)
    problems = engine_demo.problems(summary, total, plan)
    for _name, outcome in outcomes:
        problems += outcome.problems()
    if problems:
        raise click.ClickException(
            "the database does not show the expected outcome: " + "; ".join(problems)
        )

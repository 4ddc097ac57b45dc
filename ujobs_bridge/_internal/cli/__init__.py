"""The ``ujobs-bridge`` command line: one click group, one module per command family.

Why it exists: operators and CI scripts drive the engine from a shell. Exit codes are a contract
(0 ok, 1 failure, 2 usage); every read command takes ``--json``; every error the library raises
on purpose prints its code, message and hint, and no DSN is printed with its password.

It is the composition root: the engine's own commands are listed here, and the packages above
the engine (``celery_compat``: ``beat``; ``migrate``: ``migrate``) contribute theirs through the
``ujobs_bridge.cli`` entry-point group (``plugins.py``), so the engine imports neither. A
contributed command whose package cannot be imported (a dependency missing) is still listed, and
invoking it prints which import failed and exits 1; the other commands are unaffected.

What it is not: business logic. Commands parse flags, call the engine and print.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from ujobs_bridge._internal.cli.failures import fail, one_line_errors
from ujobs_bridge._internal.config import plugins
from ujobs_bridge._internal.config.dsn import RESOLVED_KEY, ResolvedDatabase
from ujobs_bridge._internal.observe import logs

# Each command's module is imported only when that command runs (or --help lists them): a
# `worker` never pays for the demo's or a plugin's imports, and a broken optional command cannot
# stop the others from starting. Static imports, so no module is ever named by data.
ENGINE_COMMANDS = (
    "db", "worker", "jobs", "demo", "events", "purge", "outbox", "scheduler", "tasks",
    "embedded", "health", "dashboard",
)  # fmt: skip


# import cost: a command's module is imported when that command runs or --help lists it
def _load(name: str) -> click.Command | None:
    if name == "db":
        from ujobs_bridge._internal.cli.db import db

        return db
    if name == "worker":
        from ujobs_bridge._internal.cli.worker import worker

        return worker
    if name == "jobs":
        from ujobs_bridge._internal.cli.jobs import jobs

        return jobs
    if name == "demo":
        from ujobs_bridge._internal.cli.demo import demo

        return demo
    if name == "events":
        from ujobs_bridge._internal.cli.events import events

        return events
    if name == "purge":
        from ujobs_bridge._internal.cli.purge import purge

        return purge
    if name == "outbox":
        from ujobs_bridge._internal.cli.outbox import outbox

        return outbox
    if name == "dashboard":
        from ujobs_bridge._internal.cli.dashboard import dashboard

        return dashboard
    if name == "health":
        from ujobs_bridge._internal.cli.health import health

        return health
    if name == "embedded":
        from ujobs_bridge._internal.cli.embedded import embedded

        return embedded
    if name in ("scheduler", "tasks"):
        from ujobs_bridge._internal.cli.scheduler import scheduler, tasks

        return scheduler if name == "scheduler" else tasks
    return _load_plugin(name)


def _plugin_names() -> list[str]:
    """Contributed command names in declaration order, engine names excluded."""
    return [e.name for e in plugins.entries(plugins.CLI_GROUP) if e.name not in ENGINE_COMMANDS]


def _load_plugin(name: str) -> click.Command | None:
    entry = plugins.find(plugins.CLI_GROUP, name)
    if entry is None:
        return None
    try:
        command = entry.load()
    except ImportError as exc:
        return _unavailable(name, entry.value, exc)
    if not isinstance(command, click.Command):
        raise TypeError(f"entry point {plugins.CLI_GROUP} {name} is not a click command")
    return command


def _unavailable(name: str, value: str, exc: ImportError) -> click.Command:
    """Stands in for a contributed command that cannot be imported: says why, exits 1."""
    missing = exc.name or str(exc)

    def explain() -> None:
        click.echo(
            f"error: the `{name}` command ({value}) is unavailable: {exc}\n"
            f"hint: install its missing dependency ({missing!r}), e.g. pip install 'ujobs-bridge'",
            err=True,
        )
        sys.exit(1)

    return click.Command(
        name,
        callback=explain,
        help=f"(unavailable: cannot import {missing})",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )


class _Group(click.Group):
    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        """Under ``--log-format json`` (or ``$UJOBS_LOG_FORMAT=json`` for a command that takes
        it), every line this run writes is one JSON object, click's own too: a usage error is
        one ``error: ...`` object (with ``usage`` and ``exit_code``), ``--help`` one per line."""
        argv = list(sys.argv[1:] if args is None else args)
        if not _json_lines_asked(self, argv):
            return super().main(argv, *rest, **kwargs)
        saved = logs.snapshot()
        logs.redirect_lines()
        try:
            kwargs["standalone_mode"] = False
            try:
                code = super().main(argv, *rest, **kwargs)
            except click.ClickException as exc:
                fields: dict[str, Any] = {"exit_code": exc.exit_code}
                ctx = getattr(exc, "ctx", None)
                if ctx is not None:
                    fields["usage"] = ctx.get_usage()
                    fields["hint"] = f"try '{ctx.command_path} {ctx.help_option_names[0]}' for help"
                logs.say(f"error: {exc.format_message()}", level="ERROR", **fields)
                sys.exit(exc.exit_code)
            except click.exceptions.Abort:
                logs.say("Aborted!", level="ERROR")
                sys.exit(1)
            sys.exit(code if isinstance(code, int) else 0)
        finally:
            logs.restore(saved)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*ENGINE_COMMANDS, *_plugin_names()]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return _load(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with one_line_errors(lambda: _upgrade_command(ctx)):
                return super().invoke(ctx)
        except ImportError as exc:
            command = ctx.invoked_subcommand
            if command is None or command in ENGINE_COMMANDS:
                raise
            # a contributed command's dependency is missing (found only when it runs)
            fail(
                f"the `{command}` command is unavailable: {exc}\n"
                f"hint: install its missing dependency ({exc.name or exc}), e.g. pip install 'ujobs-bridge'"
            )


def _json_lines_asked(group: click.Group, argv: list[str]) -> bool:
    """Does this command line ask for JSON lines? The last ``--log-format`` on it decides;
    without one, ``$UJOBS_LOG_FORMAT`` does for a command that takes ``--log-format`` (a read
    command's own output is left alone)."""
    asked: str | None = None
    for i, word in enumerate(argv):
        if word == "--":
            break
        if word == "--log-format" and i + 1 < len(argv):
            asked = argv[i + 1]
        elif word.startswith("--log-format="):
            asked = word.partition("=")[2]
    if asked is not None:
        return asked == "json"
    if os.environ.get("UJOBS_LOG_FORMAT") != "json":
        return False
    command: click.Command | None = group
    for word in argv:
        if not isinstance(command, click.Group):
            break
        if word.startswith("-"):
            continue
        command = command.get_command(click.Context(command), word)
    return command is not None and any(p.name == "log_format" for p in command.params)


def _upgrade_command(ctx: click.Context) -> str | None:
    """The command that upgrades the database this command resolved, once it resolved one."""
    resolved = ctx.meta.get(RESOLVED_KEY)
    return resolved.upgrade_command if isinstance(resolved, ResolvedDatabase) else None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ujobs-bridge")
def cli() -> None:
    """Durable jobs in Postgres, and the road off Celery."""


def main() -> None:
    cli()

"""``ujobs-bridge jobs cancel | requeue``: one job by id, or every job a filter matches.

Why it exists: stopping a job (a running body is signalled at once) and giving a dead letter
another go are the two levers an operator pulls most; after an incident they pull them on a whole
queue, one task's name glob or one state. A bulk action counts what it would touch, asks (or takes
``--yes``), and reports how many rows it changed; each row is changed exactly as the one-row
action changes it (``db/bulk.py``).

What it is not: the statements (``db/bulk.py``, ``db/steering.py``) or the reads (``jobs.py``).
"""

from __future__ import annotations

import click

from ujobs_bridge._internal.cli.options import (
    APP,
    app_database,
    checked_filters,
    dsn_option,
    json_option,
    print_json,
)
from ujobs_bridge._internal.db.bulk import CANCELLABLE, REQUEUEABLE, JobFilter
from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.observe.introspect import (
    Introspector,
    name_pattern,
    parse_shown_state,
)
from ujobs_bridge.errors import ConfigError

PAST = {"cancel": "cancelled", "requeue": "requeued"}


def _filter_options(fn: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(
        [
            click.option("--queue", default=None, help="Every matching job on this queue."),
            click.option("--name", default=None, help="Every matching job of this name or glob."),
            click.option(
                "--state",
                default=None,
                help="Every matching job in this state (dead: the dead letters; a failure kind"
                " in capitals, FAILURE: Celery tasks that failed).",
            ),
            click.option("--task-id", default=None, help="The jobs of this Celery task id."),
            click.option("--yes", "-y", is_flag=True, help="Do not ask before a bulk action."),
        ]
    ):
        fn = option(fn)
    return fn


def _steer(
    action: str,
    job_id: str | None,
    states: tuple[str, ...],
    *,
    queue: str | None,
    name: str | None,
    state: str | None,
    task_id: str | None,
    yes: bool,
    app_spec: str | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    checked_filters(name=name, task_id=task_id)
    introspector = Introspector(app_database(app_spec, dsn, quiet=as_json).dsn)
    bulk = any(v is not None for v in (queue, name, state, task_id))
    if job_id is not None and bulk:
        raise click.UsageError("give a job ID or filters (--queue/--name/--state), not both")
    if job_id is None and not bulk:
        raise click.UsageError(
            f"{action} what? give a job ID, or --queue/--name/--state/--task-id for many"
        )
    if job_id is not None:
        (record,) = introspector.find(job_id)[:1]
        done = (
            introspector.cancel(record.id)
            if action == "cancel"
            else introspector.requeue(record.id)
        )
        if as_json:
            print_json(done.as_json())
        else:
            click.echo(f"{PAST[action]} {done.id} ({done.name})")
        return
    try:
        parsed, kind = parse_shown_state(state)
        if queue is not None:
            validation.queue_name(queue)
    except ConfigError as exc:
        raise click.UsageError(exc.render()) from exc
    if parsed is not None and parsed.value not in states:
        raise click.UsageError(
            f"--state {kind or parsed.value}: only {', '.join(states)} jobs can be {PAST[action]}"
        )
    ids = introspector.task_job_ids(task_id) if task_id is not None else None
    where = JobFilter(
        state=kind or (parsed.value if parsed else None),  # FAILURE: the dead rows of that kind
        queue=queue,
        name_like=name_pattern(name),
        ids=ids,
    )
    matching = introspector.count_matching(where, states)
    if matching == 0:
        changed = 0
    else:
        if not yes and not as_json:
            click.confirm(f"{action} {matching} job(s)?", abort=True, err=True)
        elif not yes:
            raise click.UsageError("--json with a bulk action needs --yes (nothing to ask)")
        if action == "cancel":
            changed = introspector.cancel_matching(where)
        else:
            changed = introspector.requeue_matching(where)
    if as_json:
        print_json({"action": action, "matched": matching, "changed": changed})
    else:
        rest = f" of {matching} matching" if changed != matching else ""
        click.echo(f"{PAST[action]} {changed} job(s){rest}")


def _steer_command(action: str, states: tuple[str, ...], help_text: str) -> click.Command:
    """``cancel`` and ``requeue``: the same arguments, options and steering, one action each."""

    @click.command(name=action, help=help_text)
    @click.argument("job_id", metavar="[ID]", required=False)
    @_filter_options
    @APP
    @dsn_option
    @json_option
    def command(
        job_id: str | None,
        queue: str | None,
        name: str | None,
        state: str | None,
        task_id: str | None,
        yes: bool,
        app_spec: str | None,
        dsn: str | None,
        as_json: bool,
    ) -> None:
        _steer(
            action, job_id, states, queue=queue, name=name, state=state, task_id=task_id,
            yes=yes, app_spec=app_spec, dsn=dsn, as_json=as_json,
        )  # fmt: skip

    return command


cancel = _steer_command(
    "cancel",
    CANCELLABLE,
    "Cancel a live job (ID: a job id or a Celery task id), or every live job matching "
    "--queue/--name/--state/--task-id (asks first unless --yes); running bodies are signalled.",
)
requeue = _steer_command(
    "requeue",
    REQUEUEABLE,
    "Give a dead or cancelled job (or every one matching the filters; asks first unless "
    "--yes) a fresh set of attempts, due now.",
)

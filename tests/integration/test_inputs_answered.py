"""Every input answered: the engine API, Celery's ``apply_async``/``send_task``, the dashboard's
query strings and ``migrate``'s broker envelopes give a clear error (the project's ``UJ_*`` error
with a hint, or the exception Celery itself raises there) or store the input exactly (read back
equal), never a driver error or a crash.

The named cases first (each one answered with a bare Python or driver error before), then
property-based suites (Hypothesis, ``inputs_support.bounded``: a fixed seed under ``CI``) that
generate arguments, options, names, query strings and envelopes and assert exactly that. Run
with ``-s`` to see the tally by surface.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, timedelta, timezone
from typing import Any
from urllib.parse import quote_from_bytes

import migrate_support as ms
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from inputs_support import asgi_get, bounded, tally, tally_text
from kombu.exceptions import EncodeError
from kombu.utils import json as kombu_json
from migrate_support import qdsn  # noqa: F401 - shared fixture
from psycopg.rows import dict_row

from apps import celery_sends as s
from apps.celery_harness import bound
from celery_compat.sending.message_row import from_input
from migrate.batch import (
    DUPLICATE,
    EXPIRED,
    MOVED,
    QUARANTINE_SEEN,
    QUARANTINED,
    Context,
    Taken,
    commit_prepared,
    prepare,
)
from migrate.decoding import Accept
from ujobs_bridge import job
from ujobs_bridge._internal.dashboard.app import create_app
from ujobs_bridge._internal.dashboard.config import DashboardConfig
from ujobs_bridge.client import Client
from ujobs_bridge.errors import ErrorCode, UjobsError


@pytest.fixture(scope="module", autouse=True)
def _tally_printed() -> Iterator[None]:
    yield
    print("\n" + tally_text())


def refused_clearly(exc: BaseException) -> None:
    """A UJ_* error with a message and a hint."""
    assert isinstance(exc, UjobsError), f"{type(exc).__name__}: {exc}"
    assert exc.code.value.startswith("UJ_") and exc.message and exc.hint


@job(name="inputs.echo")
def echo(*args: Any, **kwargs: Any) -> None:
    """Never run: what its enqueues store is what these tests read."""


def _input_of(db: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any]:
    cur = db.cursor(row_factory=dict_row)
    row = cur.execute(
        "select name, queue, priority, run_at, idempotency_key, input from x_jobs where id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row


def same(a: Any, b: Any) -> bool:
    """Equal as the values a job body receives: numbers by value (jsonb gives ``1e16`` back as
    the int it equals), tuples as lists."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


# -- the named cases -------------------------------------------------------------------------


def test_retry_on_that_is_not_an_exception_class_is_refused_with_the_fix() -> None:
    with pytest.raises(UjobsError) as refused:
        job(retry_on=5)(lambda: None)  # type: ignore[call-overload]
    refused_clearly(refused.value)
    assert refused.value.code == ErrorCode.JOB_OPTION_INVALID
    one = job(name="inputs.one_class", retry_on=ValueError)(lambda: None)  # as `except` takes
    assert one.retry.retries(ValueError()) and not one.retry.retries(KeyError())


@pytest.mark.parametrize(
    "options",
    [{"delay": 10**400}, {"expires": 10**400}],
    ids=["delay", "expires"],
)
def test_a_duration_past_the_largest_float_is_refused_not_overflowed(
    options: dict[str, Any],
) -> None:
    with pytest.raises(UjobsError) as refused:
        echo.configure(**options)
    refused_clearly(refused.value)


def test_engine_targets_and_batches_of_the_wrong_kind_are_refused(client: Client) -> None:
    for bad in (lambda: echo.configure(conn=5), lambda: echo.configure(client="db")):
        with pytest.raises(UjobsError) as refused:
            bad()  # type: ignore[no-untyped-call]
        refused_clearly(refused.value)
    for batch in (5, [5]):
        with pytest.raises(UjobsError) as refused:
            client.enqueue_many(batch)  # type: ignore[arg-type]
        refused_clearly(refused.value)


@pytest.fixture
def celery_app(dsn: str) -> Iterator[Any]:
    with bound(s.app, dsn):
        yield s.app


# What Celery 5 itself raises for each (``AMQP.as_task_v2``, ``Celery.send_task``): code that
# catches Celery's type keeps working, and gets the project's code and hint as well.
CELERY_TYPED = [
    ({"countdown": 1e300}, OverflowError),
    ({"countdown": float("inf")}, OverflowError),
    ({"countdown": float("nan")}, ValueError),
    ({"countdown": "5"}, TypeError),
    ({"expires": "tomorrow"}, ValueError),
    ({"expires": float("nan")}, ValueError),
    ({"expires": 1e300}, OverflowError),
    ({"expires": object()}, TypeError),
    ({"priority": "high"}, ValueError),
    ({"retries": "x"}, ValueError),
    ({"headers": 5}, TypeError),
    ({"task_id": "a\x00b"}, EncodeError),  # kombu's, as for any message it cannot encode
    ({"group_id": "g\ud800"}, EncodeError),
    ({"time_limit": "x"}, TypeError),  # a worker could not keep it: the row would be poison
    ({"soft_time_limit": float("nan")}, ValueError),
]


@pytest.mark.parametrize(
    ("options", "celery_type"),
    CELERY_TYPED,
    ids=[f"{next(iter(o))}-{t.__name__}-{i}" for i, (o, t) in enumerate(CELERY_TYPED)],
)
def test_apply_async_refuses_a_bad_option_with_celerys_type_and_a_code(
    celery_app: Any, options: dict[str, Any], celery_type: type[Exception]
) -> None:
    with pytest.raises(celery_type) as refused:
        s.add.apply_async((1, 2), **options)
    refused_clearly(refused.value)
    assert s.add.apply_async((1, 2)).id  # the sender still sends


@pytest.mark.parametrize(
    "name", ["a\x00b", "a\ud800b", "", 5], ids=["nul", "surrogate", "empty", "int"]
)
def test_send_task_refuses_a_name_no_row_can_hold(celery_app: Any, name: Any) -> None:
    with pytest.raises((ValueError, TypeError)) as refused:
        celery_app.send_task(name)
    refused_clearly(refused.value)


def test_a_result_or_revoke_of_an_id_no_row_can_hold_answers_without_a_driver_error(
    celery_app: Any,
) -> None:
    assert celery_app.AsyncResult("a\x00b").state == "PENDING"  # never sent: nothing stored
    with pytest.raises(ValueError) as refused:
        celery_app.control.revoke("a\x00b")
    refused_clearly(refused.value)


@pytest.fixture
def dashboard(dsn: str) -> Iterator[Any]:
    app = create_app(DashboardConfig(dsn=dsn))  # with the installed panels (migrate's)
    try:
        yield app
    finally:
        app.state.site.close()


@pytest.mark.parametrize(
    ("path", "query", "reason"),
    [
        ("/jobs", b"name=%00", "NUL"),
        ("/jobs", b"task_id=%00", "NUL"),
        ("/dead", b"name=%00", "NUL"),
        ("/jobs", b"offset=99999999999999999999", "at most"),
        ("/dead", b"offset=99999999999999999999", "at most"),
        ("/jobs", b"since=0001-01-01T00:00%2B14:00", "years 1..9999"),
        ("/jobs/a\x00b", b"", "NUL"),
    ],
)
def test_a_query_string_no_row_can_match_answers_400_with_the_reason(
    dashboard: Any, path: str, query: bytes, reason: str
) -> None:
    status, body = asgi_get(dashboard, path, query)
    assert (status, reason in body) == (400, True), body


# -- property-based suites ---------------------------------------------------------------------

TEXT = st.text(max_size=12) | st.sampled_from(["a\x00b", "\ud800", "x" * 300, "", " ", "émoji 🎉"])
JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | TEXT
    | st.sampled_from([10**30, -(2**63), 1e16, -0.0, 5e-324, float("nan")])
)
VALUES = st.recursive(
    JSON_LEAVES | st.binary(max_size=4) | st.builds(object),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(TEXT | st.integers(), inner, max_size=3)
    ),
    max_leaves=8,
)
SECONDS = (
    st.none()
    | st.floats()
    | st.integers()
    | st.timedeltas(min_value=timedelta(days=-3), max_value=timedelta(days=3 * 36525))
    | st.sampled_from([10**400, "5", timedelta.max])
)
ZONES = st.builds(
    timezone,
    st.timedeltas(
        min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)
    ),
)
INSTANTS = st.none() | st.datetimes(timezones=st.none() | st.just(UTC) | ZONES)
PRIORITIES = st.none() | st.integers() | st.floats() | TEXT | st.booleans()
NAMES = st.from_regex(r"[A-Za-z0-9_.:-]{1,20}", fullmatch=True)  # names the engine takes


@bounded(60)
@given(args=st.lists(VALUES, max_size=3), kwargs=st.dictionaries(TEXT, VALUES, max_size=2))
def test_engine_arguments_are_refused_clearly_or_stored_exactly(
    client: Client, db: psycopg.Connection[Any], args: list[Any], kwargs: dict[str, Any]
) -> None:
    try:
        ref = echo.configure(client=client).enqueue(*args, **kwargs)
    except UjobsError as exc:
        refused_clearly(exc)
        tally("engine arguments", "clear")
        return
    stored = _input_of(db, ref.id)["input"]
    assert same(stored, {"args": list(args), "kwargs": kwargs}), (stored, args, kwargs)
    tally("engine arguments", "stored")


ENGINE_DECLARED = st.fixed_dictionaries(
    {},
    optional={
        "name": NAMES | TEXT,
        "queue": NAMES | TEXT,
        "priority": st.integers(-9, 9) | PRIORITIES,
        "retry_on": st.sampled_from([ValueError, (KeyError,), 5, "x", [], (1,)]),
        "timeout": SECONDS,
        "max_attempts": st.integers() | TEXT,
    },
)
ENGINE_OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "delay": SECONDS,
        "run_at": INSTANTS,
        "expires": SECONDS | INSTANTS,
        "priority": st.integers(-9, 9) | PRIORITIES,
        "queue": NAMES | TEXT | st.integers(),
        "idempotency_key": NAMES | TEXT | st.integers(),
        "tenant_id": NAMES | TEXT,
    },
)


@bounded(60)
@given(declared=ENGINE_DECLARED, options=ENGINE_OPTIONS)
def test_engine_options_and_names_are_refused_clearly_or_stored_exactly(
    client: Client, db: psycopg.Connection[Any], declared: dict[str, Any], options: dict[str, Any]
) -> None:
    if "delay" in options and "run_at" in options:
        del options["run_at"]  # both: refused by design; the rest is what is tried
    try:
        definition = job(**declared)(echo.fn)
        ref = definition.configure(client=client, **options).enqueue()
    except UjobsError as exc:
        refused_clearly(exc)
        tally("engine options and names", "clear")
        return
    row = _input_of(db, ref.id)
    if ref.existing:  # an earlier example's job under the same idempotency key: that one
        assert row["idempotency_key"] == options["idempotency_key"]
        tally("engine options and names", "stored")
        return
    assert row["name"] == definition.name == declared.get("name", row["name"])
    assert row["queue"] == (options.get("queue") or declared.get("queue") or "default")
    assert row["idempotency_key"] == options.get("idempotency_key")
    priority = options.get("priority")
    assert row["priority"] == (priority if priority is not None else declared.get("priority", 0))
    if options.get("run_at") is not None:
        assert row["run_at"] == options["run_at"]
    tally("engine options and names", "stored")


CELERY_TIMES = (
    st.none()
    | st.floats()
    | st.integers()
    | TEXT
    | st.sampled_from(
        ["2026-01-01T00:00:00+00:00", "tomorrow", "0001-01-01T00:00:00+14:00", 10**400]
    )
)
CELERY_OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "countdown": CELERY_TIMES,
        "eta": INSTANTS | TEXT | st.integers(),
        "expires": CELERY_TIMES | INSTANTS,
        "priority": PRIORITIES,
        "retries": st.none() | st.integers(min_value=-5, max_value=5) | TEXT,
        "task_id": st.none() | TEXT,
        "group_id": st.none() | TEXT,
        "time_limit": SECONDS,
        "soft_time_limit": st.none() | st.floats(),
        "headers": st.none() | st.dictionaries(TEXT, VALUES, max_size=2) | st.integers(),
        "queue": st.none() | TEXT,
    },
)
CELERY_REFUSALS = (UjobsError, EncodeError)  # EncodeError: Celery's own, for arguments


def _celery_row(db: psycopg.Connection[Any], task_id: str) -> dict[str, Any]:
    cur = db.cursor(row_factory=dict_row)
    row = cur.execute(
        "select name, queue, input from x_jobs"
        " where coalesce(input -> 'headers' ->> 'id', input ->> 'id') = %s"
        " order by created_at desc, id desc limit 1",  # an id sent again: the newest send
        (task_id,),
    ).fetchone()
    assert row is not None, task_id
    return row


@bounded(60)
@given(
    name=st.sampled_from(["apps.celery_sends.add"]) | TEXT | st.integers(),
    args=st.lists(VALUES, max_size=3),
    kwargs=st.dictionaries(TEXT, VALUES, max_size=2),
    options=CELERY_OPTIONS,
)
def test_celery_sends_are_refused_with_celerys_type_or_stored_exactly(
    celery_app: Any,
    db: psycopg.Connection[Any],
    name: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    options: dict[str, Any],
) -> None:
    try:
        result = celery_app.send_task(name, args, kwargs, **options)
    except CELERY_REFUSALS as exc:
        if isinstance(exc, UjobsError):
            refused_clearly(exc)
        else:
            assert str(exc)
        tally("celery send_task/apply_async", "clear")
        return
    row = _celery_row(db, result.id)
    message = from_input(row["input"], queue=row["queue"])
    assert row["name"] == name
    assert kombu_json.dumps([message.args, message.kwargs]) == kombu_json.dumps([args, kwargs])
    tally("celery send_task/apply_async", "stored")


QUERY_KEYS = st.sampled_from(
    ["name", "task_id", "offset", "state", "queue", "since", "until", "before", "all", "x"]
)
QUERY_VALUES = st.binary(max_size=24) | st.sampled_from(
    [b"\x00", b"99999999999999999999", b"-1", b"0001-01-01T00:00", b"9999-12-31T23:59+14:00",
     b"\xff\xfe", b"2026-01-01T00:00,00000000-0000-0000-0000-000000000000", b"dead"]
)  # fmt: skip


@bounded(80)
@given(
    path=st.sampled_from(["/", "/jobs", "/dead", "/scheduled", "/workers", "/quarantine"])
    | st.builds(
        lambda page, t: page + t,
        st.sampled_from(["/jobs/", "/quarantine/"]),
        TEXT.filter(lambda t: "/" not in t and t) | st.integers().map(str),
    ),
    query=st.lists(st.tuples(QUERY_KEYS, QUERY_VALUES), max_size=4),
)
def test_dashboard_query_strings_answer_200_or_400_with_the_reason(
    dashboard: Any, path: str, query: list[tuple[str, bytes]]
) -> None:
    raw = "&".join(f"{k}={quote_from_bytes(v)}" for k, v in query).encode()
    status, body = asgi_get(dashboard, path, raw)
    assert status in (200, 400, 404), (status, body[:300])
    if status != 200:
        assert body.strip(), "a 400 says why"
        tally("dashboard query strings", "clear")
    else:
        tally("dashboard query strings", "stored")  # answered: the page for that filter


MIGRATE_TASK = "migrate_proj.add"


@pytest.fixture
def quarantine_conn(qdsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(qdsn, autocommit=True) as conn:
        yield conn


HEADER_VALUES = (
    st.none()
    | st.integers(0, 3)
    | INSTANTS.map(lambda d: d and d.isoformat())
    | st.integers()
    | st.floats()
    | TEXT
    | st.sampled_from([10**20, 1e400, "1e400"])
)


def _envelope(
    headers: dict[str, Any], properties: dict[str, Any], body: Any, raw_body: bytes | None
) -> bytes:
    body_bytes = (
        raw_body if raw_body is not None else json.dumps(body).encode("utf-8", "surrogatepass")
    )
    return json.dumps(
        {
            "body": base64.b64encode(body_bytes).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {
                "correlation_id": str(headers.get("id")),
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": "celery"},
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
                **properties,
            },
        }
    ).encode("utf-8", "surrogatepass")


@bounded(60)
@given(
    task=st.just(MIGRATE_TASK) | st.just(MIGRATE_TASK) | TEXT,
    task_id=st.uuids().map(str) | st.uuids().map(str) | TEXT | st.integers(),
    extra=st.dictionaries(
        st.sampled_from(["retries", "eta", "expires", "group", "root_id", "argsrepr", "timelimit"]),
        HEADER_VALUES,
        max_size=2,
    ),
    priority=st.none() | st.integers(0, 9) | PRIORITIES,
    args=st.lists(JSON_LEAVES, max_size=3),
    kwargs=st.dictionaries(TEXT, JSON_LEAVES, max_size=2),
    raw_body=st.none() | st.none() | st.none() | st.binary(max_size=16),
)
def test_migrate_envelopes_are_quarantined_with_a_reason_or_moved_exactly(
    quarantine_conn: psycopg.Connection[Any],
    task: str,
    task_id: Any,
    extra: dict[str, Any],
    priority: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    raw_body: bytes | None,
) -> None:
    db = quarantine_conn
    headers = {"lang": "py", "task": task, "id": task_id, **extra}
    properties = {} if priority is None else {"priority": priority}
    body = [args, kwargs, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
    raw = _envelope(headers, properties, body, raw_body)
    ctx = Context(ms.app_info(), Accept(), "redis://broker.invalid/0", "redis")  # a label
    taken = Taken(raw, "redis", "celery")
    prepared = prepare([taken], ctx)
    [result] = commit_prepared(db, prepared, ctx)
    if result.outcome in (QUARANTINED, QUARANTINE_SEEN):
        found = db.execute(
            "select reason, raw from x_migrate_quarantine where raw = %s", (raw,)
        ).fetchall()
        assert found and found[0][0], "kept with its reason"
        tally("migrate envelopes", "clear")
        return
    assert result.outcome in (MOVED, EXPIRED, DUPLICATE), result
    if result.outcome == DUPLICATE:  # the ledger's own check: the same arguments as its row
        tally("migrate envelopes", "stored")
        return
    [(_, decoded)] = prepared.good
    stored = db.execute("select input from x_jobs where id = %s", (decoded.message.job_id,))
    message = from_input(stored.fetchone()[0], queue="celery")
    text = raw_body.decode() if raw_body is not None else json.dumps(body)
    sent = kombu_json.loads(text)
    assert kombu_json.dumps([message.args, message.kwargs]) == kombu_json.dumps(sent[:2])
    tally("migrate envelopes", "stored")


# -- the command line's filters ----------------------------------------------------------------

# A number as a flag takes it: small, huge, negative, past bigint, not a number at all.
CLI_COUNTS = st.integers(-5, 200).map(str) | st.sampled_from(
    ["99999999999999999999", str(2**63 - 1), str(2**63), "-9223372036854775809", "1e3", "",
     "0x10", " 5", "nan", "\x00", "٣"]
)  # fmt: skip
CLI_TEXT = TEXT | st.sampled_from(["*", "?", "%", "_", "inputs.*", "a\\", "'", "x" * 2000])
CLI_STATES = (
    st.sampled_from(
        ["ready", "running", "dead", "done", "cancelled", "FAILURE", "Dead", "failure", "bogus"]
    )
    | TEXT
)
CLI_DURATIONS = st.floats().map(str) | st.sampled_from(
    ["nan", "inf", "-5", "1e400", "0", "5m", "12h", "1e400d", "-1d", "\x00", "", "9" * 400 + "s"]
)  # fmt: skip
# (command, the filter flags it takes, whether it pages, the flags it needs to act)
CLI_COMMANDS = {
    "jobs ls": (("--name", "--queue", "--state", "--task-id"), True, ()),
    "jobs dead": (("--name", "--queue"), True, ()),
    "jobs cancel": (("--name", "--queue", "--state", "--task-id"), False, ("--yes",)),
    "jobs requeue": (("--name", "--queue", "--state", "--task-id"), False, ("--yes",)),
    "migrate quarantine ls": (("--reason",), False, ()),
}
CLI_FLAG_VALUES = {
    "--name": CLI_TEXT,
    "--queue": NAMES | CLI_TEXT,
    "--state": CLI_STATES,
    "--task-id": st.uuids().map(str) | CLI_TEXT,
    "--reason": st.sampled_from(["unknown_task", "malformed"]) | CLI_TEXT,
}


@pytest.fixture
def listed(client: Client) -> Client:
    """A few rows for the commands to find: ready, with names a glob can match."""
    for i in range(3):
        echo.configure(client=client, queue=f"q{i}").enqueue(i)
    return client


def _cli_outcome(surface: str, result: Any) -> None:
    """Exit 0 (answered), or a refusal the user can act on: exit 2 (a usage error naming the
    flag: a UJ_* code where the project checks the value, click's own words for one of the
    wrong type) or exit 1 with a UJ_* code; never a traceback, a driver error or an exception
    let out."""
    output = result.output
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    assert not escaped, f"{type(result.exception).__name__}: {result.exception}\n{output}"
    assert "Traceback" not in output and "psycopg" not in output, output
    if result.exit_code == 0:
        tally(surface, "stored")  # answered: the listing (or the count) for that filter
        return
    assert result.exit_code in (1, 2), (result.exit_code, output)
    if result.exit_code == 2:
        assert "Usage:" in output and "Error:" in output, output
    else:
        assert "[UJ_" in output and "hint:" in output, output
    tally(surface, "clear")


@bounded(80)
@given(
    command=st.sampled_from(sorted(CLI_COMMANDS)),
    values=st.fixed_dictionaries({}, optional=CLI_FLAG_VALUES),
    limit=st.none() | CLI_COUNTS,
    offset=st.none() | CLI_COUNTS,
    as_json=st.booleans(),
)
def test_cli_filters_answer_or_refuse_with_a_code_never_a_driver_error(
    listed: Client,
    dsn: str,
    command: str,
    values: dict[str, str],
    limit: str | None,
    offset: str | None,
    as_json: bool,
) -> None:
    from click.testing import CliRunner

    from ujobs_bridge._internal.cli import cli

    flags, pages, needs = CLI_COMMANDS[command]
    args = [*command.split(), *needs, "--dsn", dsn]
    for flag in flags:
        if flag in values:
            args += [flag, values[flag]]
    if command.endswith(("cancel", "requeue")) and not any(f in values for f in flags):
        args += ["--queue", "q0"]  # a bulk action names what it acts on
    if pages or command == "migrate quarantine ls":
        args += [] if limit is None else ["--limit", limit]
    if pages:
        args += [] if offset is None else ["--offset", offset]
    if as_json:
        args.append("--json")
    _cli_outcome("cli filters", CliRunner().invoke(cli, args))


@bounded(40)
@given(
    job_id=st.uuids().map(str) | CLI_TEXT,
    durations=st.sampled_from(["jobs stats --stranded-after", "purge --older-than"]),
    duration=CLI_DURATIONS,
)
def test_cli_ids_and_durations_answer_or_refuse_with_a_code(
    listed: Client, dsn: str, job_id: str, durations: str, duration: str
) -> None:
    from click.testing import CliRunner

    from ujobs_bridge._internal.cli import cli

    shown = CliRunner().invoke(cli, ["jobs", "show", "--dsn", dsn, "--", job_id])
    _cli_outcome("cli ids and durations", shown)
    *words, flag = durations.split()
    timed = CliRunner().invoke(cli, [*words, flag, duration, "--dsn", dsn, "--json"])
    _cli_outcome("cli ids and durations", timed)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["jobs", "ls", "--name", "\x00"], "--name holds a NUL"),
        (["jobs", "ls", "--task-id", "a\ud800"], "--task-id holds a lone surrogate"),
        (["jobs", "ls", "--offset", "99999999999999999999"], "--offset"),
        (["jobs", "dead", "--offset", str(2**63)], "--offset"),
        (["jobs", "dead", "--queue", "\x00"], "UJ_QUEUE_NAME_INVALID"),
        (["jobs", "cancel", "--name", "\x00", "--yes"], "--name holds a NUL"),
        (["migrate", "quarantine", "ls", "--reason", "\x00"], "--reason holds a NUL"),
        (["jobs", "stats", "--stranded-after", "212663328857"], "longest look back"),
        (["purge", "--older-than", "1000000d"], "longest look back"),
    ],
    ids=["ls-name-nul", "ls-task-surrogate", "ls-offset", "dead-offset", "dead-queue",
         "cancel-name", "quarantine-reason", "stats-lookback", "purge-lookback"],
)  # fmt: skip
def test_a_cli_filter_no_row_can_match_is_a_usage_error_with_the_reason(
    dsn: str, args: list[str], says: str
) -> None:
    from click.testing import CliRunner

    from ujobs_bridge._internal.cli import cli

    result = CliRunner().invoke(cli, [*args, "--dsn", dsn])
    assert result.exit_code == 2, (result.exception, result.output)
    assert says in result.output and "[UJ_" in result.output

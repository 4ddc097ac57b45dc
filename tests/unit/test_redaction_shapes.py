"""Each secret shape the one redaction hides, and what it leaves alone: URL passwords with and
without ``://``, ``key=value`` and ``key: value`` pairs, quoted and JSON pairs, an
``Authorization`` header, secret-named keys in data and in argument reprs; exception names and
innocent keys are kept. Adversarial text is redacted in bounded time."""

from __future__ import annotations

import time

import pytest

from ujobs_bridge._internal.observe.redaction import mask_dsn, redact, redact_message, redact_repr


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("password=hunter2 user=bob", "password=*** user=bob"),
        ("passwd = hunter2", "passwd = ***"),
        ("pwd: hunter2", "pwd: ***"),
        ("token=tok_1, next", "token=***, next"),
        ("API_KEY='a b c'", "API_KEY=***"),
        ('{"client_secret": "xyz", "id": 3}', '{"client_secret": "***", "id": 3}'),
        ("{'password': 'x'}", "{'password': '***'}"),
        ("Authorization: Bearer abc.def", "Authorization: ***"),
        ("cookie=sess=1", "cookie=***"),
        ("postgresql://bob:s3cret@db/prod", "postgresql://bob:****@db/prod"),
        ("postgresql//bob:s3cret@db/prod", "postgresql//bob:****@db/prod"),
        ("at redis//:s3cret@cache:6379/0 now", "at redis//:****@cache:6379/0 now"),
        ("redis:/:s3cret@cache/0", "redis:/:****@cache/0"),
        ("login bob:s3cret@db.example failed", "login bob:****@db.example failed"),
        ("https://h/x?token=abc&page=2", "https://h/x?token=****&page=2"),
        ("KeyError: 'token'", "KeyError: 'token'"),
        ("TokenError: expired", "TokenError: expired"),
        ("routing_key=q idempotency_key=k", "routing_key=q idempotency_key=k"),
        ("queue=emails attempt=3", "queue=emails attempt=3"),
    ],
)
def test_a_secret_shape_in_free_text(text: str, shown: str) -> None:
    assert redact_message(text) == shown


def test_secret_keys_in_data_and_reprs() -> None:
    data = {"pwd": "x", "Password": "y", "nested": [{"api_key": "z"}], "note": "n"}
    assert redact(data) == {"pwd": "***", "Password": "***", "nested": [{"api_key": "***"}],
                            "note": "n"}  # fmt: skip
    assert redact_repr("{'pwd': 'x', 'n': 1}") == "{'pwd': '***', 'n': 1}"
    assert redact({"kwargsrepr": "{'passwd': 'x'}"}) == {"kwargsrepr": "{'passwd': '***'}"}


@pytest.mark.parametrize(
    ("dsn", "masked"),
    [
        ("postgresql//postgres:S3@127.0.0.1/db", "postgresql//postgres:****@127.0.0.1/db"),
        ("postgres:S3@127.0.0.1/db", "postgres:****@127.0.0.1/db"),
        ("postgresql//u:a/b@h/db", "postgresql//u:****@h/db"),
        ("host=h password=S3 port=1", "host=h password=**** port=1"),
        ("amqp://guest:S3@h:5672//", "amqp://guest:****@h:5672//"),
    ],
)
def test_a_dsn_is_masked_whatever_its_shape(dsn: str, masked: str) -> None:
    assert mask_dsn(dsn) == masked


@pytest.mark.parametrize(
    "text", ["a" * 200_000 + "/", "pass" * 50_000 + "=", "a+" * 100_000 + ":x@h", "'a'" * 70_000]
)
def test_adversarial_text_is_redacted_in_bounded_time(text: str) -> None:
    started = time.perf_counter()
    redact_message(text)
    assert time.perf_counter() - started < 5


NESTED = {"credentials": {"user": "u", "pw": "Nested_9"}, "password": "KwPwd_1", "n": 1}


@pytest.mark.parametrize(
    "text",
    [
        repr(NESTED),  # a kwargsrepr
        repr(NESTED)[:52],  # cut short, as Celery cuts a repr past argsrepr_maxsize
        repr((NESTED, "plain")),  # an argsrepr
        "ValueError: bad settings " + repr(NESTED),  # an error message quoting its kwargs
    ],
    ids=["kwargsrepr", "cut-short", "argsrepr", "in-a-message"],
)
def test_a_secret_keys_whole_value_is_hidden_in_a_repr_nested_or_cut_short(text: str) -> None:
    for shown in (redact_repr(text), redact_message(text), redact({"kwargsrepr": text})):
        assert "Nested_9" not in str(shown) and "KwPwd_1" not in str(shown), shown
    assert "'credentials': '***'" in redact_message(text)


def test_celerys_log_context_reads_its_args_and_kwargs_as_reprs() -> None:
    """``celery.app.trace`` logs a failure with ``extra={"data": {"args": argsrepr, "kwargs":
    kwargsrepr, ...}}``; a job's own args list and kwargs dict stay data, redacted by key."""
    context = {"args": repr(("plain",)), "kwargs": repr(NESTED), "name": "t"}
    shown = redact({"data": context})["data"]
    assert shown["kwargs"] == "{'credentials': '***', 'password': '***', 'n': 1}"
    assert shown["args"] == "('plain',)" and shown["name"] == "t"
    data = {"args": ["(not a repr)"], "kwargs": {"password": "x", "note": "{'pw': 1}"}}
    assert redact(data) == {
        "args": ["(not a repr)"], "kwargs": {"password": "***", "note": "{'pw': 1}"}
    }  # fmt: skip

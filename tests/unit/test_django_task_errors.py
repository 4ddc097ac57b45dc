"""The exception class a ``django.tasks`` ``TaskError`` names, read from the traceback text the
engine stores for a failed attempt (``ujobs_django.backend.exception_path``)."""

from __future__ import annotations

import traceback

import pytest

from ujobs_django.backend import ABORTED_EXCEPTION, UNKNOWN_EXCEPTION, exception_path


class ShopError(Exception):
    pass


def text_of(exc: BaseException) -> str:
    try:
        raise exc
    except BaseException as raised:
        return "".join(traceback.format_exception(raised))


@pytest.mark.parametrize(
    ("exc", "path"),
    [
        (ValueError("a: b"), "builtins.ValueError"),
        (KeyError(), "builtins.KeyError"),
        (ShopError("declined\nmulti-line"), f"{__name__}.ShopError"),
    ],
)
def test_the_class_of_the_last_exception_is_named(exc: BaseException, path: str) -> None:
    assert exception_path(text_of(exc)) == path


def test_a_chained_exception_names_the_outer_one() -> None:
    try:
        try:
            raise KeyError("k")
        except KeyError as inner:
            raise ShopError("outer") from inner
    except ShopError as outer:
        text = "".join(traceback.format_exception(outer))
    assert exception_path(text) == f"{__name__}.ShopError"


def test_a_worker_reason_and_no_traceback_have_their_own_names() -> None:
    assert exception_path("UJ_WORKER_LOST: the body thread failed: X") == ABORTED_EXCEPTION
    assert exception_path("") == UNKNOWN_EXCEPTION

"""``Fail``: a body that failed for good in its package's own word. The word is a capital-letter
kind (never an engine state), it survives the trip from a ``--pool processes`` child to the
worker, and the attempt settles ``dead`` with that kind: what every view then shows."""

from __future__ import annotations

from uuid import uuid4

import pytest

from ujobs_bridge import job
from ujobs_bridge._internal.worker import child
from ujobs_bridge._internal.worker.attempt import BodyResult, _explicit
from ujobs_bridge._internal.worker.job_log import outcome_of
from ujobs_bridge.errors import ConfigError
from ujobs_bridge.ext.jobs import Fail
from ujobs_bridge.records import ClaimedJob, JobState


@job(queue="unit")
def body() -> None:
    return None


def test_a_failure_kind_is_a_word_in_capitals() -> None:
    assert Fail("Traceback ...", "FAILURE").kind == "FAILURE"
    for bad in ("dead", "", "FAIL URE", "X" * 33):
        with pytest.raises(ConfigError, match="failure kind"):
            Fail("text", bad)


def test_a_childs_fail_reaches_the_worker_and_settles_dead_with_its_kind() -> None:
    reply = child._reply(body, BodyResult(error=Fail("Traceback: ValueError", "FAILURE")))
    error = child.body_result_from_child(reply).error
    assert isinstance(error, Fail) and (error.error, error.kind) == (
        "Traceback: ValueError",
        "FAILURE",
    )
    claimed = ClaimedJob(
        id=uuid4(), name=body.name, queue="unit", input={}, attempt=1, max_attempts=3,
        lease_token=uuid4(), expired=False,
    )  # fmt: skip
    settled = _explicit(claimed, error)
    assert settled is not None
    assert (settled.state, settled.failure_kind, settled.error) == (
        JobState.DEAD,
        "FAILURE",
        "Traceback: ValueError",
    )
    assert outcome_of(settled) == "FAILURE"

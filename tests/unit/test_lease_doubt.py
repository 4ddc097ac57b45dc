"""What an attempt writes when its worker could not renew the lease for about its length.

Why it exists: such a worker cannot tell a database that is down (then the lease still holds:
none runs out before the database has been up again for its length) from being cut off (then
another worker may own the job). It signals the body either way, but writes what the body ends
with, fenced by the lease's token, instead of dropping it: a result that returned is written as
such, a body that stopped on the signal hands its job back uncounted. A lease known lost (the
renewal said so) still writes nothing.
"""

from __future__ import annotations

import uuid

from ujobs_bridge import AttemptAborted, job
from ujobs_bridge._internal.jobs.context import AttemptSignal
from ujobs_bridge._internal.worker.attempt import BodyResult, settle
from ujobs_bridge.errors import ErrorCode
from ujobs_bridge.records import ClaimedJob, JobState

REASON = "the worker could not renew the lease"


@job(queue="doubt", max_attempts=1)
def body() -> None:
    return None


def claimed() -> ClaimedJob:
    return ClaimedJob(uuid.uuid4(), body.name, "doubt", {}, 1, 1, uuid.uuid4(), expired=False)


def doubtful() -> AttemptSignal:
    signal = AttemptSignal()
    signal.abort(ErrorCode.LEASE_LOST, REASON, certain=False)
    return signal


def test_a_result_returned_under_a_doubtful_lease_is_written() -> None:
    row = claimed()
    done = settle(body, row, BodyResult(output_json='"kept"'), doubtful())
    assert done is not None and (done.state, done.output_json) == (JobState.DONE, '"kept"')
    assert (done.id, done.token, done.uncount) == (row.id, row.lease_token, 0)


def test_a_body_that_stopped_on_the_signal_hands_its_job_back_uncounted() -> None:
    stopped = BodyResult(error=AttemptAborted(ErrorCode.LEASE_LOST, REASON))
    for result in (stopped, BodyResult()):  # raised the abort; or its pool child was killed
        back = settle(body, claimed(), result, doubtful())
        assert back is not None and (back.state, back.uncount) == (JobState.READY, 1)
        assert back.error == f"UJ_LEASE_LOST: {REASON}"


def test_a_body_that_failed_of_its_own_is_decided_as_always() -> None:
    failed = settle(body, claimed(), BodyResult(error=ValueError("bad")), doubtful())
    assert failed is not None and (failed.state, failed.uncount) == (JobState.DEAD, 0)


def test_a_lease_known_lost_writes_nothing() -> None:
    signal = AttemptSignal()
    signal.abort(ErrorCode.LEASE_LOST, "the lease was lost")
    assert settle(body, claimed(), BodyResult(output_json='"late"'), signal) is None

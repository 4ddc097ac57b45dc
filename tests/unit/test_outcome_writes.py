"""Outcome batches bounded by count and bytes, and the repair of an outcome the database refused.

Why it exists: the process-level proof is ``test_outages.py``; these pin the two rules it rests
on, without a database: a batch never grows past its bounds (but always takes one outcome, however
large; a large one being written is known, for the heartbeat), and a refused outcome is stored
sanitized (NUL escaped, lone surrogates escaped, error text truncated) or failed with a code
that says why.
"""

from __future__ import annotations

import uuid

import psycopg

from ujobs_bridge._internal.worker.outcome_batch import LARGE_WRITE, OutcomeBatch
from ujobs_bridge._internal.worker.outcome_writes import ERROR_LIMIT, refused, sanitized
from ujobs_bridge.records import JobState, Settlement


def done(output: str) -> Settlement:
    return Settlement(uuid.uuid4(), uuid.uuid4(), state=JobState.DONE, output_json=output)


def test_a_batch_is_bounded_by_count_and_by_bytes_but_takes_at_least_one() -> None:
    batch = OutcomeBatch(threshold=1, interval_s=0, max_items=3, max_bytes=10_000)
    for _ in range(5):
        batch.add(done('"small"'))
    first = batch.take_due(force=True)
    assert len(first) == 3 and batch.more()
    assert len(batch.take_due(force=True)) == 2 and not batch.more()

    for size in (6_000, 6_000, 20_000, 10):
        batch.add(done('"' + "x" * size + '"'))
    taken = [batch.take_due(force=True) for _ in range(4)]
    assert [len(t) for t in taken] == [1, 1, 1, 1]  # 6+6 KB is over 10 KB; 20 KB goes alone
    assert not batch.take_due(force=True)


def test_pending_outcomes_keep_their_leases_for_the_heartbeat() -> None:
    batch = OutcomeBatch(threshold=10, interval_s=60)
    owed = done('"x"')
    batch.add(owed)
    assert batch.leases() == [(owed.id, owed.token)]


def test_a_large_batch_being_written_is_seen_until_it_is_written_or_kept_again() -> None:
    batch = OutcomeBatch(threshold=1, interval_s=0, max_bytes=LARGE_WRITE)
    large, small = done('"' + "x" * LARGE_WRITE + '"'), done('"x"')
    batch.add(large)
    batch.add(small)
    taken = batch.take_due(force=True)
    assert taken == [large] and batch.writing_large()  # the heartbeat renews elsewhere
    assert batch.leases() == [(small.id, small.token)]  # its rows are locked by the write
    batch.restore(taken)  # the write failed: kept, renewed again
    assert not batch.writing_large() and len(batch.leases()) == 2
    batch.written(batch.take_due(force=True), {large.id})
    assert not batch.writing_large() and batch.counts.done == 1


def test_a_refused_outcome_is_sanitized_nul_and_surrogates_escaped_error_truncated() -> None:
    fixed = sanitized(done('{"text": "a\\u0000b", "k\\u0000": ["\\ud800"]}'))
    assert fixed is not None
    assert fixed.output_json == '{"text": "a\\\\u0000b", "k\\\\u0000": ["\\\\ud800"]}'
    failed = Settlement(
        uuid.uuid4(), uuid.uuid4(), state=JobState.DEAD, error="x" * 100_000 + "\x00 end"
    )
    repaired = sanitized(failed)
    assert repaired is not None and repaired.error is not None
    assert len(repaired.error) < ERROR_LIMIT + 100 and repaired.error.endswith("\\u0000 end")
    assert sanitized(done('"fine"')) is None  # nothing to fix: not "repaired"


def test_what_no_repair_can_store_fails_with_a_code() -> None:
    too_large = refused(done('"x"'), psycopg.errors.ProgramLimitExceeded("total size of jsonb"))
    assert too_large.state is JobState.DEAD and too_large.output_json is None
    assert too_large.error is not None and too_large.error.startswith("UJ_OUTPUT_TOO_LARGE")
    other = refused(
        Settlement(uuid.uuid4(), uuid.uuid4(), state=JobState.READY, error="e", delay_s=1.0),
        psycopg.errors.InvalidTextRepresentation("bad"),
    )
    assert other.state is JobState.READY and other.error is not None
    assert other.error.startswith("UJ_OUTPUT_REJECTED")

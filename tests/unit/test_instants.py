"""The one range of instants (``jobs/instants.py``) and how an instant outside it is read back
(``db/far_instants.py``). Pure: no database (the loaders are fed the bytes Postgres sends)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest
from psycopg.pq import Format

from ujobs_bridge._internal.db import far_instants
from ujobs_bridge._internal.db.far_instants import FarInstant
from ujobs_bridge.errors import ErrorCode, UjobsError
from ujobs_bridge.ext.jobs import EARLIEST_INSTANT, LATEST_INSTANT, instant_after, storable_instant
from ujobs_bridge.job import job


@job(queue="instants")
def noop() -> None:
    """Declared only to be configured."""


@pytest.mark.parametrize(
    "when",
    [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),  # 1 BC in UTC
        datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-12))),  # year 10000
        datetime(1, 1, 1, 12, tzinfo=UTC),  # inside Python, outside the day of margin
        datetime(9999, 12, 31, tzinfo=UTC),
    ],
)
def test_an_instant_outside_the_range_is_refused_with_a_code_and_a_hint(when: datetime) -> None:
    with pytest.raises(ValueError, match="outside the instants a row can hold"):
        storable_instant(when, "eta")
    for option in ("run_at", "expires"):
        with pytest.raises(UjobsError) as refused:
            noop.configure(**{option: when})
        assert refused.value.code == ErrorCode.JOB_OPTION_INVALID
        assert option in refused.value.message and "0001-01-02" in refused.value.hint


def test_the_range_ends_a_day_inside_what_python_holds() -> None:
    assert storable_instant(EARLIEST_INSTANT, "x") == EARLIEST_INSTANT
    assert storable_instant(LATEST_INSTANT, "x") == LATEST_INSTANT
    assert EARLIEST_INSTANT.astimezone(timezone(timedelta(hours=-15, minutes=-59))).year == 1
    assert LATEST_INSTANT.astimezone(timezone(timedelta(hours=15, minutes=59))).year == 9999
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert instant_after(now, 60, "countdown") == now + timedelta(seconds=60)
    for seconds in (1e12, -1e11, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            instant_after(now, seconds, "countdown")


def _loaded(oid: int, fmt: Format, data: bytes) -> object:
    loader = next(cls for o, cls in far_instants._LOADERS if o == oid and cls.format == fmt)
    return loader(oid, None).load(data)


@pytest.mark.parametrize(
    ("data", "late"),
    [
        (b"-infinity", False),
        (b"infinity", True),
        (b"0001-12-31 10:00:00+00 BC", False),
        (b"10000-01-01 11:59:00+00", True),
    ],
)
def test_a_stored_instant_python_cannot_hold_is_read_as_its_end_showing_the_stored_text(
    data: bytes, late: bool
) -> None:
    value = _loaded(far_instants.TIMESTAMPTZ_OID, Format.TEXT, data)
    assert isinstance(value, FarInstant)
    assert value.isoformat(timespec="seconds") == str(value) == data.decode()
    now = datetime.now(UTC)
    assert (value > now) is late and (value < now) is not late  # sorts at its end
    assert abs((now - value).total_seconds()) > 1e10  # ages work
    copy = pickle.loads(pickle.dumps(value))  # a pool child receives it
    assert isinstance(copy, FarInstant) and str(copy) == str(value) and copy == value
    assert type(value.replace(microsecond=0)) is datetime
    naive = _loaded(far_instants.TIMESTAMP_OID, Format.TEXT, data.replace(b"+00", b""))
    assert isinstance(naive, FarInstant) and naive.tzinfo is None


def test_ordinary_instants_load_as_psycopg_loads_them_and_other_refusals_still_raise() -> None:
    value = _loaded(far_instants.TIMESTAMP_OID, Format.TEXT, b"2030-01-02 03:04:05")
    assert type(value) is datetime and value == datetime(2030, 1, 2, 3, 4, 5)
    minus_infinity = (-(2**63)).to_bytes(8, "big", signed=True)
    binary = _loaded(far_instants.TIMESTAMP_OID, Format.BINARY, minus_infinity)
    assert isinstance(binary, FarInstant) and str(binary) == "-infinity"
    with pytest.raises(psycopg.DataError):
        _loaded(far_instants.TIMESTAMP_OID, Format.TEXT, b"Wed Jan 02 03:04:05 2030")

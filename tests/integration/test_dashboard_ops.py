"""The dashboard's operator pages in a real headless Chromium, against real processes: the
scheduled tasks of an engine app's cron ``task()``s and of a Celery app's ``beat_schedule`` (next
fire, last occurrence and whether it was a catch-up, watermark, catch-up policy, the leader while
a real scheduler leads and after it stepped down), and the migrate quarantine filled by a real
``migrate`` drain of Redis: retry from the page makes the job a real worker then runs, discard
resolves, raw bytes are escaped and secrets redacted, and no action passes without the CSRF
token or under ``--read-only``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from cli_proc import CliProc
from dashboard_support import Dashboard, browser, screenshot

from conftest import wait_for

pytestmark = pytest.mark.timeout(300)
Db = psycopg.Connection[Any]


@pytest.fixture
def started() -> Iterator[list[Any]]:
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        if hasattr(thing, "quit"):
            thing.quit()
        else:
            thing.close()
            if isinstance(thing, CliProc):
                print(f"--- {thing.args[0]} {thing.pid} ---\n{thing.output()[-3000:]}")


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds")


def _rows(driver: Any) -> dict[str, list[str]]:
    """The scheduled page's table: task name -> its cells' text."""
    from selenium.webdriver.common.by import By

    return {
        tr.get_attribute("data-task"): [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in driver.find_elements(By.CSS_SELECTOR, "#tasks tbody tr[data-task]")
    }


def _scheduler(dsn: str, app: str, log: Path) -> CliProc:
    args = ["scheduler", "-A", app, "--no-purge", "--interval", "0.25", "--lease", "3"]
    return CliProc([*args, "--dsn", dsn], log)


def _leader(db: Db) -> tuple[str, int]:
    row = db.execute("select holder, term from x_scheduler_leader").fetchone()
    assert row is not None
    return str(row[0]), int(row[1])


def _state(db: Db, task: str) -> tuple[datetime | None, datetime | None, bool | None]:
    """(watermark, last occurrence, last was a catch-up) as the database has them."""
    mark = db.execute("select watermark from x_scheduler_state where task = %s", (task,))
    last = db.execute(
        "select occurrence_at, catch_up from x_scheduler_fires where task = %s"
        " order by occurrence_at desc limit 1",
        (task,),
    ).fetchone()
    found = mark.fetchone()
    return (found[0] if found else None, last[0] if last else None, last[1] if last else None)


def _next_paris_0315(now: datetime) -> datetime:
    paris = ZoneInfo("Europe/Paris")
    local = now.astimezone(paris)
    at = datetime(local.year, local.month, local.day, 3, 15, tzinfo=paris)
    while at <= now:
        day = at.date() + timedelta(days=1)
        at = datetime(day.year, day.month, day.day, 3, 15, tzinfo=paris)
    return at


def test_scheduled_page_of_an_engine_app_shows_each_tasks_fires_and_the_live_leader(
    dsn: str, db: Db, tmp_path: Path, started: list[Any]
) -> None:
    db.execute("truncate x_scheduler_leader, x_scheduler_state, x_scheduler_fires")
    now = datetime.now(UTC)
    noon = now.replace(hour=12, minute=0, second=0, microsecond=0)
    last_noon = noon if noon <= now else noon - timedelta(days=1)  # obs-all's phase (default)
    for name in ("obs-all", "obs-once"):  # missed: last noon and the two before it
        db.execute(
            "insert into x_scheduler_state (task, watermark, updated_at) values (%s, %s, now())",
            (name, last_noon - timedelta(days=2, hours=1)),
        )
    scheduler = _scheduler(dsn, "apps.obs_sched", tmp_path / "scheduler.log")
    started.append(scheduler)

    def settled() -> bool:
        fires = db.execute("select count(*) from x_scheduler_fires").fetchone()
        marks = db.execute("select count(*) from x_scheduler_state").fetchone()
        return fires == (4,) and marks == (3,)

    wait_for(settled, timeout=60, what="the catch-ups fired and obs-cron's watermark set")
    dash = Dashboard(dsn, tmp_path / "dash.log", "-A", "apps.obs_sched")
    started.append(dash)
    driver = browser()
    started.append(driver)
    from selenium.webdriver.common.by import By

    before = datetime.now(UTC)
    marks_before = {name: _state(db, name)[0] for name in ("obs-all", "obs-once", "obs-cron")}
    driver.get(f"{dash.base}/scheduled")
    after = datetime.now(UTC)
    holder, term = _leader(db)

    def watermark_shown(name: str, shown: str) -> bool:
        """A running leader moves a watermark up to each round's instant: the page's is
        between the database's before and after the page was read."""
        low, high = marks_before[name], _state(db, name)[0]
        assert low is not None and high is not None
        return _iso(low) <= shown <= _iso(high)

    leader = driver.find_element(By.ID, "leader").text
    assert holder in leader and f"term {term}" in leader and "lease expired" not in leader
    assert f":{scheduler.pid}:" in holder
    rows = _rows(driver)
    assert set(rows) == {"obs-all", "obs-once", "obs-cron", "ujobs.purge.hourly"}
    next_noon = {_iso(last_noon + timedelta(days=1)), _iso(last_noon + timedelta(days=2))}
    for name, policy in (("obs-all", "all"), ("obs-once", "run-once")):
        mark, last, _ = _state(db, name)
        assert mark is not None and last == last_noon
        cells = rows[name]
        assert cells[1] == "every 1 day, 0:00:00 from 2000-01-01T12:00:00+00:00"
        assert cells[2] == policy
        assert cells[3] in next_noon
        assert cells[4] == f"{_iso(last_noon)} (catch-up)"
        assert watermark_shown(name, cells[5]), cells[5]
    mark, last, _ = _state(db, "obs-cron")  # a new task: no backlog, its watermark is its start
    assert mark is not None and last is None
    cells = rows["obs-cron"]
    assert cells[1] == "cron '15 3 * * *' in Europe/Paris" and cells[2] == "skip"
    assert cells[3] in {_iso(_next_paris_0315(before)), _iso(_next_paris_0315(after))}
    assert cells[4] == "never" and watermark_shown("obs-cron", cells[5]), cells[5]
    assert rows["ujobs.purge.hourly"][4:] == ["never", "-"]  # --no-purge: never fired here
    screenshot(driver, "scheduled-engine")

    scheduler.term()
    assert scheduler.wait(timeout=60) == 0
    driver.get(f"{dash.base}/scheduled")
    leader = driver.find_element(By.ID, "leader").text
    assert holder in leader and "lease expired" in leader  # it gave the lease back


def test_scheduled_page_of_a_celery_apps_beat_schedule(
    dsn: str, db: Db, tmp_path: Path, started: list[Any]
) -> None:
    db.execute("truncate x_scheduler_leader, x_scheduler_state, x_scheduler_fires")
    minute = datetime.now(UTC).replace(second=0, microsecond=0)
    db.execute(
        "insert into x_scheduler_state (task, watermark, updated_at) values (%s, %s, now())",
        ("beat:minutely-all", minute - timedelta(minutes=3, seconds=30)),
    )
    scheduler = _scheduler(dsn, "apps.celery_beat_app", tmp_path / "scheduler.log")
    started.append(scheduler)
    wait_for(
        lambda: (
            db.execute(
                "select count(*) from x_scheduler_fires where task = 'beat:minutely-all'"
            ).fetchone()[0]  # type: ignore[index]
            >= 4
        ),
        timeout=60,
        what="minutely-all's missed minutes fired",
    )
    wait_for(
        lambda: (
            db.execute(
                "select count(*) from x_scheduler_state where task = 'beat:nightly-report'"
            ).fetchone()
            == (1,)
        ),
        timeout=60,
        what="a round over every entry",
    )
    holder, term = _leader(db)
    scheduler.term()
    assert scheduler.wait(timeout=60) == 0  # what the page shows no longer moves
    dash = Dashboard(dsn, tmp_path / "dash.log", "-A", "apps.celery_beat_app")
    started.append(dash)
    driver = browser()
    started.append(driver)
    from selenium.webdriver.common.by import By

    before = datetime.now(UTC)
    driver.get(f"{dash.base}/scheduled")
    after = datetime.now(UTC)
    leader = driver.find_element(By.ID, "leader").text
    assert holder in leader and f"term {term}" in leader and "lease expired" in leader
    rows = _rows(driver)
    assert {
        "beat:minutely-all",
        "beat:nightly-report",
        "beat:first-monday",
        "beat:cleanup-elsewhere",
    } <= set(rows)
    assert any(name.startswith("beat:stamp-every-7s-") for name in rows)

    def next_minutes(at: datetime) -> str:
        return _iso(at.replace(second=0, microsecond=0) + timedelta(minutes=1))

    mark, last, catch_up = _state(db, "beat:minutely-all")
    assert mark is not None and last is not None and last >= minute
    cells = rows["beat:minutely-all"]
    assert cells[1:3] == ["cron '* * * * *' in UTC", "all"]
    assert cells[3] in {next_minutes(before), next_minutes(after)}
    assert cells[4] == _iso(last) + (" (catch-up)" if catch_up else "")
    assert cells[5] == _iso(mark)
    caught_up = db.execute(
        "select count(*) from x_scheduler_fires where task = 'beat:minutely-all' and catch_up"
    ).fetchone()
    assert caught_up is not None and caught_up[0] >= 3  # the three minutes before the start
    mark, last, _ = _state(db, "beat:nightly-report")
    nightly = before.replace(hour=2, minute=30, second=0, microsecond=0)
    nightly_next = {_iso(n if n > before else n + timedelta(days=1)) for n in (nightly,)}
    nightly_next.add(_iso(nightly + timedelta(days=1)))
    cells = rows["beat:nightly-report"]
    assert cells[1:3] == ["cron '30 2 * * *' in UTC", "skip"]
    assert cells[3] in nightly_next
    assert cells[4] == "never" and mark is not None and cells[5] == _iso(mark)
    assert rows["beat:cleanup-elsewhere"][1] == "every 1:00:00 from 2000-01-01T00:00:00+00:00"
    screenshot(driver, "scheduled-celery")

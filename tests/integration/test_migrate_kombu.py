"""Any other kombu transport goes through kombu's generic ``basic_get`` + ``ack`` with the same
order (commit, then ack): here the filesystem transport, which needs no server. Real Celery
publishes; every message becomes one row, the unknown task is quarantined, the broker ends empty,
and a dry run leaves every message file in place."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import migrate_support as ms
import psycopg

from migrate.appinfo import AppInfo
from migrate.batch import Context, retry_entry
from migrate.decoding import Accept
from migrate.report import Stats
from migrate.runner import SourceOptions, dry_run, open_source


def test_filesystem_transport_drains_once_each_with_ack_after_commit(
    dsn: str, tmp_path: Path
) -> None:
    ms.ensure_quarantine(dsn)
    folder = tmp_path / "broker"
    folder.mkdir()
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(tmp_path / "control"),
    }
    queue = ms.unique("fs")
    with ms.producer("filesystem://", queue, broker_transport_options=options) as p:
        ids = [p.add.apply_async((i, i), countdown=60 if i % 2 else None).id for i in range(30)]
        p.app.send_task("migrate_proj.added_later", args=(1,))
    files = sorted(folder.iterdir())
    assert len(files) == 31
    info = ms.app_info(transport_options=options)

    source = open_source("filesystem://", info, SourceOptions([queue]))
    try:
        preview = dry_run(
            source, Context(info, Accept(), "filesystem://", "kombu"), Stats(dry_run=True)
        )
    finally:
        source.close()
    assert (preview.outcomes["moved"], dict(preview.reasons)) == (30, {"unknown_task": 1})
    assert len(list(folder.iterdir())) == 31, "a dry run puts every message back"

    stats = ms.drain(dsn, "filesystem://", [queue], info=info)

    assert (stats.outcomes["moved"], dict(stats.reasons)) == (30, {"unknown_task": 1})
    assert Counter(ms.ledger_ids(dsn)) == Counter(ids)
    assert list(folder.iterdir()) == []
    (entry,) = ms.quarantined(dsn)
    assert entry["format"] == "kombu"

    # After a deploy the task exists: the stored body + metadata decode again into a job.
    from apps.migrate_proj_v2 import app as deployed

    with psycopg.connect(dsn, autocommit=True) as conn:
        outcome = retry_entry(
            conn,
            entry["id"],
            Context(AppInfo.from_app(deployed), Accept(), "filesystem://", "kombu"),
        )
    assert outcome is not None and outcome.ok and outcome.job_id is not None
    assert [r["name"] for r in ms.rows(dsn) if r["id"] == outcome.job_id] == [
        "migrate_proj.added_later"
    ]

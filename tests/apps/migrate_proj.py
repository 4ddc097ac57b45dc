"""The ``-A`` app of the migrate tests: a celery_compat app whose task names the drained
messages use. Tasks record what really ran in ``RAN`` (by task and arguments), so a test can
tell "never ran" from "ran twice"."""

from __future__ import annotations

from collections import Counter
from typing import Any

from celery_compat import Celery

app = Celery("migrate_proj")
app.conf.update(
    task_default_queue="celery", result_expires=3600, accept_content=["json", "msgpack", "yaml"]
)

RAN: Counter[str] = Counter()


@app.task(name="migrate_proj.add", shared=False)
def add(x: Any, y: Any) -> Any:
    RAN[f"add{(x, y)!r}"[:80]] += 1
    return x + y


@app.task(name="migrate_proj.mul", shared=False)
def mul(x: int, y: int) -> int:
    RAN[f"mul{(x, y)!r}"] += 1
    return x * y


@app.task(name="migrate_proj.record", shared=False)
def record(tag: str) -> str:
    RAN[f"record:{tag}"] += 1
    return tag

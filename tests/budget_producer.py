"""A producer process for ``tests/test_connection_budget.py``, driven line by line on stdin.

``python budget_producer.py engine|celery``: prints ``ready`` once connected, then for each line
``load N`` sends N jobs from 4 threads (engine: ``noop.enqueue`` on a ``connect()`` client;
celery: ``slow_add.delay(...)`` followed by ``.get()``, so results are read while others are
written) and prints ``done N``; ``quit`` (or end of input) exits.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

THREADS = 4


def main(kind: str) -> None:
    if kind == "engine":
        from apps.budget_jobs import noop
        from ujobs_bridge import connect

        client = connect(os.environ["UJOBS_DATABASE_URL"], upgrade=False)

        def send(i: int) -> None:
            noop.configure(client=client).enqueue(i)

    else:
        from apps.budget_celery import slow_add

        def send(i: int) -> None:
            assert slow_add.delay(i, 1).get(timeout=120) == i + 1

    print("ready", flush=True)
    with ThreadPoolExecutor(THREADS) as pool:
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "quit":
                break
            count = int(words[1])
            list(pool.map(send, range(count)))
            print(f"done {count}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

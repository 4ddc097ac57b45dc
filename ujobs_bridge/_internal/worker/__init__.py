"""The worker: claims ready jobs, runs each attempt, writes its outcome, and never loses a job.

Why it is a package: the claim loop (``loop.py``, class ``Worker``) and what it composes are one
component with one boundary: the claim connection and its statements (``claims.py``), the
in-flight table, the only place an attempt is settled (``inflight.py``), the attempt core every
runtime shares (``attempt.py``: ``run_body``, ``perform``), the runtimes behind one interface
(``runtimes.py``: body threads from ``body_threads.py``, an event loop, a process pool of kept
children, ``children.py``, each running ``child.py``), how attempts are stopped early (``stopping.py``), the outcome batch
(``outcome_batch.py``), and the two ``Service`` loops at its side, the lease heartbeat
(``heartbeat.py``) and the wake-up listener (``listener.py``). Depends only downward: on the
engine's ``db``, ``steps``, ``context`` and ``job``; nothing below imports it.

What it is not: the CLI (``ujobs_bridge._internal.cli``) or the place jobs are declared (``ujobs_bridge.job``).
"""

from __future__ import annotations

from ujobs_bridge._internal.worker.config import WorkerConfig
from ujobs_bridge._internal.worker.loop import Worker

__all__ = ["Worker", "WorkerConfig"]

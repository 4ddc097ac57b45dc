"""The worker: claims ready jobs, runs each attempt, writes its outcome, and never loses a job.

Why it is a package: the claim/settle loop (``loop.py``), the attempt core every runtime shares
(``attempt.py``), where bodies run (``runtimes.py``, ``child.py``, ``body_threads.py``), how
attempts are stopped early (``stopping.py``), the outcome batch (``outcome_batch.py``) and the two
loops at its side, the lease heartbeat (``heartbeat.py``) and the wake-up listener
(``listener.py``), are one component with one boundary.

What it is not: the CLI (``ujobs_bridge.cli``) or the place jobs are declared (``ujobs_bridge.job``).
"""

from __future__ import annotations

from .config import WorkerConfig
from .loop import Worker

__all__ = ["Worker", "WorkerConfig"]

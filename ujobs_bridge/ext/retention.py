"""Retention as an upper package contributes to it (entry point ``ujobs_bridge.retention``): a
``PurgeTarget`` per table, deleted in batches of ``BATCH`` rows, older than the default cutoff.

What it is not: the sweep itself (the engine's purge job).
"""

from __future__ import annotations

from ujobs_bridge._internal.jobs.purge import BATCH, DEFAULT_OLDER_THAN_S, PurgeTarget

__all__ = ["BATCH", "DEFAULT_OLDER_THAN_S", "PurgeTarget"]

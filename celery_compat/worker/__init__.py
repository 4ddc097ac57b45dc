"""The worker side: ``celery -A proj worker`` on the bridge worker, and what Celery's worker does
around a task run: the request, settings, signals, time limits, rate limits, revoked ids.

What it is not: the engine's worker loop (``ujobs_bridge.ext.worker``), which this configures.
"""

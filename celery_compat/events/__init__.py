"""Celery events: task and worker events with Celery's names and fields, the emitter that sends them
to Postgres and the broker, the runtime switch, and the log read back for a dashboard.

What it is not: remote control (``celery_compat.control``).
"""

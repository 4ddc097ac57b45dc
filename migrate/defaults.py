"""The drainer's defaults and its one warning text, importable without Celery, kombu or psycopg.

Why it exists: ``ujobs-bridge --help`` and every other command import the CLI module that
declares ``migrate``'s options; those options need these values, and importing the drainer
itself (Celery, kombu) for them would slow every command down.

What it is not: configuration storage; flags override every value here.
"""

from __future__ import annotations

DEFAULT_MAX_BYTES = 8 * 1024 * 1024  # largest message, and largest decompressed body
DEFAULT_BATCH = 1000  # messages per transaction (RabbitMQ prefetch: four batches)
DEFAULT_POLL_S = 0.25  # --follow: seconds between polls of empty queues (bounds the latency)

PICKLE_WARNING = (
    "WARNING: --accept-pickle unpickles message bodies in THIS process. Unpickling runs whatever "
    "code the bytes name, so anyone who could write to this broker can run code here, with this "
    "process's database credentials. Use it only for a broker only you could write to."
)

"""``Source``: what the drain loop asks of a broker transport.

Why it exists: the drain loop (``runner.py``), the outage ride-through (``outages.py``, which
reopens a source after a broker outage) and the CLI all handle a source without knowing its
broker; the transports (``redis_drain.py``, ``amqp_drain.py``, ``kombu_drain.py``) implement it.
Its own module, below all of them, so that none imports another for the type.

What it is not: a transport, or how one is chosen for a URL (``runner.open_source``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from migrate.batch import Taken


class Source(Protocol):
    kind: str
    queues: list[str]

    def recover(self, n: int) -> list[Taken]: ...
    def take(self, n: int) -> list[Taken]: ...
    def acknowledge(self, items: list[Taken]) -> None: ...
    def remaining(self) -> int | None: ...
    def idle(self, timeout: float) -> None: ...
    def peek(self) -> Iterator[Taken]: ...
    def close(self) -> None: ...

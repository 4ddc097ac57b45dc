"""``--autoscale MAX,MIN``: grow the pool while jobs wait, shrink it back once it idles.

Why it exists: Celery's autoscaler sizes the pool between a minimum and a maximum by the work the
worker holds. Here the work held is the in-flight table: attempts claimed (running, or leased
and waiting for a free slot), hung bodies left out. Each pass (every ``interval_s``) the pool
grows at once to ``min(held, MAX)`` when it holds more than it has slots; it shrinks to
``max(held, MIN)`` only once it has held fewer jobs than slots for ``keepalive_s`` (Celery's
``AUTOSCALE_KEEPALIVE``, 30 s), so a burst does not make it flap. Resizing goes through the
worker (``Worker.resize``, seen through ``steering.Steerable``), which sizes either pool
(threads or processes) and the claims.
``update(max, min)`` is the remote-control ``autoscale`` command: new bounds, applied at once.

What it is not: the pool (``children.py``, ``body_threads.py``) or the claim loop; it only asks
the worker for a size.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ujobs_bridge._internal.jobs import validation
from ujobs_bridge._internal.service import Service
from ujobs_bridge._internal.worker.config import MAX_CONCURRENCY
from ujobs_bridge.errors import ConfigError

if TYPE_CHECKING:
    from ujobs_bridge._internal.worker.steering import Steerable

log = logging.getLogger("ujobs.worker")

INTERVAL_S = 1.0


class Autoscaler(Service):
    """Sizes ``worker``'s pool between ``min`` and ``max`` (thread ``ujobs-autoscale``)."""

    def __init__(
        self,
        worker: Steerable,
        most: int,
        least: int,
        *,
        keepalive_s: float,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("autoscale", interval_s=interval_s, wait_first=True)
        self.worker = worker
        self.max, self.min = most, least
        self.keepalive_s = keepalive_s
        self.clock = clock
        self._busy_at = clock()  # the last pass that held as many jobs as slots
        self._mutex = threading.Lock()

    @property
    def qty(self) -> int:
        """Jobs the worker holds, hung bodies left out (they hold a slot, not work; one whose
        thread was abandoned holds neither, and ``in_flight`` leaves it out already)."""
        holding = [h for h in self.worker.hung() if not h.abandoned]
        return max(0, self.worker.in_flight() - len(holding))

    def info(self) -> dict[str, int]:
        """The range, the pool's size now and the jobs it holds (the ``stats`` command's
        ``autoscale``)."""
        return {
            "max": self.max,
            "min": self.min,
            "size": self.worker.config.concurrency,
            "held": self.qty,
        }

    def tick(self) -> int:
        """One pass; returns the change in pool size (0: none)."""
        with self._mutex:
            procs, qty, now = self.worker.config.concurrency, self.qty, self.clock()
            if qty >= procs:
                self._busy_at = now
            want = min(max(qty, self.min), self.max)
            if want > procs:
                log.info("ujobs.worker.autoscale: scaling up %d (to %d)", want - procs, want)
            elif want < procs and now - self._busy_at > self.keepalive_s:
                log.info("ujobs.worker.autoscale: scaling down %d (to %d)", procs - want, want)
            else:
                return 0
            self._resize(want)
            return want - procs

    def update(self, most: object = None, least: object = None) -> tuple[int, int]:
        """New bounds (either may be ``None``: kept); the pool is brought inside them now."""
        with self._mutex:
            new_max = self.max if most is None else _bound("max", most)
            new_min = self.min if least is None else _bound("min", least)
            if new_min > new_max:
                raise ConfigError(
                    f"autoscale min {new_min} is above max {new_max}", hint="give max >= min"
                )
            self.max, self.min = new_max, new_min
            procs = self.worker.config.concurrency
            if procs > new_max or procs < new_min:
                self._resize(min(max(procs, new_min), new_max))
            return new_max, new_min

    def _resize(self, size: int) -> None:
        reason = self.worker.resize(size, bounds=(self.max, self.min))
        if reason:
            log.warning("ujobs.worker.autoscale: %s", reason)


def _bound(what: str, value: object) -> int:
    number = int(value) if isinstance(value, str) and value.strip().isdigit() else value
    return validation.positive_int(f"autoscale {what}", number, maximum=MAX_CONCURRENCY)

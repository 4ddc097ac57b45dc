"""The thread pool job bodies run on: N threads pulling claimed jobs from one C-level queue.

Why it exists: ``concurrent.futures.ThreadPoolExecutor`` builds a Future, a work item and a
condition per call, which is a measurable share of a no-op job's cost at thousands of jobs per
second. The worker needs less: hand a job to a free thread, and know whether a job has started
(a job that has not started can be handed back untouched by the shutdown or a cancel).

A thread never dies of what ``run`` raises: the runner reports its own attempt's failure
(``ThreadRuntime``), and anything that still escapes is logged and the thread takes the next
item, so the pool always has its ``size`` threads.

What it is not: a general executor. Bodies report their outcome through the callback.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("ujobs.worker")


class BodyThreads(Generic[T]):
    def __init__(self, size: int, run: Callable[[T], None], *, name: str = "ujobs-body") -> None:
        self._queue: queue.SimpleQueue[T | None] = queue.SimpleQueue()
        self._run = run
        self._name = name
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def grow(self, n: int) -> None:
        """Start ``n`` more threads."""
        for _ in range(n):
            thread = threading.Thread(
                target=self._loop, name=f"{self._name}-{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def shrink(self, n: int) -> None:
        """Let ``n`` threads exit once they are free (a running body finishes first)."""
        for _ in range(min(n, len(self._threads) - 1)):
            self._threads.pop()
            self._queue.put(None)

    def submit(self, item: T) -> None:
        self._queue.put(item)

    def shutdown(self) -> None:
        """Ask every thread to exit once its current body returns; does not wait for bodies."""
        for _ in self._threads:
            self._queue.put(None)

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._run(item)
            except BaseException:  # the thread must outlive it: the next item still runs
                with contextlib.suppress(Exception):
                    log.exception("ujobs.worker.body_thread_error: the body thread serves on")

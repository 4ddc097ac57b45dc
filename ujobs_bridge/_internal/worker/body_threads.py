"""The thread pool job bodies run on: N threads pulling claimed jobs from one C-level queue.

Why it exists: ``concurrent.futures.ThreadPoolExecutor`` builds a Future, a work item and a
condition per call, which is a measurable share of a no-op job's cost at thousands of jobs per
second. The worker needs less: hand a job to a free thread, and know whether a job has started
(a job that has not started can be handed back untouched by the shutdown or a cancel).

A thread never dies of what ``run`` raises: the runner reports its own attempt's failure
(``ThreadRuntime``), and anything that still escapes is logged and the thread takes the next
item, so the pool always has its ``size`` threads. A thread whose body hangs (past its timeout,
deaf to its signal: a Python thread cannot be stopped from outside) can be *abandoned*
(``abandon``): a new thread takes its place in the pool at once, and the abandoned one ends as
soon as its body returns, without taking another item; at most ``cap`` of them run at once
(``abandoned``: how many do).

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
        self._lock = threading.Lock()
        self._started = 0  # threads started so far (their names' numbers)
        self._running: dict[threading.Thread, T] = {}  # the item each busy thread runs
        self._abandoned: set[threading.Thread] = set()  # still running a hung body
        self._threads: list[threading.Thread] = []  # the pool: its threads not abandoned
        self.grow(size)

    def grow(self, n: int) -> None:
        """Start ``n`` more threads."""
        with self._lock:
            started = [self._new_thread() for _ in range(n)]
        for thread in started:
            thread.start()

    def _new_thread(self) -> threading.Thread:
        thread = threading.Thread(
            target=self._loop, name=f"{self._name}-{self._started}", daemon=True
        )
        self._started += 1
        self._threads.append(thread)
        return thread

    def shrink(self, n: int) -> None:
        """Let ``n`` threads exit once they are free (a running body finishes first)."""
        with self._lock:
            count = min(n, len(self._threads) - 1)
            for _ in range(count):
                self._threads.pop()
        for _ in range(count):
            self._queue.put(None)

    def submit(self, item: T) -> None:
        self._queue.put(item)

    def abandon(self, item: T, cap: int) -> bool | None:
        """Give the slot of the thread running ``item`` (a hung body) to a new thread; the old
        one ends when its body returns. False if ``cap`` abandoned threads still run (nothing
        done); None if no thread runs ``item`` any more."""
        with self._lock:
            thread = next((t for t, i in self._running.items() if i is item), None)
            if thread is None or thread in self._abandoned:
                return None
            if len(self._abandoned) >= cap:
                return False
            self._abandoned.add(thread)
            if thread in self._threads:
                self._threads.remove(thread)
            replacement = self._new_thread()
        replacement.start()
        return True

    @property
    def abandoned(self) -> int:
        """Abandoned threads whose body still runs."""
        with self._lock:
            return len(self._abandoned)

    def shutdown(self) -> None:
        """Ask every thread to exit once its current body returns; does not wait for bodies."""
        with self._lock:
            count = len(self._threads)
        for _ in range(count):
            self._queue.put(None)

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            item = self._queue.get()
            if item is None:
                return
            with self._lock:
                self._running[me] = item
            try:
                self._run(item)
            except BaseException:  # the thread must outlive it: the next item still runs
                with contextlib.suppress(Exception):
                    log.exception("ujobs.worker.body_thread_error: the body thread serves on")
            finally:
                with self._lock:
                    del self._running[me]
                    abandoned = me in self._abandoned
                    self._abandoned.discard(me)
            del item  # what it holds goes now, not when the next item comes
            if abandoned:
                return  # its slot went to a new thread

"""The soak's producers: one thread per workload, each sending at its rate, and the ledger of
what was acknowledged.

Why it exists: "lost" means acknowledged and then never done, so the soak must know exactly
which sends returned. Each producer sends at a steady rate (after an outage it does not burst
to catch up), keeps every acknowledged send in the ledger (its job id or task id and its plan),
and counts the sends that raised, by exception class and by whether the database was in a
fault window then (a send that raises while the server is down is expected; one that raises
when it is up is worth a look). A send that raised is not retried and not counted as enqueued:
it may or may not have committed, and the verdict never counts it as lost.

Plans are drawn from a generator seeded per workload and item, so a seed replays the same
mix (``mix``): ``plain`` fails 0 (most), 1 or 2 times then succeeds, or is poison (dead on
purpose); ``steps`` fails after step 0, 1 or 2 on its first attempt, or never (-1); ``celery``
and ``migrated`` retry 0-2 times through ``self.retry``, or are poison; one item in
``mix.SPECIAL_EVERY`` is the workload's next special kind (an oversize result, a hung body...).
One ``.delay()`` in ten is also waited on with ``AsyncResult.get()`` on a separate thread.
``burst`` sends at once, to a given queue, items that succeed the first time: the fault
injector fills one worker with them before ``sigkill-full``.

What it is not: a load generator. Rates are low; the point is overlap with faults.
"""

from __future__ import annotations

import queue
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import mix

GET_EVERY = 10
GET_TIMEOUT_S = 120.0
Send = Callable[[str, int, int, str | None], str]  # key, plan, work_ms, queue (None: its own)


@dataclass(frozen=True)
class Sent:
    workload: str
    ref: str  # x_jobs id (plain, steps) or Celery task id (celery, migrated)
    plan: int  # fail count / fail_after step; -1 poison (plain, celery, migrated) or none (steps)
    t: float


@dataclass
class Ledger:
    sent: list[Sent] = field(default_factory=list)
    errors: list[tuple[str, float, str]] = field(default_factory=list)  # workload, t, class
    gets: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, sent: Sent) -> None:
        with self._lock:
            self.sent.append(sent)

    def error(self, workload: str, exc: BaseException) -> None:
        with self._lock:
            self.errors.append((workload, time.time(), type(exc).__name__))

    def got(self, outcome: str) -> None:
        with self._lock:
            self.gets[outcome] += 1


fail_plan = mix.fail_plan
step_plan = mix.step_plan


class Producer:
    def __init__(
        self,
        workload: str,
        rate: float,
        seed: int,
        send: Send,
        plan: Callable[[random.Random], int],
        ledger: Ledger,
        work_ms: tuple[int, int],
    ) -> None:
        self.workload = workload
        self.rate = rate
        self.seed = seed
        self.send = send
        self.plan = plan
        self.ledger = ledger
        self.work_ms = work_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"soak-{workload}", daemon=True)
        self._bursts = 0
        self._burst_lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)

    def draw(self, i: int) -> tuple[int, int, str]:
        """Item ``i``'s plan, work and key (a pure function of the seed)."""
        rng = random.Random(f"{self.seed}:{self.workload}:{i}")
        drawn = self.plan(rng)
        special = mix.special(self.workload, i)
        work_ms = rng.randint(*self.work_ms)
        key = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        return (drawn if special is None else special), work_ms, key

    def _one(self, key: str, plan: int, work_ms: int, queue: str | None) -> bool:
        try:
            ref = self.send(key, plan, work_ms, queue)
        except Exception as exc:
            self.ledger.error(self.workload, exc)
            return False
        self.ledger.add(Sent(self.workload, ref, plan, time.time()))
        return True

    def burst(self, n: int, queue: str, work_ms: tuple[int, int]) -> int:
        """Send ``n`` items that succeed at once, to ``queue``, now; how many were sent."""
        with self._burst_lock:
            first = self._bursts
            self._bursts += n
        sent = 0
        for i in range(first, first + n):
            rng = random.Random(f"{self.seed}:{self.workload}:burst:{i}")
            key = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            sent += self._one(key, 0, rng.randint(*work_ms), queue)
        return sent

    def _run(self) -> None:
        i = 0
        due = time.monotonic()
        while not self._stop.is_set():
            plan, work_ms, key = self.draw(i)
            self._one(key, plan, work_ms, None)
            i += 1
            due += 1.0 / self.rate
            now = time.monotonic()
            if due < now - 5.0:
                due = now  # after an outage: no burst to catch up
            self._stop.wait(max(0.0, due - now))


class Getter:
    """Waits on one ``AsyncResult`` in ``GET_EVERY`` with ``.get()``: counts how each ended."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.results: queue.Queue[Any] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-get", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def offer(self, i: int, result: Any) -> None:
        if i % GET_EVERY == 0:
            self.results.put(result)

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout)
        left = self.results.qsize()
        if left:
            self.ledger.gets["not waited (soak ended)"] += left

    def _run(self) -> None:
        while True:
            try:
                result = self.results.get(timeout=0.5)
            except queue.Empty:
                if self._stop.is_set():
                    return
                continue
            try:
                result.get(timeout=GET_TIMEOUT_S, propagate=False)
            except Exception as exc:
                self.ledger.got(f"raised {type(exc).__name__}")
            else:
                self.ledger.got(result.state)

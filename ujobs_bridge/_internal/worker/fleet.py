"""How often a worker runs a chore done for the whole fleet: spread over the fleet's size.

Why it exists: some of a worker's periodic statements work for every worker, not for itself: the
rescue sweep (expired leases, expired jobs, unregistered names; ``claims.py``) and the reap of
expired nodes (``presence.py``). Every worker runs them, so that any one survivor is enough; but
N workers each running them every interval do the same work N times, and in a large fleet the
sweep, which reads every lease the fleet holds, becomes one of its busiest statements (bench cell
``scale`` counts the sweeps). So a worker in a fleet of N waits about N intervals (capped at ``SPREAD_MAX``,
jittered by ±50 % so the fleet's runs do not line up) between its own runs: the fleet as a whole
runs a chore about once per interval whatever its size. A lone worker keeps the exact interval,
and runs its first sweep at once, as before; in a fleet the first run falls at a random point of
one gap, so a fleet started together does not sweep together.

It damps no herd of woken workers, since there is none: an insert wakes one waiting worker per
job, on that worker's own channel (migration 0025), so an idle fleet claims once per job whatever
its size.

What it is not: a leader election (no worker is special; whoever survives still sweeps), nor
where the fleet's size comes from (``presence.py`` counts the live nodes at each beat).
"""

from __future__ import annotations

import random
from collections.abc import Callable

SPREAD_MAX = 64  # a worker's own gap is at most this many intervals: the count may lag a shrink


def spread(fleet: int) -> int:
    """The number of intervals a worker's own gap spans: the fleet's size, within 1..SPREAD_MAX."""
    return min(max(fleet, 1), SPREAD_MAX)


class Chore:
    """When a worker next runs one fleet-wide chore every ``interval_s``: judged at each check
    against the fleet's size then, so a fleet that shrinks (its count drops as nodes expire)
    shortens the wait at once; the jitter is drawn anew after each run."""

    def __init__(self, interval_s: float, rand: Callable[[], float] = random.random) -> None:
        self.interval_s = interval_s
        self._rand = rand
        self._jitter = rand()
        self._last: float | None = None  # monotonic of the last run; None: never ran

    def gap(self, fleet: int) -> float:
        """Seconds between this worker's runs: ``interval_s`` alone, else about ``fleet`` of
        them (half to one and a half times that)."""
        k = spread(fleet)
        return self.interval_s if k == 1 else self.interval_s * k * (0.5 + self._jitter)

    def due(self, now: float, fleet: int) -> bool:
        """Whether to run it at ``now`` (monotonic). The first check of a lone worker is due; in
        a fleet, the first run falls at a random point of one gap from the first check."""
        if self._last is None:
            behind = 1.0 if spread(fleet) == 1 else self._rand()
            self._last = now - self.gap(fleet) * behind
        return now - self._last >= self.gap(fleet)

    def ran(self, now: float) -> None:
        self._last = now
        self._jitter = self._rand()

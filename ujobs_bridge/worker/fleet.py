"""How often a worker runs a chore done for the whole fleet: spread over the fleet's size.

Why it exists: some of a worker's periodic statements work for every worker, not for itself: the
rescue sweep (expired leases, expired jobs, unregistered names; ``claims.py``) and the reap of
expired nodes (``presence.py``). Every worker runs them, so that any one survivor is enough; but
N workers each running them every interval do the same work N times. At 32 processes the sweep,
which reads every lease the fleet holds, was the second busiest statement on the server (bench
cell ``scale``). So a worker in a fleet of N waits about N intervals (capped at ``SPREAD_MAX``,
jittered by ±50 % so the fleet's runs do not line up) between its own runs: the fleet as a whole
runs a chore about once per interval whatever its size. A lone worker keeps the exact interval,
and runs its first sweep at once, as before; in a fleet the first run falls at a random point of
one gap, so a fleet started together does not sweep together.

What it is not: a leader election (no worker is special; whoever survives still sweeps), nor
where the fleet's size comes from (``presence.py`` counts the live nodes at each beat).
"""

from __future__ import annotations

import random
from collections.abc import Callable

SPREAD_MAX = 12  # a worker's own gap is at most this many intervals: the count may lag a shrink


def spread(fleet: int) -> int:
    """The number of intervals a worker's own gap spans: the fleet's size, within 1..SPREAD_MAX."""
    return min(max(fleet, 1), SPREAD_MAX)


def chore_gap(interval_s: float, fleet: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds until this worker's next run: ``interval_s`` alone, else about ``fleet`` of them."""
    k = spread(fleet)
    if k == 1:
        return interval_s
    return interval_s * k * (0.5 + rand())


def first_delay(interval_s: float, fleet: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds until this worker's first run: at once alone, else a random point of one gap."""
    k = spread(fleet)
    if k == 1:
        return 0.0
    return interval_s * k * rand()

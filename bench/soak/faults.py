"""The fault injector: carries out the seeded plan against the fleet and the soak's own Postgres.

Why it exists: the faults must land while everything else runs, at planned times, and what
each one did must be known afterwards (when it began, whom it hit, which jobs that worker
held, how long the server was away) so the verdict can say which re-executions it explains
and how long the system took to recover from it. One fault at a time, on one thread:

- ``sigkill``: SIGKILL a worker's main process (the fleet restarts it);
- ``sigkill-full``: first fill the worker: send to its own queue twice as many quick jobs as it
  may hold (its node row's ``prefetch_count``: every slot and every prefetched place) and a few
  more (``FULL_EXTRA``), wait until it holds that many (at most ``FULL_WAIT_S``; a send refused,
  as right after a restart, is sent again; a read of what it holds that fails is not taken for
  "nothing"), then freeze it at a moment when every body it started has written its first
  line (``_freeze_when_witnessed``) and SIGKILL it. The jobs it had prefetched never started:
  none may be charged an attempt;
- ``sigstop``: SIGSTOP a worker's process group for ``hold_s``, then SIGCONT;
- ``terminate``: ``pg_terminate_backend`` on a seeded share of the database's client sessions;
- ``restart-fast`` / ``restart-immediate``: ``pg_ctl stop -m fast|immediate``, ``hold_s`` of
  downtime, ``pg_ctl start`` (after ``immediate`` the server runs crash recovery);
- ``restart-long``: ``-m immediate`` with more downtime than the lease: a lease must not run
  out while the database is down, so no finished result may be thrown away.

Before a worker fault the injector reads which jobs the worker holds (``running``,
``claimed_by`` its worker id): their first settle after the fault is its recovery time.

What it is not: the judge. It records; ``verdict`` decides.
"""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from ujobs_bridge.testing import PrivateCluster

from . import marks
from .fleet import Fleet, Slot
from .plan import Fault
from .settings import private_queue

CONNECT_TIMEOUT_S = 5
START_TRIES = 3
FULL_WAIT_S = 25.0  # sigkill-full: how long the worker may take to fill up (a loaded machine)
UP_WAIT_S = 15.0  # sigkill-full: how long a worker being restarted may take to register
WITNESS_WAIT_S = 10.0  # sigkill-full: how long to look for a moment every start is witnessed
WITNESS_POLL_S = 0.05
# How often sigkill-full reads what its worker holds (on one kept connection): a worker is full
# only from a claim until its next body ends or a quick job of its other queues does.
HELD_POLL_S = 0.02
# sigkill-full sends twice what the worker may hold, and this many more: a worker claims again
# only once half its places are free, so a burst that trickles in while it claims (each send
# commits on its own) can leave it holding between half and all of them, and only the jobs still
# waiting then fill it up.
FULL_EXTRA = 2


@dataclass
class Event:
    """A fault as it was carried out."""

    fault: Fault
    t: float = 0.0  # epoch: the fault began
    target: str = ""
    pid: int | None = None
    held: list[str] | None = None  # job ids the worker held just before (None: unknown)
    away_s: float | None = None  # restarts: stop to accepting again; sigstop: stopped for
    terminated: int = 0
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Injector:
    def __init__(
        self,
        plan: list[Fault],
        fleet: Fleet,
        workers: list[Slot],
        cluster: PrivateCluster,
        dsn: str,
        seed: int,
        burst: Callable[[Slot, int], int] | None = None,
        marks_dir: Path | None = None,
    ) -> None:
        """``burst(slot, n)`` sends ``n`` quick jobs to the queue only ``slot`` consumes and says
        how many were sent (``sigkill-full``)."""
        self.plan = plan
        self.fleet = fleet
        self.workers = workers
        self.cluster = cluster
        self.dsn = dsn
        self.burst = burst
        self.marks_dir = marks_dir or Path(".")
        self.rng = random.Random(seed * 7919 + 1)
        self.events: list[Event] = []
        self._stop = threading.Event()
        self._watch: psycopg.Connection[Any] | None = None  # what a worker holds is read on it
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def start(self, t0_monotonic: float) -> None:
        self._t0 = t0_monotonic
        self._thread = threading.Thread(target=self._run, name="soak-faults", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """No more faults; a stopped worker is resumed and a stopped server started."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=300)
        if self._watch is not None:
            self._watch.close()
        if not self.cluster.running:
            self._start_server()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        for fault in self.plan:
            if self._stop.wait(max(0.0, self._t0 + fault.at_s - time.monotonic())):
                return
            event = Event(fault)
            self.events.append(event)
            try:
                getattr(self, "_" + fault.kind.replace("-", "_"))(event)
            except Exception as exc:
                event.error = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()

    def _sigkill(self, event: Event) -> None:
        slot = self.workers[event.fault.target]
        event.target = slot.name
        event.held = self._held(slot)
        event.t = time.time()
        event.pid = self.fleet.kill(slot)

    def _sigkill_full(self, event: Event) -> None:
        slot = self.workers[event.fault.target]
        event.target = slot.name
        node = self._node(slot)
        if node is None:
            raise RuntimeError(f"{slot.name} was not up and registered in {UP_WAIT_S:g}s")
        pid, capacity, concurrency = node
        assert self.burst is not None, "sigkill-full needs a burst sender"
        event.extra["capacity"] = capacity
        event.extra["began_at_s"] = round(time.monotonic() - self._t0, 2)  # into the run
        wanted = 2 * capacity + FULL_EXTRA
        sent = self.burst(slot, wanted)
        deadline = time.monotonic() + FULL_WAIT_S
        unread = 0  # reads of what it holds that failed (not taken for "nothing")
        held = self._held(slot)
        most = len(held or [])
        # Not cut short by the end of the run (``stop`` waits for the fault in hand): this
        # fault comes last in some plans, and on a loaded machine the restarts before it can
        # push it to the end of the run, where a kill made at once would find nothing held.
        while (held is None or len(held) < capacity) and time.monotonic() < deadline:
            if sent < wanted:  # a send refused (the database just back from a restart): again
                sent += self.burst(slot, wanted - sent)
            time.sleep(HELD_POLL_S)
            held = self._held(slot)
            unread += held is None
            most = max(most, len(held or []))
        held = held or []
        witnessed = self._freeze_when_witnessed(slot, pid, capacity) if held else None
        if witnessed is not None:
            held = self._held(slot) or held  # as the freeze keeps it
        event.held = held
        event.extra["witnessed"] = witnessed
        event.extra["sent"] = sent
        event.extra["waited_s"] = round(FULL_WAIT_S - (deadline - time.monotonic()), 2)
        event.extra["full"] = len(held) >= capacity
        event.extra["prefetched"] = max(0, len(held) - concurrency)
        if not event.extra["full"]:  # why not: what its queue still had, what could not be read
            event.extra["waiting_in_its_queue"] = self._waiting(private_queue(slot.name))
            event.extra["unread"] = unread
            event.extra["most_held"] = most  # the most it held at once while it filled
            event.extra["its_own_count"] = self._own_count(slot, pid)  # its table, last beat
        event.t = time.time()
        event.pid = self.fleet.kill(slot)
        self.fleet.resume(pid)  # its pool children, frozen with it, see their parent gone
        if event.pid != pid:
            event.error = f"{slot.name} was restarted while it filled up (pid {pid} -> {event.pid})"

    def _freeze_when_witnessed(self, slot: Slot, pid: int, capacity: int) -> bool:
        """Freeze the full worker (SIGSTOP of its group) at a moment when every body it started
        (its lease rows' recorded starts) has written its ``start`` record; True once frozen so,
        False if no such moment came in ``WITNESS_WAIT_S`` (then it is frozen all the same).

        A recorded start comes a little before the body's first line writes its record: the
        worker records a start as it hands the job over (a Celery task's first delivery: just
        before Celery's tracer calls its function; a redelivery: before Celery's prologue, its
        request, signals and tracer). A kill in between charges an attempt the records cannot
        show started, so the verdict could not judge it; a kill made while frozen at a
        witnessed moment lets it judge every charge."""
        deadline = time.monotonic() + WITNESS_WAIT_S
        while True:
            self.fleet.pause(slot)
            started = self._started(slot, pid)
            held = self._held(slot) or []
            seen = {
                r["job"]
                for r in marks.read(self.marks_dir)
                if r.get("k") == "start" and pid in (r.get("pid"), r.get("ppid"))
            }
            if started is not None and started <= seen and len(held) >= capacity:
                return True
            if time.monotonic() > deadline:
                return False
            self.fleet.resume(pid)
            time.sleep(WITNESS_POLL_S)

    def _sigstop(self, event: Event) -> None:
        slot = self.workers[event.fault.target]
        event.target = slot.name
        event.held = self._held(slot)
        event.t = time.time()
        pid = self.fleet.pause(slot)
        event.pid = pid
        if pid is None:
            return
        try:
            self._stop.wait(event.fault.hold_s)
        finally:
            self.fleet.resume(pid)
            event.away_s = time.time() - event.t

    def _terminate(self, event: Event) -> None:
        event.target = "postgres"
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            rows = conn.execute(
                "select pid from pg_stat_activity where datname = current_database()"
                " and pid <> pg_backend_pid() and backend_type = 'client backend' order by pid"
            ).fetchall()
            pids = [int(r[0]) for r in rows]
            chosen = self.rng.sample(pids, max(1, round(len(pids) * event.fault.share)))
            event.t = time.time()
            done = conn.execute(
                "select count(*) filter (where pg_terminate_backend(p))"
                " from unnest(%s::int[]) as p",
                (chosen,),
            ).fetchone()
        event.terminated = int(done[0]) if done else 0
        event.extra["sessions"] = len(pids)

    def _restart_fast(self, event: Event) -> None:
        self._restart(event, "fast")

    def _restart_immediate(self, event: Event) -> None:
        self._restart(event, "immediate")

    def _restart_long(self, event: Event) -> None:
        self._restart(event, "immediate")

    def _restart(self, event: Event, mode: str) -> None:
        event.target = "postgres"
        event.t = time.time()
        self.cluster.stop(mode)
        time.sleep(event.fault.hold_s)
        self._start_server()
        event.away_s = time.time() - event.t

    # ------------------------------------------------------------------ helpers

    def _start_server(self) -> None:
        for attempt in range(START_TRIES):
            try:
                self.cluster.start()
                return
            except Exception:
                if attempt == START_TRIES - 1:
                    raise
                time.sleep(1.0)

    def _node(self, slot: Slot) -> tuple[int, int, int] | None:
        """The worker's pid, how many jobs it may hold (its node row's ``prefetch_count``) and
        its concurrency, once it is up and registered (None after ``UP_WAIT_S``)."""
        deadline = time.monotonic() + UP_WAIT_S
        while time.monotonic() < deadline:
            pid = slot.pid
            if pid is not None:
                try:
                    with psycopg.connect(
                        self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                    ) as conn:
                        row = conn.execute(
                            "select (info ->> 'prefetch_count')::int, concurrency"
                            " from x_worker_nodes where worker_id = %s and expires_at > now()",
                            (f"{slot.node}:{pid}",),
                        ).fetchone()
                except psycopg.Error:
                    row = None
                if row is not None and row[0] is not None:
                    return pid, int(row[0]), int(row[1])
            time.sleep(0.2)
        return None

    def _own_count(self, slot: Slot, pid: int) -> int | None:
        """How many attempts the worker itself says it holds (its node row, written at each
        beat): more than its rows say would be entries it never let go of."""
        try:
            with psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            ) as conn:
                row = conn.execute(
                    "select (info ->> 'active')::int from x_worker_nodes where worker_id = %s",
                    (f"{slot.node}:{pid}",),
                ).fetchone()
        except psycopg.Error:
            return None
        return int(row[0]) if row and row[0] is not None else None

    def _waiting(self, queue: str) -> int | None:
        """Rows of ``queue`` ready to be claimed (None: not read)."""
        try:
            with psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            ) as conn:
                row = conn.execute(
                    "select count(*) from x_jobs where queue = %s and state = 'ready'", (queue,)
                ).fetchone()
        except psycopg.Error:
            return None
        return int(row[0]) if row else None

    def _started(self, slot: Slot, pid: int) -> set[str] | None:
        """Job ids the worker holds whose lease row records that their body started."""
        try:
            with psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            ) as conn:
                rows = conn.execute(
                    "select l.job_id from x_job_leases as l join x_jobs as j on j.id = l.job_id"
                    " and j.lease_token = l.token where j.state = 'running' and l.worker = %s"
                    " and l.started_at is not null",
                    (f"{slot.node}:{pid}",),
                ).fetchall()
        except psycopg.Error:
            return None
        return {str(r[0]) for r in rows}

    def _held(self, slot: Slot) -> list[str] | None:
        pid = slot.pid
        if pid is None:
            return None
        for _ in range(2):  # the kept connection may have died in a restart: once more
            conn = self._watch
            try:
                if conn is None or conn.closed:
                    conn = self._watch = psycopg.connect(
                        self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                    )
                rows = conn.execute(
                    "select id from x_jobs where state = 'running' and claimed_by = %s",
                    (f"{slot.node}:{pid}",),
                ).fetchall()
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                continue
            return [str(r[0]) for r in rows]
        return None

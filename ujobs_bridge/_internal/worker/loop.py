"""The worker: claim batches, run bodies, write outcomes in batches, and never lose a job.

Why it exists: this is where the durability promises are kept. One statement claims up to N ready
rows (``FOR UPDATE SKIP LOCKED``), counting the attempt and setting a lease (token + expiry on the
database clock); the attempt is charged only if its body starts: every start is recorded on the
lease (``start_marks.py``), and the rescue of a dead worker's jobs hands back uncounted those it
never started. Bodies run on a runtime (``runtimes.py``: body threads, an event loop for
``async def`` jobs, or a process pool), each through the one attempt core (``attempt.py``).
Outcomes are written back in batches by one statement that carries each attempt's token, so a
write from an attempt that lost its lease changes nothing. Leases are renewed by the heartbeat
(``heartbeat.py``); expired leases of dead workers are rescued from the job rows by a
periodic sweep any worker runs; LISTEN/NOTIFY wakes an idle worker (``listener.py``), polling is
the floor (and the only wake-up behind PgBouncer without a ``listen_dsn``).

Its connections (the budget: docs/how-to/pgbouncer.md): ONE working connection shared by the claim
loop, the heartbeat and the presence, ONE for LISTEN, a step-write pool that opens on the
first ``step.run`` and gives idle connections back, and the heartbeat's spare, open only while a
long outcome write holds the working connection (``heartbeat.py``).

``Worker`` composes its collaborators: the in-flight table (``inflight.py``, the only place an
attempt is settled), the runtimes, the stopper (``stopping.py``: cancels, lost leases, timeouts,
the shutdown's hand-back), the heartbeat, the listener and the node's presence
(``presence.py``: the node row and the remote-control mailbox, on the heartbeat's connection).

Lifecycle: ``start()`` / ``stop()`` (idempotent; ``started`` / ``stopped`` events; stop waits for
in-flight work up to the shutdown timeout, then hands back what is left with its attempt
uncounted), ``reload()`` (run another registry and queues from the next claim on) and ``tick()``
for tests. No zombie: a loop (claim, heartbeat, listener) restarts after an error; one that dies
(an error no loop survives, or the claim loop failing ``claim_loop.CLAIM_ERROR_STREAK`` times
in a row on something other than the database) makes the worker fail: it hands back everything
it holds uncounted (``UJ_WORKER_FAILED``), stops, and sets ``failed``, on which ``ujobs-bridge
worker`` exits non-zero so a supervisor restarts it. No lost slot either: a body's thread, task or
keeper that meets an error of our own (or of an observer: tracing, logs, metrics) between the
claim and the settle fails that attempt (``UJ_WORKER_LOST``, retried per policy) and serves on
(``inflight.report_died``); a thread body hung past its timeout gives its slot to a new thread,
and past ``--max-hung-threads`` abandoned threads the worker fails as above (``stopping.py``).
``hung()`` lists bodies running past their timeout.

What it is not: the claim loop's pass (``claim_loop.py``), the decision table for one attempt
(``attempt.py``) or the CLI (``cli/worker.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ujobs_bridge._internal.clock import SYSTEM_CLOCK, Clock
from ujobs_bridge._internal.config.dsn import mask_dsn
from ujobs_bridge._internal.db import nodes, session
from ujobs_bridge._internal.db.connections import (
    Reconnecting,
    Role,
    detect_transaction_pooler,
    listen_dsn,
)
from ujobs_bridge._internal.jobs import context, validation
from ujobs_bridge._internal.worker.attempt import BodyResult, died_settlement, settle
from ujobs_bridge._internal.worker.autoscale import Autoscaler
from ujobs_bridge._internal.worker.claim_loop import ClaimLoop
from ujobs_bridge._internal.worker.claims import EXPIRE_ERROR, Claims
from ujobs_bridge._internal.worker.config import WorkerConfig
from ujobs_bridge._internal.worker.control import CommandSet, ControlState, Panel
from ujobs_bridge._internal.worker.heartbeat import Heartbeat
from ujobs_bridge._internal.worker.inflight import HungAttempt, InFlight, InFlightTable
from ujobs_bridge._internal.worker.listener import ExtraChannel, HandOffListening, Listener
from ujobs_bridge._internal.worker.outcome_batch import OutcomeBatch
from ujobs_bridge._internal.worker.outcome_writes import flush_all, write_batch
from ujobs_bridge._internal.worker.presence import Presence, default_node_name
from ujobs_bridge._internal.worker.runtimes import Runtimes, StepWrites
from ujobs_bridge._internal.worker.start_marks import StartMarks
from ujobs_bridge._internal.worker.steering import TaskSettings
from ujobs_bridge._internal.worker.stopping import Stopper
from ujobs_bridge.errors import ConfigError, ErrorCode
from ujobs_bridge.job import JobDefinition
from ujobs_bridge.records import ClaimedJob, JobState, Settlement

log = logging.getLogger("ujobs.worker")


class Worker:
    """Runs the jobs of ``registry`` from the database at ``dsn``. ``channels``: extra LISTEN
    channels for its listener (the ``-A`` loader's ``LoadedApp.channels()``). ``node_name``: its
    node (default ``ujobs@<host>``); ``control``: remote-control command sets added to the
    engine's commands (``LoadedApp.control_commands``), whose replies ``control_encode`` turns
    into JSON text."""

    def __init__(
        self,
        dsn: str,
        registry: Mapping[str, JobDefinition[Any, Any]],
        config: WorkerConfig | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        app_spec: str | None = None,
        worker_id: str | None = None,
        channels: Sequence[ExtraChannel] = (),
        node_name: str | None = None,
        control: Sequence[CommandSet] = (),
        control_encode: Callable[[Any], str] | None = None,
        listen: str | None = None,
    ) -> None:
        """``listen``: the DSN of the LISTEN connection (default ``connections.listen_dsn``:
        ``UJOBS_LISTEN_URL``, else ``dsn``; none behind PgBouncer: the worker polls)."""
        self.dsn = dsn
        self.registry = dict(registry)
        self.config = config or WorkerConfig()
        self.clock = clock
        self.app_spec = app_spec
        if not self.registry:
            raise ConfigError(
                "the worker has no jobs to run",
                hint="pass -A with a module that declares @job functions",
            )
        if self.config.pool == "processes" and app_spec is None:
            raise ConfigError(
                "--pool processes needs -A",
                hint="child processes import the jobs from the -A module",
            )
        self.queues = tuple(self.config.queues or sorted({d.queue for d in self.registry.values()}))
        self.names = tuple(sorted(self.registry))
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.wake_channel = session.wake_channel(uuid.uuid4().hex)  # its marks name it (0025)
        # Its hand-offs (0027): their channel, and the key its listen session holds meanwhile.
        self.hand_channel = session.hand_channel(self.wake_channel)
        self.hand_lock_key = secrets.randbelow(2**31)
        self.node = node_name or default_node_name()
        self.dsn_host = mask_dsn(dsn)
        self.task_settings: TaskSettings = {}  # set by remote control; sent to pool children
        self.processed: dict[str, int] = {}  # bodies finished per job name (the stats command)
        self.send_task_events = False  # the task_events command flips it
        self.task_events_hooks: list[Callable[[bool], None]] = []  # told when it flips
        self.remote_shutdown = threading.Event()  # a `shutdown` command arrived
        self.outcomes = OutcomeBatch(
            threshold=self.config.capacity // 2, interval_s=self.config.ack_interval_s
        )
        self.counts = self.outcomes.counts
        self.started = threading.Event()  # set once start() has launched the claim loop
        self.stopped = threading.Event()  # set once stop() has settled and released everything
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._hurry = threading.Event()
        self.failed = threading.Event()  # set once a loop died and the worker stopped for it
        self.failure: str | None = None
        self._lifecycle = threading.Lock()
        self._jobs = threading.Lock()  # registry, names, queues: swapped by reload() between claims
        self.table = InFlightTable(self.outcomes, self._wake)
        steps = StepWrites(
            dsn, Role(f"worker:{self.id}:steps"), clock=clock, max_size=self.config.concurrency + 1
        )
        self.marks = StartMarks(lambda leases: self.claims.start(leases), wake=self._wake.set)
        self.runtimes = Runtimes(
            pool=self.config.pool,
            size=self.config.concurrency,
            registry=self.registry,
            finished=self._finished,
            steps=steps,
            stopping=self._stopping,
            marks=self.marks,
            app_spec=app_spec,
            dsn=dsn,
            node=self.node,
            task_settings=self.task_settings,
            limits=(self.config.time_limit_s, self.config.soft_time_limit_s),
            max_tasks_per_child=self.config.max_tasks_per_child,
            max_memory_per_child_kib=self.config.max_memory_per_child_kib,
            max_result_bytes=self.config.max_result_bytes,
        )
        self.stopper = Stopper(
            self.table,
            self.runtimes,
            cap=lambda: self.config.hung_threads_cap,
            abandoned=lambda: self.runtimes.abandoned,
            on_overwhelmed=lambda reason: self._fail(f"its bodies hung past the cap: {reason}"),
        )
        self.claims = Claims(
            dsn,
            worker_id=self.id,
            queues=self.queues,
            names=self.names,
            config=self.config,
            clock=clock,
            counts=self.counts,
            fleet_size=lambda: self.presence.fleet,
            wake_channel=self.wake_channel,
            hand_offs=nodes.HandOffs(
                names=self.names,
                lease_s=self.config.lease_s,
                lock_key=self.hand_lock_key,
                channel=self.hand_channel,
            ),
            hand_offs_live=lambda: self.listener.hand_offs_live.is_set(),
        )
        self.heartbeat = Heartbeat(
            self.claims.shared,
            lease_s=self.config.lease_s,
            interval_s=self.config.heartbeat_interval_s,
            held=lambda: self.table.held_leases() + self.outcomes.leases(),
            on_lost=self.stopper.lease_lost,
            spare=Reconnecting(dsn, Role(f"worker:{self.id}:renew")),
            writing_large=self.outcomes.writing_large,
        )
        self.presence = Presence(
            self.claims.shared,
            worker_id=self.id,
            name=self.node,
            ttl_s=self.config.lease_s,
            beat_s=self.config.heartbeat_interval_s,
            describe=self._describe,
            panel=Panel(ControlState(self, self.node), control),
            clock=clock,
            **({"encode": control_encode} if control_encode else {}),
        )
        self.listener = Listener(
            listen_dsn(dsn, listen),
            queues=self.queues,
            on_ready=lambda: self.claim_loop.notified(),
            on_cancel=self.stopper.cancel_notified,
            role=Role(f"worker:{self.id}:listen"),
            channels=(*channels, self.presence.channel()),
            wake_channel=self.wake_channel,
            hand_off=HandOffListening(
                channel=self.hand_channel,
                lock_key=self.hand_lock_key,
                take=lambda claimed: self.claim_loop.hand_off(claimed),
                relisten=lambda: self.claim_loop.relisten(),
            ),
        )
        self.autoscaler: Autoscaler | None = None  # --autoscale MAX,MIN
        if self.config.autoscale is not None:
            most, least = self.config.autoscale
            self.autoscaler = Autoscaler(
                self, most, least, keepalive_s=self.config.autoscale_keepalive_s
            )
        self.claim_loop = ClaimLoop(
            claims=self.claims,
            table=self.table,
            outcomes=self.outcomes,
            stopper=self.stopper,
            autoscaler=self.autoscaler,
            take_due=self._take_due,
            dispatch=self._start,
            starts=self.marks,
            jobs_lock=self._jobs,
            wake=self._wake,
            worker_stopping=self._stopping,
            listening=self.listener.listening,
        )
        for loop in (self.claim_loop, self.heartbeat, self.listener, self.presence):
            loop.on_died = self._loop_died

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the heartbeat, the listener and the claim loop. Idempotent."""
        with self._lifecycle:
            if self.started.is_set() or self.stopped.is_set():
                return
            with self.claims.shared.using() as conn:  # a wrong DSN fails here, not in the loop
                detect_transaction_pooler(conn, self.dsn)  # before anything prepares or forks
                self.claims.connection()
            self.runtimes.open()
            context.set_node_name(self.node)
            self.heartbeat.start()
            self.presence.start()
            self.listener.start()
            self.claim_loop.start()
            if self.autoscaler is not None:
                self.autoscaler.start()
            self.started.set()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop claiming at once; wait for bodies up to the shutdown timeout; hand back the rest
        uncounted. Idempotent; safe on a worker that never started."""
        with self._lifecycle:
            if self.stopped.is_set():
                return
            self._shut_down(self.config.shutdown_timeout_s if timeout_s is None else timeout_s)
            self.started.clear()
            self.stopped.set()

    def _shut_down(self, limit: float) -> None:
        self.request_stop()
        self.presence.stop()  # the node leaves at once (status tools no longer list it)
        if self.autoscaler is not None:
            self.autoscaler.stop()  # the pool keeps its size while it drains
        self.claim_loop.stop()  # lets the pass in flight finish
        try:
            self.claim_loop.hand_back_unknown()  # hand-offs it never ran go back with the rest
        except Exception as exc:  # an outage: their leases expire and the sweep rescues them
            self.claims.reset()
            log.warning("ujobs.worker.db_error: %s", exc)
        deadline = time.monotonic() + limit
        code = ErrorCode.WORKER_FAILED if self.failure else ErrorCode.WORKER_DRAINING
        self.stopper.hand_back_unstarted(code)
        while time.monotonic() < deadline and not self._hurry.is_set():
            if not self.table.unsettled():
                break
            try:
                self._flush(force=True)
            except Exception as exc:  # an outage: the outcomes are kept for the last flush
                self.claims.reset()
                log.warning("ujobs.worker.db_error: %s", exc)
            self._wake.wait(0.05)
            self._wake.clear()
        self.stopper.hand_back_running(code)
        flush_all(  # through an outage, while the leases may still be valid
            lambda: self._flush(force=True),
            self.outcomes,
            reset=self.claims.reset,
            until=max(deadline, time.monotonic()) + self.config.lease_s,
            hurry=self._hurry,
        )
        self.heartbeat.stop()
        self.listener.stop()
        self.runtimes.shutdown()
        self.claims.close()

    def request_stop(self) -> None:
        """Signal-handler safe: stop claiming now; ``stop()`` does the waiting."""
        self._stopping.set()
        self.claim_loop.request_stop()
        self._wake.set()

    def _loop_died(self, loop: str, exc: BaseException) -> None:
        """A loop of this worker died: hand back what the worker holds and stop."""
        self._fail(f"the {loop} loop died: {exc!r}")

    def _fail(self, failure: str) -> None:
        """The worker cannot go on (a loop died, or bodies hung past the cap): hand back what it
        holds and stop (on a thread of its own: the caller's thread may be one that ``stop()``
        joins); ``failed`` is set once it has stopped."""
        if self.failure is not None or self.stopped.is_set():
            return
        self.failure = failure
        log.critical(
            "ujobs.worker.failed: %s; handing back %d job(s) uncounted and stopping (%s)",
            self.failure,
            len(self.table),
            ErrorCode.WORKER_FAILED.value,
        )
        self.request_stop()

        def stop() -> None:
            try:
                self.stop(timeout_s=0)
            finally:
                self.failed.set()

        threading.Thread(target=stop, name="ujobs-worker-failed", daemon=True).start()

    def hung(self) -> list[HungAttempt]:
        """Bodies running past their timeout (their attempt already failed), for the
        ``attempts`` command and metrics."""
        return self.stopper.hung()

    def hurry(self) -> None:
        """Cut a shutdown in progress short: hand back what still runs now."""
        self._hurry.set()
        self._wake.set()

    def reload(
        self,
        registry: Mapping[str, JobDefinition[Any, Any]],
        queues: Sequence[str] | None = None,
    ) -> None:
        """Run ``registry`` from the next claim on, consuming ``queues`` (default: the configured
        queues, else every queue a job of ``registry`` declares). Thread-safe; attempts in flight
        keep the definitions they were claimed with. A process pool cannot learn new job names
        (its children imported the -A module at start): adding one there is refused."""
        registry = dict(registry)
        if not registry:
            raise ConfigError("reload() was given no jobs", hint="pass the full registry to run")
        added = sorted(set(registry) - set(self.registry))
        if self.config.pool == "processes" and added:
            raise ConfigError(
                f"a process pool cannot add jobs while it runs ({', '.join(added)})",
                hint="restart the worker to run new jobs, or use --pool threads",
            )
        chosen = tuple(queues or self.config.queues or sorted({d.queue for d in registry.values()}))
        for name in chosen:
            validation.queue_name(name)
        with self._jobs:
            runtimes = self.runtimes
            first_async = any(d.is_async for d in registry.values()) and runtimes.loop is None
            if first_async and runtimes.threads is not None:  # opened without an event loop
                runtimes.loop = runtimes.event_loop()
            self.registry = runtimes.registry = registry
            self.queues, self.names = chosen, tuple(sorted(registry))
            self.claims.queues, self.claims.names = self.queues, self.names
            self.listener.queues = frozenset(chosen)
        self.claim_loop.names_changed()  # claim now, marked anew (names, queues) before it waits

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def in_flight(self) -> int:
        return len(self.table)

    def tick(self, *, timeout_s: float = 30.0) -> int:
        """One pass for tests: sweep, claim one batch, run it to the end, write the outcomes."""
        self.runtimes.open()
        self.claims.sweep(force=True)
        with self._jobs:
            claimed = self._start(self.claims.claim(self.config.capacity))
        deadline = time.monotonic() + timeout_s
        ids = {e.claimed.id for e in claimed}
        while time.monotonic() < deadline:
            self.stopper.check_deadlines()
            if not self.table.holds_any(ids):
                break
            self._wake.wait(0.01)
            self._wake.clear()
        self._flush(force=True)
        return len(claimed)

    # ------------------------------------------------------------------ steering (remote control)

    def request_remote_shutdown(self) -> None:
        """A ``shutdown`` command: stop claiming; whoever runs the worker stops it (the CLI
        drains as on SIGTERM)."""
        self.remote_shutdown.set()
        self.request_stop()

    def set_task_events(self, on: bool) -> bool:
        """Set ``send_task_events``; returns the previous value. Hooks hear every change."""
        previous, self.send_task_events = self.send_task_events, on
        if previous != on:
            for hook in list(self.task_events_hooks):
                hook(on)
        return previous

    def resize(self, concurrency: int, *, bounds: tuple[int, int] | None = None) -> str | None:
        """Run ``concurrency`` bodies at once from now on (body threads or pool children are
        added, or retire once free); ``bounds``: the autoscaler's (max, min), kept in the config.
        The reason when it cannot."""
        try:
            config = dataclasses.replace(
                self.config,
                concurrency=concurrency,
                autoscale=bounds if bounds is not None else self.config.autoscale,
            )
        except ConfigError as exc:
            return exc.render()
        self.runtimes.resize(concurrency)
        self.config = self.claims.config = config
        self.presence.refresh_soon()
        self.claim_loop.notified()  # new slots: claim for them now
        return None

    def _describe(self) -> nodes.NodeSpec:
        """What the node row says (``presence.py`` writes it at every beat)."""
        return nodes.NodeSpec(
            worker_id=self.id,
            name=self.node,
            hostname=self.node.partition("@")[2] or socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.config.concurrency,
            pool=self.config.pool,
            info={
                "sw_ident": "ujobs-bridge",
                "registered": list(self.names),
                "processed": dict(self.processed),
                "prefetch_count": self.config.capacity,
                "freq": self.config.heartbeat_interval_s,
                "active": len(self.table),
                "claims": self.counts.claims,  # claim passes that asked for work
                "empty_claims": self.counts.empty_claims,  # of those, the ones that found none
                "hand_offs": self.counts.hand_offs,  # jobs inserts claimed for it (0027)
            },
        )

    # ------------------------------------------------------------------ claim and dispatch

    def _start(self, rows: list[ClaimedJob]) -> list[InFlight]:
        """Take claimed rows in and give them to their runtime, in claim order; each body's
        start is recorded as it starts (``start_marks.py``), never by the claim, so a worker
        that dies before a body starts is not charged for it. Returns the attempts that run or
        wait."""
        entries = self.table.add([(claimed, self.registry[claimed.name]) for claimed in rows])
        self.counts.claimed += len(rows)
        kept: list[InFlight] = []
        for entry in entries:
            if entry.claimed.undecodable is not None:
                self.stopper.refuse_undecodable(entry)
                continue
            if entry.claimed.expired:
                self.stopper.abort(entry, ErrorCode.JOB_EXPIRED, "expired before it ran")
                expired = Settlement(
                    id=entry.claimed.id,
                    token=entry.claimed.lease_token,
                    state=JobState.CANCELLED,
                    error=EXPIRE_ERROR,
                )
                self.table.settle_once(entry, expired, release=True)
                continue
            entry.armed = entry.claimed.started
            self.runtimes.submit(entry)
            kept.append(entry)
        return kept

    def _finished(self, entry: InFlight, result: BodyResult) -> None:
        """A body returned (called on its runtime's thread): settle the attempt unless a
        timeout, a cancel or the shutdown did already, and free its slot. Never leaves the
        attempt unsettled: if deciding its outcome fails, it fails (``died_settlement``)."""
        try:
            decided = settle(entry.definition, entry.claimed, result, entry.signal)
        except Exception as exc:
            log.exception("ujobs.worker.settle_failed: job %s", entry.claimed.id)
            decided = died_settlement(
                entry.definition, entry.claimed, "deciding the attempt's outcome", exc
            )
        name = entry.claimed.name
        self.processed[name] = self.processed.get(name, 0) + 1  # approximate under races
        first = self.table.settle_once(entry, decided, release=True)
        if first and decided is None and entry.signal.code is ErrorCode.LEASE_LOST:
            log.warning(
                "ujobs.worker.lease_lost: job %s (%s): its outcome was not written",
                entry.claimed.id,
                ErrorCode.LEASE_LOST.value,
            )

    def _take_due(self, *, force: bool = False) -> list[Settlement]:
        return self.outcomes.take_due(force=force, idle=not len(self.table))

    def _flush(self, *, force: bool = False) -> int:
        batch = self._take_due(force=force)
        if batch:
            write_batch(self.claims.write, batch, self.outcomes)
        return len(batch)

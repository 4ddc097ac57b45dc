"""One soak, phase by phase: set up, run with faults, settle, judge, always clean up.

Why it exists: the order matters. The server, schema and fleet come up first and the run
starts only once every worker has registered and a scheduler leads; producers and the
injector then run for ``duration``; when it ends, faults stop first (a stopped worker is
resumed, a stopped server started), then the producers; the rows whose ``run_at`` was set to
year 10000 are read and cancelled through the engine's introspector (what ``jobs show`` and
``jobs cancel`` do); then the settle, under one deadline: the schedulers are stopped once their
watermark has passed the end of the run (so every occurrence up to it was decided),
``migrate`` once its Redis queue and processing lists are empty, and the wait ends when no job
row is ready, running, sleeping or waiting. Then the rows still ``running`` are noted, and each
worker's live slots are probed (``marks.probe``: as many probes as its concurrency, on its own
queue), before the workers are stopped. Only then is anything counted. Whatever happens, every
process is killed, the Redis keys of the run are deleted and the cluster is removed (its logs
and the workers' are kept when the run fails).

What it is not: the rules (``verdict``) or the plan (``plan``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psycopg
import redis
from rich.console import Console

from ujobs_bridge.testing import PrivateCluster

from .. import procs
from ..bridge_cli import command
from . import marks, mix, table
from .faults import Event, Injector
from .fleet import Fleet, Slot
from .plan import plan
from .producers import Getter, Ledger, Producer, fail_plan, step_plan
from .settings import (
    KINDS,
    MAX_RESULT_BYTES,
    PREFETCH_MULTIPLIER,
    SoakSettings,
    private_queue,
)
from .verdict import Inputs, Verdict, judge

READY_TIMEOUT_S = 120.0
UPGRADE_TIMEOUT_S = 120
READER_TRIES = 3  # the introspector on the year-10000 rows, right after the faults stop
PROBE_TIMEOUT_S = 40.0  # every worker's probes done (a lost slot makes them wait PROBE_WAIT_S)
BURST_WORK_MS = (1500, 2500)  # sigkill-full: the slots stay full until the kill
JOBS_APP = "bench.soak.jobs"
HANG_THREADS_WORKER = "jobs-threads"  # mix.HANG_THREADS go to its own queue
CELERY_APP = "bench.soak.celery_tasks"


class Soak:
    def __init__(self, settings: SoakSettings, console: Console) -> None:
        self.settings = settings
        self.console = console
        self.interrupted = threading.Event()
        self.log_dir = settings.log_dir or Path(tempfile.mkdtemp(prefix="ujb-soak-"))
        self.marks_dir = self.log_dir / "marks"
        self.marks_dir.mkdir(parents=True, exist_ok=True)
        self.cluster: PrivateCluster | None = None
        self.fleet = Fleet(self.log_dir / "procs")
        self.redis = redis.Redis.from_url(settings.redis_url, socket_timeout=10)
        self.loads: list[float] = []
        self.verdict: Verdict | None = None
        self.events: list[Event] = []
        self.concurrency: dict[str, int] = {}  # worker name -> -c
        self.apps: dict[str, str] = {}  # worker name -> -A
        self.readers: list[str] = []  # what the introspector could not do with a far row
        self.client: Any = None  # the producers' ujobs_bridge Client
        self._cleanups: list[Any] = []

    # ------------------------------------------------------------------ the whole run

    def run(self) -> int:
        ok = False
        # The soak's own client logs (pool reconnects during outages) go to a file, not the table.
        handler = logging.FileHandler(self.log_dir / "soak.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
        try:
            code = self._run()
            ok = code == 0
            return code
        finally:
            try:
                self._teardown(keep_logs=not ok)
            finally:
                logging.getLogger().removeHandler(handler)
                handler.close()

    def _run(self) -> int:
        s = self.settings
        self.redis.ping()
        self.cluster = PrivateCluster().create()
        dsn = self._database(self.cluster)
        workers = self._fleet(dsn)
        faults = plan(s, len(workers))
        self.console.print(
            f"[bold]soak[/bold] run {s.run_id}: {s.duration_s:g}s, seed {s.seed}, "
            f"{len(faults)} faults ({', '.join(f'{k} x{sum(f.kind == k for f in faults)}' for k in KINDS)}), "
            f"lease {s.lease_s:g}s, Postgres on port {self.cluster.port}, logs {self.log_dir}"
        )
        self.fleet.start()
        self._wait_ready(dsn, len(workers))
        ledger = Ledger()
        producers, getter = self._producers(dsn, ledger)
        by_workload = {p.workload: p for p in producers}

        def burst(slot: Slot, n: int) -> int:
            producer = by_workload["plain" if self.apps[slot.name] == JOBS_APP else "celery"]
            return producer.burst(n, private_queue(slot.name), BURST_WORK_MS)

        t_start = time.time()
        t0 = time.monotonic()
        injector = Injector(
            faults, self.fleet, workers, self.cluster, dsn, s.seed, burst, self.marks_dir
        )
        injector.start(t0)
        self.events = injector.events
        sampler = threading.Thread(target=self._sample_load, args=(t0,), daemon=True)
        sampler.start()
        self.interrupted.wait(s.duration_s)
        t_end = time.time()
        injector.stop()
        for p in producers:
            p.stop()
        for p in producers:
            p.join(timeout=60)
        self.console.print(f"run over after {time.monotonic() - t0:.0f}s; settling")
        self._read_and_cancel_far(dsn, ledger)
        settled = self._settle(dsn, t_end)
        running = self._running(dsn)
        probed = self._probe(workers)
        getter.stop(timeout=30)
        shutdown = self.fleet.retire(workers)
        self.verdict = judge(
            Inputs(
                dsn=dsn,
                records=marks.read(self.marks_dir),
                ledger=ledger,
                events=injector.events,
                slots=self.fleet.slots,
                t_start=t_start,
                t_end=t_end,
                lease_s=s.lease_s,
                running=running,
                concurrency=self.concurrency,
                apps=self.apps,
                readers=self.readers,
            )
        )
        done_faults = {
            k: sum(1 for e in injector.events if e.fault.kind == k and not e.error) for k in KINDS
        }
        header = {
            "settled": settled,
            "slot probes": probed,
            "faults carried out": ", ".join(f"{k} x{n}" for k, n in done_faults.items()),
            "workers' exit codes on SIGTERM at the end": shutdown,
            "load average (1 min) during the run": _load_text(self.loads),
            "cores": os.cpu_count(),
        }
        table.render(self.verdict, self.console, header)
        if s.json_out is not None:
            self._write_json(s.json_out, header)
        short = [k for k, n in done_faults.items() if n < s.min_each]
        if short:
            self.console.print(
                f"[red]fault kinds carried out fewer than {s.min_each} times: {short}[/red]"
            )
        if self.interrupted.is_set() and self.verdict.losses == 0:
            return 130
        return 1 if self.verdict.losses or short else 0

    # ------------------------------------------------------------------ set-up

    def _database(self, cluster: PrivateCluster) -> str:
        with psycopg.connect(cluster.admin_dsn, autocommit=True) as conn:
            conn.execute("create database soak")
        dsn = f"postgresql://postgres@127.0.0.1:{cluster.port}/soak?connect_timeout=5"
        done = subprocess.run(
            [*command(), "db", "upgrade", "--dsn", dsn],
            capture_output=True,
            text=True,
            timeout=UPGRADE_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise RuntimeError(f"ujobs-bridge db upgrade failed:\n{done.stdout}{done.stderr}")
        return dsn

    def _fleet(self, dsn: str) -> list[Slot]:
        from .celery_tasks import QUEUE as CELERY_QUEUE
        from .jobs import QUEUE as JOBS_QUEUE

        s = self.settings
        env = {marks.ENV: str(self.marks_dir)}
        level = os.environ.get("SOAK_LOGLEVEL", "WARNING")
        cmd = command()
        celery_queues = f"{CELERY_QUEUE},{s.migrated_queue}"
        workers = []
        for name, app, queues, pool, c in (
            ("jobs-threads", JOBS_APP, JOBS_QUEUE, "threads", 4),
            ("jobs-procs", JOBS_APP, JOBS_QUEUE, "processes", 2),
            ("celery-threads", CELERY_APP, celery_queues, "threads", 4),
            ("celery-procs", CELERY_APP, celery_queues, "processes", 2),
        ):
            argv = [
                *cmd, "worker", "--dsn", dsn, "-A", app, "-Q", f"{queues},{private_queue(name)}",
                "-P", pool, "-c", str(c), "--lease", f"{s.lease_s:g}", "--poll", "0.5",
                "--prefetch-multiplier", str(PREFETCH_MULTIPLIER),
                "--max-result-bytes", str(MAX_RESULT_BYTES), "-n", f"{name}@soak", "-l", level,
            ]  # fmt: skip
            workers.append(self.fleet.add(Slot(name, "worker", argv, env)))
            self.concurrency[name] = c
            self.apps[name] = app
        for i in (1, 2):
            argv = [
                *cmd, "scheduler", "-A", "bench.soak.jobs", "--dsn", dsn, "--interval", "0.5",
                "--no-purge", "--loglevel", level,
            ]  # fmt: skip
            self.fleet.add(Slot(f"scheduler-{i}", "scheduler", argv, env))
        argv = [
            *cmd, "migrate", "-A", "bench.soak.celery_tasks", "--broker", s.redis_url,
            "-Q", s.migrated_queue, "--follow", "--drainer-id", s.drainer_id, "--poll", "0.2",
            "--dsn", dsn,
        ]  # fmt: skip
        self.fleet.add(Slot("migrate", "migrate", argv, env))
        return workers

    def _wait_ready(self, dsn: str, workers: int) -> None:
        def ready() -> bool | None:
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                    nodes = conn.execute(
                        "select count(*) from x_worker_nodes where expires_at > now()"
                    ).fetchone()
                    leader = conn.execute(
                        "select count(*) from x_scheduler_leader where expires_at > now()"
                    ).fetchone()
            except psycopg.Error:
                return None
            return bool(nodes and nodes[0] >= workers and leader and leader[0] >= 1) or None

        procs.wait_until(
            ready, timeout_s=READY_TIMEOUT_S, what="workers and a scheduler leader", interval_s=0.5
        )

    def _producers(self, dsn: str, ledger: Ledger) -> tuple[list[Producer], Getter]:
        from ujobs_bridge import connect
        from ujobs_bridge.ext.jobs import EARLIEST_INSTANT, LATEST_INSTANT

        from . import celery_tasks, jobs, source

        s = self.settings
        client = self.client = connect(dsn, upgrade=False)
        celery_tasks.app.use_ujobs_client(client)
        self._cleanups.append(client.close)
        self._cleanups.append(celery_tasks.app.backend.close)
        self._cleanups.append(lambda: celery_tasks.app.use_ujobs_client(None))
        source_app = source.make_app(s.redis_url, s.migrated_queue)
        self._cleanups.append(source_app.close)
        getter = Getter(ledger)
        sent = [0]

        def send_plain(key: str, plan_: int, work_ms: int, queue: str | None) -> str:
            if plan_ in mix.BY_HAND:
                # The row and its odd run_at in one transaction (no sender accepts it any more).
                with psycopg.connect(dsn, connect_timeout=5) as conn:
                    ref = jobs.plain.configure(conn=conn).enqueue(key, plan_, work_ms)
                    conn.execute(
                        "update x_jobs set run_at = %s::timestamptz where id = %s",
                        (mix.BY_HAND[plan_], ref.id),
                    )
                return str(ref.id)
            definition = jobs.hang if plan_ in (mix.HANG, mix.HANG_THREADS) else jobs.plain
            if plan_ == mix.HANG_THREADS:
                queue = private_queue(HANG_THREADS_WORKER)
            call = definition.configure(client=client, queue=queue)
            if plan_ == mix.EDGES:
                call = definition.configure(
                    client=client, queue=queue, run_at=EARLIEST_INSTANT, expires=LATEST_INSTANT
                )
            return str(call.enqueue(key, plan_, work_ms).id)

        def send_steps(key: str, plan_: int, work_ms: int, queue: str | None) -> str:
            return str(jobs.stepped.configure(client=client).enqueue(key, plan_, work_ms).id)

        def send_celery(key: str, plan_: int, work_ms: int, queue: str | None) -> str:
            options: dict[str, Any] = {} if queue is None else {"queue": queue}
            if plan_ == mix.EDGES:
                options.update(eta=EARLIEST_INSTANT, expires=LATEST_INSTANT)
            result = celery_tasks.soak_task.apply_async((key, plan_, work_ms), **options)
            sent[0] += 1
            getter.offer(sent[0], result)
            return str(result.id)

        def send_migrated(key: str, plan_: int, work_ms: int, queue: str | None) -> str:
            options: dict[str, Any] = {}
            if plan_ == mix.EDGES:
                options.update(eta=EARLIEST_INSTANT, expires=LATEST_INSTANT)
            source.publish(source_app, s.migrated_queue, key, plan_, work_ms, **options)
            return key

        r = s.rates
        out = [
            Producer("plain", r.plain, s.seed, send_plain, fail_plan, ledger, (20, 400)),
            Producer("steps", r.steps, s.seed, send_steps, step_plan, ledger, (20, 150)),
            Producer("celery", r.celery, s.seed, send_celery, fail_plan, ledger, (20, 400)),
            Producer("migrated", r.migrated, s.seed, send_migrated, fail_plan, ledger, (20, 300)),
        ]
        for p in out:
            p.start()
        getter.start()
        return out, getter

    # ------------------------------------------------------------------ the settle

    def _settle(self, dsn: str, t_end: float) -> str:
        s = self.settings
        deadline = time.monotonic() + s.settle_s
        t0 = time.monotonic()
        phases: list[str] = []

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        def query(sql: str, *args: Any) -> Any:
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                    row = conn.execute(sql, args or None).fetchone()
                    return row[0] if row else None
            except psycopg.Error:
                return None

        def wait(probe: Any, what: str) -> bool:
            try:
                procs.wait_until(probe, timeout_s=left(), what=what, interval_s=0.5)
            except procs.BenchTimeout:
                phases.append(f"TIMED OUT waiting for {what}")
                return False
            phases.append(f"{what} after {time.monotonic() - t0:.0f}s")
            return True

        wait(
            lambda: (
                (
                    query(
                        "select extract(epoch from watermark) from x_scheduler_state where task = 'soak-tick'"
                    )
                    or 0
                )
                >= t_end
                or None
            ),
            "the schedulers' watermark past the end",
        )
        self.fleet.retire(self.fleet.of_kind("scheduler"))
        wait(lambda: self._redis_drained() or None, "the Redis queue drained")
        self.fleet.retire(self.fleet.of_kind("migrate"))
        wait(
            lambda: (
                query(
                    "select count(*) from x_jobs where state in ('ready', 'running', 'sleeping', 'waiting')"
                )
                == 0
                or None
            ),
            "every job row finished",
        )
        return "; ".join(phases)

    def _read_and_cancel_far(self, dsn: str, ledger: Ledger) -> None:
        """The rows whose run_at was set to year 10000 never come due: each is read
        (``jobs show``) and cancelled (``jobs cancel``) through the engine's introspector, and
        the queue stats read (``jobs stats``). What fails is noted (``readers``) and the row is
        then cancelled by hand, so the settle does not wait for it."""
        from ujobs_bridge.ext.observe import Introspector

        far = [x for x in ledger.sent if x.plan == mix.YEAR_10000]
        introspector = Introspector(dsn)

        def tried(action: Any) -> Any:
            """The server was just started again: a connection may fail once or twice."""
            for attempt in range(READER_TRIES):
                try:
                    return action()
                except Exception:
                    if attempt == READER_TRIES - 1:
                        raise
                    time.sleep(1.0)
            return None

        try:
            tried(introspector.stats)
        except Exception as exc:
            self.readers.append(f"jobs stats: {type(exc).__name__}: {exc}")
        for sent in far:
            job_id = uuid.UUID(sent.ref)
            try:
                shown = tried(lambda: introspector.get(job_id))  # noqa: B023 - called at once
                if "10000" not in str(shown.run_at):
                    self.readers.append(f"{job_id}: shown with run_at {shown.run_at!s}")
                introspector.cancel(job_id, reason="a year-10000 row, cancelled by the soak")
            except Exception as exc:
                self.readers.append(f"{job_id}: {type(exc).__name__}: {exc}")
                try:
                    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                        conn.execute(
                            "update x_jobs set state = 'cancelled', finished_at = now()"
                            " where id = %s and state = 'ready'",
                            (job_id,),
                        )
                except psycopg.Error as again:
                    self.readers.append(f"{job_id}: not cancelled by hand either: {again}")

    def _running(self, dsn: str) -> list[tuple[str, str, str | None]]:
        """The rows still ``running`` once the settle is over: id, name, holder."""
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                rows = conn.execute(
                    "select id::text, name, claimed_by from x_jobs where state = 'running'"
                ).fetchall()
        except psycopg.Error as exc:
            self.console.print(f"[red]rows running at the end not read: {exc}[/red]")
            return []
        return [(r[0], r[1], r[2]) for r in rows]

    def _probe(self, workers: list[Slot]) -> str:
        """As many probes as each worker has slots, on its own queue (``marks.probe``), and
        the wait until each worker ran them all (the verdict reads what they saw)."""
        from . import celery_tasks, jobs

        client = self.client  # the producers' client, still open
        t0 = time.monotonic()
        expected = 0
        for slot in workers:
            c = self.concurrency[slot.name]
            queue = private_queue(slot.name)
            for _ in range(c):
                if self.apps[slot.name] == JOBS_APP:
                    jobs.probe.configure(client=client, queue=queue).enqueue(slot.name, c)
                else:
                    celery_tasks.soak_probe.apply_async((slot.name, c), queue=queue)
            expected += c

        def done() -> bool | None:
            records = [r for r in marks.read(self.marks_dir) if r.get("k") == "probe"]
            return len(records) >= expected or None

        try:
            procs.wait_until(
                done, timeout_s=PROBE_TIMEOUT_S, what="the slot probes", interval_s=0.25
            )
        except procs.BenchTimeout:
            return f"TIMED OUT after {PROBE_TIMEOUT_S:g}s"
        return f"{expected} probes ran in {time.monotonic() - t0:.1f}s"

    def _redis_drained(self) -> bool:
        s = self.settings
        if self.redis.llen(s.migrated_queue):
            return False
        # Processing lists are `_ujobs.migrate.<drainer id>.<queue>[...]` (the liveness key,
        # `_ujobs.migrate.alive.<drainer id>.<run>`, is not one).
        lists = self.redis.scan_iter(match=f"_ujobs.migrate.{s.drainer_id}.*")
        return not any(True for _ in lists)

    # ------------------------------------------------------------------ plumbing

    def _sample_load(self, t0: float) -> None:
        while not self.interrupted.wait(5.0):
            self.loads.append(os.getloadavg()[0])
            if time.monotonic() - t0 > self.settings.duration_s:
                return

    def _write_json(self, path: Path, header: dict[str, Any]) -> None:
        assert self.verdict is not None
        doc = {
            "settings": {k: str(v) for k, v in asdict(self.settings).items()},
            "rows": {k: asdict(v) for k, v in self.verdict.rows.items()},
            "recovery": self.verdict.recovery,
            "other": self.verdict.other,
            "samples": self.verdict.samples,
            "faults": [
                {
                    "kind": e.fault.kind,
                    "planned_at_s": e.fault.at_s,
                    "t": e.t,
                    "target": e.target,
                    "pid": e.pid,
                    "away_s": e.away_s,
                    "held": e.held,
                    "terminated": e.terminated,
                    "error": e.error,
                    "extra": e.extra,
                }
                for e in self.events
            ],
            "header": {k: str(v) for k, v in header.items()},
        }
        path.write_text(json.dumps(doc, indent=2, default=str))

    def _teardown(self, *, keep_logs: bool) -> None:
        for cleanup in reversed(self._cleanups):
            try:
                cleanup()
            except Exception as exc:
                self.console.print(f"cleanup: {type(exc).__name__}: {exc}")
        self.fleet.close()
        procs.stop_all()
        self._forget_redis_keys()
        if self.cluster is not None:
            if keep_logs:
                shutil.copy(
                    self.cluster.log, self.log_dir / "postgres.log"
                ) if self.cluster.log.exists() else None
            self.cluster.close()
        if keep_logs:
            self.console.print(f"logs kept in {self.log_dir}")
        elif self.settings.log_dir is None:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def _forget_redis_keys(self) -> None:
        """Every key of this run in the soak's Redis db, and its members in kombu's bindings."""
        marker = self.settings.run_id.encode()
        try:
            for key in list(self.redis.scan_iter(count=1000)):
                if marker in key:
                    self.redis.delete(key)
                elif key.startswith(b"_kombu.binding") and self.redis.type(key) == b"set":
                    ours = [m for m in self.redis.smembers(key) if marker in m]
                    if ours:
                        self.redis.srem(key, *ours)
        except redis.RedisError as exc:
            self.console.print(f"cleanup: Redis keys of the run not deleted: {exc}")


def _load_text(loads: list[float]) -> str:
    if not loads:
        return "-"
    return f"min {min(loads):.1f}, mean {statistics.mean(loads):.1f}, max {max(loads):.1f}"

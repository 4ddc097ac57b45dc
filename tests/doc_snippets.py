"""The documentation's snippets, read from the Markdown and run as a reader would run them.

Why it exists: a snippet that is only parsed can still import a name that moved, call a command
with an option it lost, or print something else than its comment says. Every fenced block of
README.md and docs/**/*.md whose language is a snippet language (``python``, ``bash``,
``console``, ``shell``, ``sh``) is either run by ``run_page`` or carries a marker saying why it
cannot run. The convention (CONTRIBUTING.md, "Snippets in the docs") is an HTML comment, which
neither GitHub nor MkDocs shows:

- ``<!-- snippet: skip reason="..." -->`` right before a block: not run, for the reason given.
- ``<!-- snippet: file="proj/tasks.py" -->`` right before a block: the block is that file's
  content, written into the page's directory (a Python file must compile); nothing runs.
  ``append="proj/settings.py"``: the block's lines are added to the end of that file.
- ``<!-- snippet: expect="6 job(s)" -->`` right before a block: run it, and its output must hold
  that text.
- ``<!-- snippet: file="billing.py"`` with a body, then ``-->``: a file the reader is assumed to
  have (hidden), written where it stands in the page's order. ``<!-- snippet: prelude`` with a
  body: hidden Python put before the next Python block (names the fragment uses but does not
  define: a connection, a client); ``<!-- snippet: run`` with a body: hidden Python run where it
  stands (what the reader is assumed to have done: a message left on the broker).

A page's blocks run in order in one temporary directory, against the database of
``UJOBS_DATABASE_URL`` (and the other URL variables the pages use). A Python block runs as a
script (``python snippet_LINE.py``). A shell block runs command by command (one a line, ``\\``
continuing one; in a ``console`` block the lines after a ``$`` prompt) under ``bash -e``; a
command that runs until stopped (``LONG_RUNNING``: a worker, the scheduler, ``migrate --follow``,
``outbox relay``) is started, waited for until it is ready (a worker: and no due job of its
queues is left), then stopped with SIGINT (Ctrl-C) and must exit 0. Blocks of other languages
(``text``, ``ini``, ``sql``, ``promql``...) are not snippets; every fence names its language.

What it is not: a doctest. Output is checked only where a block says what to expect.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
SNIPPET_LANGUAGES = frozenset({"python", "bash", "console", "shell", "sh"})
SHELL_LANGUAGES = SNIPPET_LANGUAGES - {"python"}
COMMAND_TIMEOUT_S = 120.0
# Commands that run until stopped (their first words, and a flag that makes one so, if any), and
# the line each prints once it is ready; a worker's names the queues it serves.
LONG_RUNNING = (
    (("ujobs-bridge", "worker"), None, re.compile(r" ready: .*queues=(?P<queues>[^\s]+)")),
    (("ujobs-bridge", "scheduler"), None, re.compile(r" ready: ")),
    (("ujobs-bridge", "migrate"), "--follow", re.compile(r"\(follow\)")),
    (("ujobs-bridge", "outbox", "relay"), None, re.compile(r"outbox relay ready: ")),
)
DUE_JOBS = (
    "select count(*) from x_jobs where queue = any(%s)"
    " and ((state = 'ready' and run_at <= now()) or state = 'running')"
)

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[^\s`]*)[^\n]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
                   re.M | re.S)  # fmt: skip
MARKER = re.compile(r"<!--\s*snippet:(?P<head>[^\n]*?)(?:\n(?P<body>.*?))?-->", re.S)
ATTRIBUTE = re.compile(r'(?P<key>[a-z-]+)(?:="(?P<value>[^"]*)")?')


def pages() -> list[Path]:
    """README.md and every page of the docs, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    """One fenced block, or one hidden file or prelude, of a page."""

    page: Path
    line: int
    lang: str
    code: str
    attrs: Mapping[str, str] = field(default_factory=dict)
    hidden: bool = False

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def snippet(self) -> bool:
        return self.lang in SNIPPET_LANGUAGES

    @property
    def writes(self) -> str | None:
        """The file the block is (``file=``) or adds its lines to (``append=``), if any."""
        return self.attrs.get("file") or self.attrs.get("append")

    @property
    def skip_reason(self) -> str | None:
        return self.attrs.get("reason", "") if "skip" in self.attrs else None


def parse_attributes(head: str) -> dict[str, str]:
    return {m["key"]: m["value"] or "" for m in ATTRIBUTE.finditer(head)}


def dedent(code: str, indent: str) -> str:
    return "".join(
        line[len(indent) :] if line.startswith(indent) else line
        for line in code.splitlines(keepends=True)
    )


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """The page's fenced blocks and hidden snippets, in order; a marker directly before a fence
    (only blank lines between) gives that block its attributes."""
    text = page.read_text() if text is None else text
    items: list[tuple[int, Block]] = []
    markers = list(MARKER.finditer(text))
    for m in markers:
        if m["body"] is not None and m["body"].strip():
            hidden = parse_attributes(m["head"])
            python = (
                "prelude" in hidden or "run" in hidden or hidden.get("file", "").endswith(".py")
            )
            lang = "python" if python else ""
            line = text.count("\n", 0, m.start()) + 1
            items.append((m.start(), Block(page, line, lang, m["body"], hidden, hidden=True)))
    for f in FENCE.finditer(text):
        before = text[: f.start()].rstrip()
        attrs: dict[str, str] = {}
        for m in markers:
            if m.end() == len(before) and m["body"] is None:
                attrs = parse_attributes(m["head"])
        line = text.count("\n", 0, f.start()) + 1
        code = dedent(f["code"], f["indent"])
        items.append((f.start(), Block(page, line, f["lang"], code, attrs)))
    return [block for _, block in sorted(items, key=lambda item: item[0])]


def unmarked_problems(page: Path, text: str | None = None) -> list[str]:
    """What breaks the convention on a page: a fence without a language, a skip without a
    reason, a marker that names no known attribute, a Python file or block that does not
    compile (with its prelude)."""
    problems: list[str] = []
    prelude = ""
    for block in blocks(page, text):
        known = {"skip", "reason", "file", "append", "expect", "prelude", "run"}
        if not block.lang and not block.hidden:
            problems.append(f"{block.where}: a fence without a language (text, if not a snippet)")
        if unknown := set(block.attrs) - known:
            problems.append(f"{block.where}: unknown snippet attribute(s) {sorted(unknown)}")
        if block.skip_reason is not None and not block.skip_reason.strip():
            problems.append(f'{block.where}: skip without reason="..."')
        if block.lang == "python" and block.skip_reason is None:
            if "prelude" in block.attrs:
                prelude = block.code
                continue
            is_file = block.writes is not None  # a file takes no prelude; a script does
            try:
                compile(("" if is_file else prelude) + block.code, block.where, "exec")
            except SyntaxError as exc:
                problems.append(f"{block.where}: {exc}")
            if not is_file:
                prelude = ""
    return problems


def runnable_pages() -> list[Path]:
    return [
        page
        for page in pages()
        if any(b.snippet and b.skip_reason is None and b.writes is None for b in blocks(page))
    ]


def runs_commands(page: Path) -> bool:
    """Whether a shell block of the page is run (not a Python block alone)."""
    return any(
        b.lang in SHELL_LANGUAGES and b.skip_reason is None and b.writes is None
        for b in blocks(page)
    )


# -- running a page ----------------------------------------------------------------------------


class SnippetFailed(AssertionError):
    """A snippet did not run as its page says; the message names the page and line."""


def commands(code: str, lang: str = "bash") -> Iterator[str]:
    """A shell block's commands, one a line: continuation lines joined, blank and comment lines
    left out; in a ``console`` block only the lines after a ``$`` prompt (the rest is output)."""
    joined = re.sub(r"[ \t]*\\\n\s*", " ", code)
    for line in joined.splitlines():
        stripped = line.strip()
        if lang == "console":
            if stripped.startswith("$ "):
                yield stripped.removeprefix("$ ")
        elif stripped and not stripped.startswith("#"):
            yield stripped


def long_running(command: str) -> re.Pattern[str] | None:
    """The ready line of a command that runs until stopped; None for one that ends by itself."""
    argv = shlex.split(command, comments=True)
    for words, flag, ready in LONG_RUNNING:
        if tuple(argv[: len(words)]) == words and (flag is None or flag in argv):
            return ready
    return None


def wait(condition: object, *, timeout: float, what: str, where: str) -> None:
    pause = threading.Event()
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SnippetFailed(f"{where}: timed out after {timeout}s waiting for {what}")
        pause.wait(0.05)


@dataclass
class PageRun:
    """One page's blocks, run in order in ``directory`` with ``env``."""

    directory: Path
    env: dict[str, str]
    dsn: str
    transcript: list[str] = field(default_factory=list)

    def run_page(self, page: Path, text: str | None = None) -> None:
        prelude = ""
        for block in blocks(page, text):
            if block.skip_reason is not None or not (block.snippet or block.hidden):
                continue
            if "prelude" in block.attrs:
                prelude = block.code
            elif block.writes is not None:
                target = self.directory / block.writes
                target.parent.mkdir(parents=True, exist_ok=True)
                kept = target.read_text() if "append" in block.attrs and target.exists() else ""
                target.write_text(kept + block.code)
                if target.suffix == ".py":
                    compile(kept + block.code, block.where, "exec")
            elif block.lang == "python":
                self.run_python(block, prelude)
                prelude = ""
            else:
                self.run_shell(block)

    def check(self, block: Block, output: str) -> None:
        self.transcript.append(f"--- {block.where}\n{output}")
        expected = block.attrs.get("expect")
        if expected is not None and expected not in output:
            raise SnippetFailed(f"{block.where}: expected {expected!r} in the output:\n{output}")

    def run_python(self, block: Block, prelude: str) -> None:
        script = self.directory / f"snippet_{block.line}.py"
        script.write_text(prelude + block.code)
        output = self.execute([sys.executable, script.name], block)
        self.check(block, output)

    def run_shell(self, block: Block) -> None:
        output: list[str] = []
        for command in commands(block.code, block.lang):
            ready = long_running(command)
            if ready is None:
                output.append(self.execute(["bash", "-e", "-o", "pipefail", "-c", command], block))
            else:
                output.append(self.run_until_idle(command, ready, block))
        self.check(block, "\n".join(output))

    def execute(self, argv: list[str], block: Block) -> str:
        try:
            done = subprocess.run(
                argv, cwd=self.directory, env=self.env, capture_output=True, text=True,
                timeout=COMMAND_TIMEOUT_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise SnippetFailed(f"{block.where}: {argv[-1]!r} ran over {exc.timeout}s") from exc
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise SnippetFailed(
                f"{block.where}: {argv[-1]!r} exited {done.returncode}:\n{output[-4000:]}"
            )
        return output

    def due_jobs(self, queues: list[str]) -> int:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(DUE_JOBS, (queues,)).fetchone()
        return int(row[0]) if row else 0

    def run_until_idle(self, command: str, ready: re.Pattern[str], block: Block) -> str:
        """Start a command that runs until stopped; once it is ready (a worker: and no due job of
        its queues is left), Ctrl-C it (SIGINT) and require exit code 0.

        A ``migrate --follow`` is stopped once it follows: what it moved by then is its own
        business; the next command of the block sees the broker as it left it."""
        log = self.directory / f"long_running_{block.line}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                ["bash", "-c", f"exec {command}"], cwd=self.directory, env=self.env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        try:
            wait(
                lambda: proc.poll() is not None or ready.search(log.read_text()),
                timeout=COMMAND_TIMEOUT_S, what=f"{command!r} ready", where=block.where,
            )  # fmt: skip
            if proc.poll() is not None:
                raise SnippetFailed(
                    f"{block.where}: {command!r} exited {proc.returncode} before it was ready:\n"
                    + log.read_text()[-4000:]
                )
            shown = ready.search(log.read_text())
            if shown is not None and "queues" in ready.groupindex:
                queues = shown["queues"].split(",")
                wait(
                    lambda: self.due_jobs(queues) == 0,
                    timeout=COMMAND_TIMEOUT_S, what=f"no due job left in {queues}",
                    where=block.where,
                )  # fmt: skip
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(timeout=COMMAND_TIMEOUT_S)
            except subprocess.TimeoutExpired as exc:
                raise SnippetFailed(f"{block.where}: {command!r} ignored Ctrl-C") from exc
            if code != 0:
                raise SnippetFailed(
                    f"{block.where}: {command!r} exited {code} on Ctrl-C:\n"
                    + log.read_text()[-4000:]
                )
            return log.read_text()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

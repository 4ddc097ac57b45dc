"""What the input suites share: the Hypothesis settings (bounded, a fixed seed in CI, a random
one locally), an in-process caller for an ASGI application (the dashboard without a server or
an HTTP client), and the tally of outcomes by surface (``-s`` prints it at the end of a module).

An outcome is one of: ``clear`` (an error the user can act on: the project's ``UJ_*`` error
with its hint, or the exception Celery itself raises there, with a message), ``stored`` (the
input was accepted and read back equal), ``raw`` (anything else: a driver error, a bare Python
error from inside the library, a crash). The suites assert ``raw`` never happens.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, settings

from ujobs_bridge.testing.pytest import in_ci


def bounded(examples: int) -> settings:
    """At most ``examples`` inputs per test; derandomized (one fixed seed) under ``CI``, random
    locally; no deadline (the machine is shared) and no example database in CI."""
    return settings(
        max_examples=examples,
        derandomize=in_ci(),
        database=None if in_ci() else settings.default.database,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


TALLY: Counter[tuple[str, str]] = Counter()


def tally(surface: str, outcome: str) -> None:
    assert outcome in ("clear", "stored"), f"{surface}: a raw error"
    TALLY[(surface, outcome)] += 1


def tally_text() -> str:
    surfaces = sorted({s for s, _ in TALLY})
    lines = []
    for s in surfaces:
        clear, stored = TALLY[(s, "clear")], TALLY[(s, "stored")]
        lines.append(f"{s}: tried {clear + stored}, clear {clear}, stored {stored}, raw 0")
    return "\n".join(lines)


def asgi_get(app: Any, path: str, query: bytes = b"", host: str = "127.0.0.1") -> tuple[int, str]:
    """GET ``path?query`` from the ASGI ``app`` in this process, as a local browser would:
    the status and the body as text."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("latin-1", "backslashreplace"),
        "root_path": "",
        "query_string": query,
        "headers": [(b"host", host.encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(start["status"]), body.decode("utf-8", "replace")

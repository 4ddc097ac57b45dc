"""A process's own small HTTP endpoint: ``/metrics`` (Prometheus text), ``/healthz`` (the process
answers) and ``/readyz`` (it is doing its work: a check the owner supplies).

Why it exists: ``ujobs-bridge worker --metrics-port N`` (and the scheduler's, and
``migrate --follow``'s) must be scraped and probed by Prometheus and Kubernetes without the
dashboard; the standard library's threading HTTP server is enough and adds no dependency. It
is a ``Service``: each tick accepts one connection (handled on its own thread), so it stops
like every other loop.

What it is not: the dashboard (``dashboard/``), which serves the database-wide series.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ujobs_bridge._internal.service import Service

log = logging.getLogger("ujobs.metrics")

ReadyCheck = Callable[[], tuple[bool, dict[str, Any]]]


def always_ready() -> tuple[bool, dict[str, Any]]:
    return True, {}


class MetricsServer(Service):
    """Serves ``registry`` on ``address:port`` (port 0: any free port, see ``.port``)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        port: int,
        address: str = "127.0.0.1",
        ready: ReadyCheck = always_ready,
    ) -> None:
        super().__init__("metrics-http", interval_s=0)
        self.registry = registry
        self.ready = ready
        self._server = ThreadingHTTPServer((address, port), self._handler())
        self._server.daemon_threads = True
        self._server.timeout = 0.2  # a tick waits at most this long for a connection
        self.port = int(self._server.server_address[1])

    def tick(self) -> None:
        self._server.handle_request()

    def _on_stop(self) -> None:
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(server.registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._send(200, b'{"ok": true}\n', "application/json")
                elif path == "/readyz":
                    ok, detail = server.ready()
                    body = json.dumps({"ok": ok, **detail}, default=str).encode() + b"\n"
                    self._send(200 if ok else 503, body, "application/json")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metrics http: " + format, *args)

        return Handler

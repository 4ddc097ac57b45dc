"""Redis and RabbitMQ for a test process: a private ``redis-server`` and a RabbitMQ vhost of its own.

Why it exists: tests of code that talks to Celery's brokers must never touch a broker's data they
did not create: a developer's Redis database 0 or RabbitMQ vhost ``/`` is someone's data, and a
second test run on the same machine (another xdist worker, another checkout) must not flush the
first one's keys. ``TestBrokers`` gives each test process

- ``redis_url(db)``: ``UJOBS_TEST_REDIS_URL`` when set (then every caller shares that one
  database, the only one a test may flush); otherwise a database of a ``PrivateRedis``, a
  ``redis-server`` this process started on a free port in a temporary directory (no persistence),
  stopped by ``close()``;
- ``amqp_url()``: ``UJOBS_TEST_AMQP_URL`` when set; otherwise a ``RabbitVhost`` this process
  created through the management API (``UJOBS_TEST_AMQP_SERVER``, default guest on localhost),
  guest allowed, deleted by ``close()``.

Both are made on first use, so a test run that needs no broker starts none. What a process made
is exported in its environment (``UJOBS_TEST_REDIS_SERVER``, ``UJOBS_TEST_AMQP_VHOST_URL``) so the
subprocesses it spawns (workers, Celery apps) use the same server and vhost instead of making
their own.

What it is not: a broker. It needs the ``redis-server`` binary, and a RabbitMQ with its management
plugin (the ``rabbitmq_management`` plugin that ships with it) for the vhost.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

from ujobs_bridge.errors import ErrorCode, UjobsError

REDIS_URL_ENV = "UJOBS_TEST_REDIS_URL"
AMQP_URL_ENV = "UJOBS_TEST_AMQP_URL"
# Set by the kit for the subprocesses of a process that made its own server / vhost.
REDIS_SERVER_ENV = "UJOBS_TEST_REDIS_SERVER"
AMQP_VHOST_URL_ENV = "UJOBS_TEST_AMQP_VHOST_URL"
# Where to create vhosts: an amqp:// URL of the server (its user must be an administrator).
AMQP_SERVER_ENV = "UJOBS_TEST_AMQP_SERVER"
DEFAULT_AMQP_SERVER = "amqp://guest:guest@127.0.0.1:5672"
MANAGEMENT_PORT = 15672


class BrokerUnavailableError(UjobsError):
    """A broker the tests need could not be started or reached (the message says which)."""

    code = ErrorCode.BROKER_UNAVAILABLE


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateRedis:
    """``with PrivateRedis() as server:`` gives ``server.url(db)`` on a ``redis-server`` of its own
    (127.0.0.1, a free port, a temporary directory, ``--save ""``, ``--appendonly no``)."""

    def __init__(self, binary: str | None = None) -> None:
        found = binary or shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(found).exists():
            raise BrokerUnavailableError(
                "redis-server is not installed",
                hint=f"install Redis, or set {REDIS_URL_ENV} to a database the tests may flush",
            )
        self.binary = found
        self.port = 0
        self.directory: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"PrivateRedis(port={self.port})"

    @property
    def base_url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def url(self, db: int = 0) -> str:
        return f"{self.base_url}/{db}"

    def start(self, timeout_s: float = 20.0) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="ujobs-redis-"))
        log = self.directory / "redis.log"
        for _ in range(5):  # another process may take the free port first
            self.port = _free_port()
            args = [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                "--logfile",
                str(log),
                "--databases",
                "16",
            ]
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the terminal reaches the tests, not Redis
            )
            if self._wait_ready(timeout_s):
                return
            self._kill()
        detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        self.stop()
        raise BrokerUnavailableError(f"redis-server did not start: {detail}".strip())

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        """Stop the server and remove its directory. Idempotent."""
        self._kill()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _url_parts(amqp_url: str) -> tuple[str, int, str, str]:
    parts = urllib.parse.urlsplit(amqp_url)
    return (
        parts.hostname or "127.0.0.1",
        parts.port or 5672,
        urllib.parse.unquote(parts.username or "guest"),
        urllib.parse.unquote(parts.password or "guest"),
    )


class RabbitVhost:
    """``with RabbitVhost() as vhost:`` gives ``vhost.url``, a vhost of its own on the RabbitMQ
    named by ``server`` (an ``amqp://`` URL), created and granted to that user through the
    management API, deleted on exit."""

    def __init__(self, server: str | None = None, *, name: str | None = None) -> None:
        self.server = server or os.environ.get(AMQP_SERVER_ENV) or DEFAULT_AMQP_SERVER
        self.host, self.port, self.user, self.password = _url_parts(self.server)
        self.name = name or f"ujobs_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.created = False

    def __repr__(self) -> str:
        return f"RabbitVhost({self.name!r} on {self.host}:{self.port})"

    @property
    def url(self) -> str:
        user = urllib.parse.quote(self.user, safe="")
        password = urllib.parse.quote(self.password, safe="")
        vhost = urllib.parse.quote(self.name, safe="")
        return f"amqp://{user}:{password}@{self.host}:{self.port}/{vhost}"

    def api(self, method: str, path: str, body: object = None) -> object:
        """One management API call (``path`` after ``/api``); the decoded JSON reply, if any."""
        url = f"http://{self.host}:{MANAGEMENT_PORT}/api{path}"
        data = None if body is None else json.dumps(body).encode()
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Basic {token}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=15) as reply:  # noqa: S310
                text = reply.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            raise BrokerUnavailableError(
                f"the RabbitMQ management API is not reachable at {url}: {exc}",
                hint=(
                    "enable it (rabbitmq-plugins enable rabbitmq_management), or set"
                    f" {AMQP_URL_ENV} to a vhost the tests may use"
                ),
            ) from exc
        return json.loads(text) if text.strip() else None

    def create(self) -> str:
        quoted = urllib.parse.quote(self.name, safe="")
        self.api("PUT", f"/vhosts/{quoted}")
        self.created = True
        user = urllib.parse.quote(self.user, safe="")
        self.api(
            "PUT", f"/permissions/{quoted}/{user}", {"configure": ".*", "write": ".*", "read": ".*"}
        )
        return self.url

    def delete(self) -> None:
        """Delete the vhost (with its queues and connections). Idempotent."""
        if not self.created:
            return
        quoted = urllib.parse.quote(self.name, safe="")
        with contextlib.suppress(BrokerUnavailableError):  # the server went away: nothing to delete
            self.api("DELETE", f"/vhosts/{quoted}")
        self.created = False

    def __enter__(self) -> RabbitVhost:
        self.create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()


class TestBrokers:
    """The brokers of one test process, made on first use; ``close()`` removes what it made."""

    __test__ = False  # not a test class, whatever pytest's collection pattern says

    def __init__(self) -> None:
        self._redis: PrivateRedis | None = None
        self._vhost: RabbitVhost | None = None
        self._lock = threading.Lock()  # test threads may ask first at the same time

    @property
    def redis_shared(self) -> bool:
        """True when the tests share the one database named by ``UJOBS_TEST_REDIS_URL``."""
        return bool(os.environ.get(REDIS_URL_ENV))

    def redis_url(self, db: int = 0) -> str:
        """A Redis database the caller may flush: ``UJOBS_TEST_REDIS_URL`` if given (whatever
        ``db`` says), else database ``db`` of this process's private server (or of its parent's,
        when this process was spawned by one that made it)."""
        given = os.environ.get(REDIS_URL_ENV)
        if given:
            return given
        with self._lock:
            server = os.environ.get(REDIS_SERVER_ENV)
            if server:
                return f"{server}/{db}"
            self._redis = PrivateRedis()
            self._redis.start()
            os.environ[REDIS_SERVER_ENV] = self._redis.base_url
            return self._redis.url(db)

    def amqp_url(self) -> str:
        """A RabbitMQ vhost the caller may fill and empty: ``UJOBS_TEST_AMQP_URL`` if given, else
        a vhost this process (or the parent that spawned it) created."""
        given = os.environ.get(AMQP_URL_ENV)
        if given:
            return given
        with self._lock:
            made = os.environ.get(AMQP_VHOST_URL_ENV)
            if made:
                return made
            self._vhost = RabbitVhost()
            url = self._vhost.create()
            os.environ[AMQP_VHOST_URL_ENV] = url
            return url

    def close(self) -> None:
        """Stop the private Redis and delete the vhost this process made (nothing else)."""
        if self._redis is not None:
            self._redis.stop()
            if os.environ.get(REDIS_SERVER_ENV) == self._redis.base_url:
                del os.environ[REDIS_SERVER_ENV]
            self._redis = None
        if self._vhost is not None:
            url = self._vhost.url
            self._vhost.delete()
            if os.environ.get(AMQP_VHOST_URL_ENV) == url:
                del os.environ[AMQP_VHOST_URL_ENV]
            self._vhost = None


BROKERS = TestBrokers()
atexit.register(BROKERS.close)  # a process that exits without its test runner's teardown


def redis_url(db: int = 0) -> str:
    """``BROKERS.redis_url(db)``: this process's Redis database ``db`` (see ``TestBrokers``)."""
    return BROKERS.redis_url(db)


def amqp_url() -> str:
    """``BROKERS.amqp_url()``: this process's RabbitMQ vhost (see ``TestBrokers``)."""
    return BROKERS.amqp_url()

"""``--all-queues`` on RabbitMQ: list the vhost's queues through the management HTTP API.

Why it exists: AMQP itself cannot list queues, so "every queue the broker knows" needs the
management plugin (``rabbitmq-plugins enable rabbitmq_management``), the same API Flower and
``rabbitmqadmin`` read. The API's address defaults to the broker's host on port 15672 with the
broker URL's credentials and vhost; ``--management-url`` names another. Queues that are not
work queues are left out: Celery's event and remote-control queues (``celeryev.*``,
``*.pidbox``), RabbitMQ's own (``amq.*``), and the ``celery_delayed_*`` queues, which the AMQP
source already reads as delayed deliveries of the queues it drains.

When the API cannot be reached, or refuses the credentials, discovery fails with
``UJ_BROKER_DISCOVERY_FAILED`` and a hint (enable the plugin, pass ``--management-url``, or name
the queues with ``-Q``): draining a silently shorter list than the user asked for would leave
work behind. Passwords never appear in a message.

What it is not: a RabbitMQ admin client. It makes one GET and reads queue names.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from urllib.parse import quote, unquote, urlsplit

from ujobs_bridge.errors import ErrorCode, UjobsError
from ujobs_bridge.ext.database import mask_dsn

MANAGEMENT_PORT = 15672
TIMEOUT_S = 10.0
_NOT_WORK = re.compile(r"^(?:celeryev\..*|.*\.pidbox|amq\..*|celery_delayed_\d+)$")


def management_url_for(broker_url: str) -> str:
    """The management API base URL for ``broker_url``: same host and credentials, port 15672,
    ``https`` when the broker URL is ``amqps``."""
    parts = urlsplit(broker_url)
    scheme = "https" if parts.scheme.lower() == "amqps" else "http"
    user = parts.username if parts.username is not None else "guest"
    password = parts.password if parts.password is not None else "guest"
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    auth = f"{quote(unquote(user), safe='')}:{quote(unquote(password), safe='')}"
    return f"{scheme}://{auth}@{host}:{MANAGEMENT_PORT}"


def vhost_of(broker_url: str) -> str:
    """The vhost a kombu AMQP URL names: the path after the first ``/`` (``//`` → ``/``)."""
    path = urlsplit(broker_url).path
    vhost = unquote(path[1:]) if path.startswith("/") else unquote(path)
    return vhost or "/"


def is_work_queue(name: str) -> bool:
    return not _NOT_WORK.match(name)


def discover_queues(broker_url: str, management_url: str | None = None) -> list[str]:
    """Every work queue of the broker URL's vhost, sorted; raises ``UjobsError`` with a hint
    when the management API cannot answer."""
    base = (management_url or management_url_for(broker_url)).rstrip("/")
    parts = urlsplit(base)
    vhost = vhost_of(broker_url)
    if parts.scheme not in ("http", "https"):
        raise UjobsError(
            f"--management-url {mask_dsn(base)} is not an http(s) URL",
            hint="pass the management API's base URL, e.g. http://user:password@host:15672",
            code=ErrorCode.BROKER_DISCOVERY_FAILED,
        )
    endpoint = f"{parts.scheme}://{parts.hostname}"
    if parts.port:
        endpoint += f":{parts.port}"
    endpoint += f"{parts.path}/api/queues/{quote(vhost, safe='')}?columns=name"
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
        endpoint, headers={"Accept": "application/json"}
    )
    if parts.username is not None:
        user = unquote(parts.username)
        password = unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    shown = mask_dsn(base)
    hint = (
        "enable RabbitMQ's management plugin (`rabbitmq-plugins enable rabbitmq_management`) "
        "or pass --management-url URL; or name the queues with -Q q1,q2 instead of --all-queues"
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 - checked above
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise UjobsError(
            f"--all-queues: the RabbitMQ management API at {shown} answered {exc.code} "
            f"for vhost {vhost!r}",
            hint="check the credentials and that the user may read the vhost; " + hint,
            code=ErrorCode.BROKER_DISCOVERY_FAILED,
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UjobsError(
            f"--all-queues: RabbitMQ cannot list queues over AMQP and its management API at "
            f"{shown} did not answer ({reason})",
            hint=hint,
            code=ErrorCode.BROKER_DISCOVERY_FAILED,
        ) from None
    try:
        rows = json.loads(body)
        names = [str(row["name"]) for row in rows]
    except (ValueError, TypeError, KeyError) as exc:
        raise UjobsError(
            f"--all-queues: the management API at {shown} did not return a queue list ({exc})",
            hint=hint,
            code=ErrorCode.BROKER_DISCOVERY_FAILED,
        ) from None
    return sorted(name for name in names if is_work_queue(name))

"""``migrate --all-queues`` on RabbitMQ: queues found through the management API, in a vhost of
the test's own (so no other test's queue is ever drained), and a clear error when the API is
not there.

The management plugin is part of the RabbitMQ every machine here runs; ``.ci/run`` enables it.
Locally a broker without it skips with the command that enables it; under ``CI=true`` it fails.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import amqp
import migrate_support as ms
import pytest
from click.testing import CliRunner
from migrate_support import (
    qdsn,  # noqa: F401 - fixture
    unique,
)

from conftest import CI
from migrate.amqp_queues import is_work_queue, management_url_for, vhost_of
from ujobs_bridge._internal.cli import cli
from ujobs_bridge.testing import RabbitVhost
from ujobs_bridge.testing.brokers import BrokerUnavailableError


@pytest.fixture
def vhost() -> Iterator[RabbitVhost]:
    """A vhost of this test's own (``--all-queues`` drains every queue in it), created through the
    management API by the test kit, guest allowed, deleted afterwards."""
    made = RabbitVhost(name=f"ujb-disc-{uuid.uuid4().hex[:8]}")
    try:
        made.create()
    except BrokerUnavailableError as exc:
        reason = f"{exc.message}: {exc.hint}"
        if CI:
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield made
    finally:
        made.delete()


def _connection(vhost: RabbitVhost) -> amqp.Connection:
    return amqp.Connection(
        f"{vhost.host}:{vhost.port}",
        userid=vhost.user,
        password=vhost.password,
        virtual_host=vhost.name,
    )


def _ready(vhost: RabbitVhost, queue: str) -> int:
    conn = _connection(vhost)
    conn.connect()
    try:
        return int(conn.channel().queue_declare(queue, passive=True).message_count)
    finally:
        conn.close()


def test_all_queues_on_rabbitmq_drains_every_work_queue_the_management_api_lists(
    qdsn: str,
    vhost: RabbitVhost,
) -> None:
    url = vhost.url
    first, second = unique("disc-a"), unique("disc-b")  # neither is known to the -A app
    with ms.producer(url, first) as p:
        for i in range(5):
            p.add.delay(i, 1)
        for i in range(3):
            p.mul.apply_async((i, 2), queue=second)
    # Celery's remote-control reply queue is not work: it must be left alone.
    conn = _connection(vhost)
    conn.connect()
    pidbox = f"{uuid.uuid4()}.reply.celery.pidbox"
    channel = conn.channel()
    channel.queue_declare(pidbox, durable=False, auto_delete=False)
    channel.basic_publish(amqp.Message(b"{}"), exchange="", routing_key=pidbox)
    conn.close()

    stats = ms.drain(qdsn, url, None, all_queues=True)

    assert sorted(stats.queues) == sorted([first, second])
    moved = ms.rows(qdsn)
    assert sorted(r["queue"] for r in moved) == sorted([first] * 5 + [second] * 3)
    assert len({r["task_id"] for r in moved}) == 8  # each message once
    assert _ready(vhost, first) == 0 and _ready(vhost, second) == 0
    assert _ready(vhost, pidbox) == 1  # untouched


def test_all_queues_without_the_management_api_fails_naming_the_fixes_and_hides_the_password(
    qdsn: str,
) -> None:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        cli,
        [
            "migrate",
            "-A",
            "apps.migrate_proj",
            "--broker",
            "amqp://guest:s3cret-pw@127.0.0.1:9//",  # nothing listens: no vhost is touched
            "--all-queues",
            "--management-url",
            "http://guest:s3cret-pw@127.0.0.1:9/",
            "--dsn",
            qdsn,
        ],
    )
    assert result.exit_code == 1, result.output
    assert "UJ_BROKER_DISCOVERY_FAILED" in result.output
    assert "rabbitmq-plugins enable rabbitmq_management" in result.output
    assert "-Q" in result.output
    assert "s3cret-pw" not in result.output
    assert ms.rows(qdsn) == []  # nothing was drained


def test_management_url_and_vhost_follow_the_broker_url() -> None:
    assert management_url_for("amqp://u:p%40ss@rabbit.local:5672/prod") == (
        "http://u:p%40ss@rabbit.local:15672"
    )
    assert management_url_for("amqps://rabbit.local//").startswith("https://guest:guest@")
    assert vhost_of("amqp://guest:guest@127.0.0.1:5672//") == "/"
    assert vhost_of("amqp://h:5672") == "/"
    assert vhost_of("amqp://h/prod%2Feu") == "prod/eu"
    assert [
        q
        for q in ["celery", "celeryev.1f", "x.reply.celery.pidbox", "amq.gen-1", "celery_delayed_3"]
        if is_work_queue(q)
    ] == ["celery"]

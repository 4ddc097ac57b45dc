"""The test kit's brokers (``ujobs_bridge.testing.brokers``): a ``PrivateRedis`` is a real
``redis-server`` of its own that ``stop()`` ends and cleans up; a ``RabbitVhost`` is created,
usable by its user, and deleted; ``TestBrokers`` takes the given ``UJOBS_TEST_*_URL`` instead of
making anything, and otherwise makes one server per process that its subprocesses share."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import amqp
import pytest
import redis

from conftest import CI
from ujobs_bridge.testing import AMQP_URL_ENV, REDIS_URL_ENV, PrivateRedis, RabbitVhost, TestBrokers
from ujobs_bridge.testing.brokers import (
    AMQP_VHOST_URL_ENV,
    REDIS_SERVER_ENV,
    BrokerUnavailableError,
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No broker given and none inherited: a ``TestBrokers`` here must make its own."""
    for name in (REDIS_URL_ENV, AMQP_URL_ENV, REDIS_SERVER_ENV, AMQP_VHOST_URL_ENV):
        monkeypatch.delenv(name, raising=False)
    yield


def test_a_private_redis_serves_its_databases_apart_and_stop_ends_it() -> None:
    server = PrivateRedis()
    server.start()
    try:
        assert server.process is not None and server.directory is not None
        directory = server.directory
        one = redis.Redis.from_url(server.url(1))
        two = redis.Redis.from_url(server.url(2))
        one.set("k", "in one")
        assert one.get("k") == b"in one" and two.get("k") is None
        assert one.config_get("save")["save"] == "" and one.config_get("appendonly") == {
            "appendonly": "no"
        }
        one.close()
        two.close()
        process = server.process
    finally:
        server.stop()
    assert process.poll() is not None  # the server is gone
    assert not directory.exists()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(server.url(1), socket_connect_timeout=2).ping()
    server.stop()  # idempotent


def test_given_urls_are_used_as_they_are_and_nothing_is_made(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REDIS_URL_ENV, "redis://127.0.0.1:1/7")
    monkeypatch.setenv(AMQP_URL_ENV, "amqp://u:p@127.0.0.1:1/mine")
    brokers = TestBrokers()
    assert brokers.redis_url(3) == brokers.redis_url(9) == "redis://127.0.0.1:1/7"
    assert brokers.amqp_url() == "amqp://u:p@127.0.0.1:1/mine"
    assert brokers.redis_shared
    assert REDIS_SERVER_ENV not in os.environ and AMQP_VHOST_URL_ENV not in os.environ
    brokers.close()  # made nothing, removes nothing


def test_one_private_server_per_process_shared_with_its_subprocesses(clean_env: None) -> None:
    brokers = TestBrokers()
    try:
        first, again = brokers.redis_url(4), brokers.redis_url(5)
        assert first.rsplit("/", 1)[0] == again.rsplit("/", 1)[0]  # one server, two databases
        assert first.endswith("/4") and again.endswith("/5")
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "from ujobs_bridge.testing import redis_url; print(redis_url(6))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert child.returncode == 0, child.stderr
        assert child.stdout.strip() == first.rsplit("/", 1)[0] + "/6"  # the parent's server
        redis.Redis.from_url(first).set("mine", "1")
    finally:
        brokers.close()
    assert REDIS_SERVER_ENV not in os.environ
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(first, socket_connect_timeout=2).ping()


def test_a_vhost_is_created_for_its_user_and_deleted() -> None:
    vhost = RabbitVhost(name=f"ujobs-kit-{uuid.uuid4().hex[:8]}")
    try:
        vhost.create()
    except BrokerUnavailableError as exc:
        if CI:
            raise
        pytest.skip(str(exc))
    try:
        names = [v["name"] for v in vhost.api("GET", "/vhosts")]  # type: ignore[union-attr]
        assert vhost.name in names
        conn = amqp.Connection(
            f"{vhost.host}:{vhost.port}",
            userid=vhost.user,
            password=vhost.password,
            virtual_host=vhost.name,
        )
        conn.connect()
        channel = conn.channel()
        channel.queue_declare("kit-probe", durable=False, auto_delete=False)
        channel.basic_publish(amqp.Message(b"x"), exchange="", routing_key="kit-probe")
        conn.close()
    finally:
        vhost.delete()
    names = [v["name"] for v in vhost.api("GET", "/vhosts")]  # type: ignore[union-attr]
    assert vhost.name not in names
    vhost.delete()  # idempotent

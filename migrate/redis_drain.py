"""Drain kombu's Redis transport: every queue list and its priority sub-lists, crash-safe.

Why it exists: kombu's own ``basic_get`` is ``RPOP`` then ``HSET unacked``; a crash between the
two loses the message. The drainer never holds a message that Redis does not also hold:

1. a Lua script ``LMOVE``\\ s up to a batch of the OLDEST messages (right end) from the queue's
   lists, base list first and then each priority sub-list ``<queue><sep><step>`` in kombu's
   consumption order, onto a processing list of this drainer that holds that batch and
   nothing else (``<prefix>_ujobs.migrate<sep><drainer id><sep><queue><sep><run>.<n>``);
2. the batch is inserted and COMMITTED (``batch.commit_prepared``);
3. only then is the batch's processing list deleted: one ``DEL``, no message sent back.

Every list is owned by one run of a drainer: batch lists carry the run's token
(``<run>.<n>``), and a run is alive while its Redis connection is (its name, ``ujobs-migrate:
<drainer id>#<run>``, is in ``CLIENT LIST``) and its liveness key is there (``_ujobs.migrate.alive
<sep><drainer id><sep><run>``, refreshed as it works, removed when it stops). A drainer that
starts adopts (moves onto a list of its own run, ``<run>.adopted``) only the lists of runs that
are gone: killed (its connection closed with the process), stopped, or silent past the key's
time to live; then it finishes them (the ledger absorbs whatever was committed before the crash;
a recovered message is ``LREM``\\ ed from its list after its commit). So two drainers on one
Redis, even with the same id (the default is the host name), never take each other's batches
while both live. Where ``CLIENT LIST`` is refused (a managed Redis), the key alone decides.
``global_keyprefix``, ``sep`` and ``priority_steps`` come from the app's
``broker_transport_options``. kombu's ``unacked`` hash belongs to live Celery workers and is left
alone unless ``--restore-unacked`` (only with every Celery worker stopped): then its entries are
inserted, committed, and only then deleted from ``unacked``/``unacked_index``.

What it is not: a kombu consumer (nothing here registers with kombu or acks through it).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from migrate.appinfo import PIDBOX_SUFFIXES, AppInfo
from migrate.batch import Taken

DEFAULT_SEP = "\x06\x16"
DEFAULT_STEPS = (0, 3, 6, 9)
HEARTBEAT_S = 60
MAX_BATCH_BYTES = 64 * 1024 * 1024

# KEYS[1] = processing list, KEYS[2..] = source lists in order; ARGV = max count, max bytes.
# Each LMOVE is atomic; the script as a whole is too. Always moves at least one if any exists.
_MOVE = """
local out = {}
local n = tonumber(ARGV[1])
local budget = tonumber(ARGV[2])
local used = 0
for i = 2, #KEYS do
  while #out < n and used < budget do
    local v = redis.call('LMOVE', KEYS[i], KEYS[1], 'RIGHT', 'LEFT')
    if not v then break end
    out[#out + 1] = v
    used = used + string.len(v)
  end
  if #out >= n or used >= budget then break end
end
return out
"""
# KEYS[1] = processing list; ARGV = the messages to remove (each once, oldest end first).
_REMOVE = """
for i = 1, #ARGV do redis.call('LREM', KEYS[1], -1, ARGV[i]) end
return #ARGV
"""
# KEYS[1] = from, KEYS[2] = to: move everything, order kept (oldest stays at the right end).
_ADOPT = """
local moved = 0
while redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT') do moved = moved + 1 end
return moved
"""


def client_name(drainer_id: str, run: str = "") -> str:
    """The Redis connection's name for one run of a drainer (CLIENT LIST, CLIENT KILL): no
    spaces or control characters; ``ujobs-migrate:<drainer id>#<run>`` (without ``run``: the
    name a drainer from before runs had, whose lists may still be in Redis)."""
    safe = "".join(c if c.isprintable() and not c.isspace() else "_" for c in drainer_id)
    if not run:
        return f"ujobs-migrate:{safe}"[:100]
    return f"ujobs-migrate:{safe}"[: 99 - len(run)] + f"#{run}"


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class RedisSource:
    kind = "redis"
    acknowledge_anywhere = (
        True  # redis-py clients are thread-safe: the loop acknowledges off its thread
    )

    def __init__(
        self,
        url: str,
        app: AppInfo,
        queues: list[str] | None,
        *,
        drainer_id: str,
        restore_unacked: bool = False,
    ) -> None:
        opts = app.transport_options
        self.app = app
        self.prefix = str(opts.get("global_keyprefix") or "")
        self.sep = str(opts.get("sep") or DEFAULT_SEP)
        self.steps = sorted(int(s) for s in (opts.get("priority_steps") or DEFAULT_STEPS))
        self.unacked_key = self.prefix + str(opts.get("unacked_key") or "unacked")
        self.unacked_index_key = self.prefix + str(opts.get("unacked_index_key") or "unacked_index")
        self.drainer_id = drainer_id
        self.restore_unacked = restore_unacked
        self._run_id = secrets.token_hex(6)  # this run's lists and liveness (module docstring)
        # Bytes replies (no decode_responses). No retries inside redis-py: a take retried after
        # its reply was lost would move a second batch into the same list, and the DEL after
        # its commit would drop the first one unseen. A lost connection is raised instead; the
        # drain (``--follow``: outages.py) reopens and recovers this drainer's lists first.
        # The name finds this drainer in CLIENT LIST.
        self.client: Any = redis.Redis.from_url(
            url,
            retry=Retry(NoBackoff(), 0),
            client_name=client_name(drainer_id, self._run_id),
        )
        self.client.ping()
        self._move = self.client.register_script(_MOVE)
        self._adopt = self.client.register_script(_ADOPT)
        self._remove = self.client.register_script(_REMOVE)
        self._base = f"{self.prefix}_ujobs.migrate{self.sep}"
        self._batches = 0
        self.queues = list(queues) if queues is not None else self.discover()
        self._turn = 0
        self._recovering: list[str] | None = None
        self._unacked_cursor: int | None = 0 if restore_unacked else None
        self._bindings: dict[str, list[tuple[str, str]]] = {}
        self._beaten = 0.0  # monotonic: when the liveness key was last set
        self.beat()

    # -- layout -------------------------------------------------------------------------------

    def keys_of(self, queue: str) -> list[str]:
        """The queue's lists in kombu's consumption order: base, then each priority step."""
        base = self.prefix + queue
        return [base] + [f"{base}{self.sep}{step}" for step in self.steps if step]

    def processing_key(self, queue: str, drainer_id: str | None = None) -> str:
        return f"{self._base}{drainer_id or self.drainer_id}{self.sep}{queue}"

    def batch_key(self, queue: str) -> str:
        """A new processing list for one batch of ``queue``: holding that batch alone, it can
        be let go with one ``DEL`` once the batch is committed."""
        self._batches += 1
        return f"{self.processing_key(queue)}{self.sep}{self._run_id}.{self._batches}"

    def _owner_and_queue(self, key: str) -> tuple[str, str]:
        """(drainer id, queue) of a processing list (a batch's or an adopting one)."""
        drainer, _, rest = key[len(self._base) :].partition(self.sep)
        return drainer, rest.partition(self.sep)[0]

    def _run_of(self, key: str) -> str:
        """The run that owns a processing list ("": a list from before runs)."""
        rest = key[len(self._base) :].partition(self.sep)[2]
        return rest.partition(self.sep)[2].partition(".")[0]

    def heartbeat_key(self, drainer_id: str, run: str = "") -> str:
        """The liveness key of one run of a drainer (without ``run``: from before runs)."""
        key = f"{self.prefix}_ujobs.migrate.alive{self.sep}{drainer_id}"
        return f"{key}{self.sep}{run}" if run else key

    def beat(self) -> None:
        self.client.set(self.heartbeat_key(self.drainer_id, self._run_id), "1", ex=HEARTBEAT_S)
        self._beaten = time.monotonic()

    def _beat_if_due(self) -> None:
        if time.monotonic() - self._beaten > HEARTBEAT_S / 4:
            self.beat()

    def _clients(self) -> set[str] | None:
        """The names of the connections to this Redis now; None where CLIENT LIST is refused
        (ACLs, a managed Redis that renames it)."""
        try:
            listed = self.client.client_list()
        except redis.ResponseError:
            return None
        return {_text(c.get("name") or "") for c in listed}

    def _gone(self, drainer: str, run: str, clients: set[str] | None) -> bool:
        """Is this run of a drainer gone (its lists may be adopted)? Its liveness key expired
        or was removed as it stopped, or no connection of it is open (it was killed)."""
        if not self.client.exists(self.heartbeat_key(drainer, run)):
            return True
        return clients is not None and client_name(drainer, run) not in clients

    def _binding_sets(self) -> Iterator[tuple[str, str]]:
        pattern = _glob_escape(self.prefix + "_kombu.binding.") + "*"
        for key in self.client.scan_iter(match=pattern, count=500):
            exchange = _text(key)[len(self.prefix) + len("_kombu.binding.") :]
            for member in self.client.smembers(key):
                parts = _text(member).split(self.sep)
                if len(parts) == 3:
                    yield exchange, parts[2]

    def discover(self) -> list[str]:
        """Every queue a kombu binding names (``_kombu.binding.*``), plus the app's queues."""
        found: dict[str, None] = dict.fromkeys(self.app.queues)
        for exchange, queue in self._binding_sets():
            if exchange in ("celeryev", "celery.pidbox", "reply.celery.pidbox"):
                continue
            if queue.startswith("celeryev") or queue.endswith(PIDBOX_SUFFIXES):
                continue
            found[queue] = None
        return sorted(found)

    # -- drain --------------------------------------------------------------------------------

    def _own_processing(self) -> list[str]:
        """This run's lists to finish first: those it adopts now from runs that are gone (a
        live run's lists, whatever its drainer id, are left to it)."""
        pattern = _glob_escape(self._base) + "*"
        clients = self._clients()
        own, stale = [], []
        for raw in self.client.scan_iter(match=pattern, count=500):
            key = _text(raw)
            drainer, queue = self._owner_and_queue(key)
            run = self._run_of(key)
            if drainer == self.drainer_id and run == self._run_id:
                own.append(key)
            elif self._gone(drainer, run, clients):
                stale.append((key, queue))
        for key, queue in stale:  # a run that is gone: its lists become this run's
            target = f"{self.processing_key(queue)}{self.sep}{self._run_id}.adopted"
            self._adopt(keys=[key, target])
            own.append(target)
        return sorted(set(own))

    def recover(self, n: int) -> list[Taken]:
        """Messages an earlier run took but may not have committed: oldest first."""
        if self._recovering is None:
            self._recovering = self._own_processing()
        out: list[Taken] = []
        for key in list(self._recovering):
            queue = self._owner_and_queue(key)[1]
            items = self.client.lrange(key, -(n - len(out)), -1)
            if not items:
                self._recovering.remove(key)
                continue
            out.extend(Taken(bytes(raw), "redis", queue, token=key) for raw in reversed(items))
            if len(out) >= n:
                break
        return out

    def take(self, n: int) -> list[Taken]:
        self._beat_if_due()  # a follower with nothing to take stays alive too
        out: list[Taken] = []
        if self._unacked_cursor is not None:
            out.extend(self._take_unacked(n))
            if out:
                return out
        count = len(self.queues)
        for i in range(count):
            queue = self.queues[(self._turn + i) % count]
            key = self.batch_key(queue)
            moved = self._move(
                keys=[key, *self.keys_of(queue)], args=[n - len(out), MAX_BATCH_BYTES]
            )
            token = ("batch", key)
            out.extend(Taken(bytes(raw), "redis", queue, token=token) for raw in moved)
            if len(out) >= n:
                break
        self._turn += 1
        return out

    def acknowledge(self, items: list[Taken]) -> None:
        """After commit: remove each message from wherever this drainer held it (a batch's own
        list goes as a whole)."""
        by_list: dict[str, list[bytes]] = {}
        batches: set[str] = set()
        with self.client.pipeline(transaction=False) as pipe:
            for t in items:
                if not isinstance(t.token, tuple):  # a recovered message: its list's key
                    by_list.setdefault(t.token, []).append(t.raw)
                elif t.token[0] == "batch":
                    batches.add(t.token[1])
                else:  # ("unacked", tag)
                    pipe.hdel(self.unacked_key, t.token[1])
                    pipe.zrem(self.unacked_index_key, t.token[1])
            if batches:
                pipe.delete(*sorted(batches))
            for key, raws in by_list.items():  # one script call per list, not one LREM each
                self._remove(keys=[key], args=raws, client=pipe)
            pipe.set(self.heartbeat_key(self.drainer_id, self._run_id), "1", ex=HEARTBEAT_S)
            pipe.execute()
        self._beaten = time.monotonic()

    def remaining(self) -> int:
        with self.client.pipeline(transaction=False) as pipe:
            for queue in self.queues:
                for key in self.keys_of(queue):
                    pipe.llen(key)
            if self._unacked_cursor is not None:
                pipe.hlen(self.unacked_key)
            return int(sum(pipe.execute()))

    def idle(self, timeout: float) -> None:
        """Nothing to take: the runner waits (Redis has no cheap multi-list wake-up)."""

    def close(self) -> None:
        """Say this drainer is gone (its lists may then be adopted) and disconnect; with Redis
        unreachable, just disconnect (the heartbeat key expires by itself)."""
        with contextlib.suppress(redis.RedisError):
            self.client.delete(self.heartbeat_key(self.drainer_id, self._run_id))
        self.client.close()

    # -- unacked (only with --restore-unacked) ------------------------------------------------

    def _queue_for(self, exchange: str, routing_key: str) -> str:
        if exchange not in self._bindings:
            members = self.client.smembers(f"{self.prefix}_kombu.binding.{exchange}")
            table = [tuple(_text(m).split(self.sep)) for m in members]
            self._bindings[exchange] = [(t[0], t[2]) for t in table if len(t) == 3]
        for key, queue in self._bindings[exchange]:
            if key == routing_key:
                return queue
        return routing_key or exchange

    def _unacked_item(self, tag: bytes, value: bytes) -> Taken | None:
        try:
            envelope, exchange, routing_key = json.loads(value)
            queue = self._queue_for(str(exchange or ""), str(routing_key or ""))
            raw = json.dumps(envelope).encode("utf-8")
        except (ValueError, TypeError):
            return Taken(bytes(value), "redis", "unacked", token=("unacked", tag))
        if queue not in self.queues:
            return None
        return Taken(raw, "redis", queue, token=("unacked", tag))

    def _take_unacked(self, n: int) -> list[Taken]:
        out: list[Taken] = []
        while self._unacked_cursor is not None and len(out) < n:
            cursor, chunk = self.client.hscan(self.unacked_key, self._unacked_cursor, count=n)
            self._unacked_cursor = None if cursor == 0 else cursor
            for tag, value in chunk.items():
                item = self._unacked_item(tag, value)
                if item is not None:
                    out.append(item)
        return out

    # -- dry run ------------------------------------------------------------------------------

    def peek(self, chunk: int = 1000) -> Iterator[Taken]:
        """Every waiting message, oldest first, read with LRANGE: the broker is not changed."""
        if self.restore_unacked:
            for tag, value in self.client.hscan_iter(self.unacked_key, count=chunk):
                item = self._unacked_item(tag, value)
                if item is not None:
                    yield item
        for queue in self.queues:
            for key in self.keys_of(queue):
                end = -1
                while True:
                    items = self.client.lrange(key, end - chunk + 1, end)
                    for raw in reversed(items):
                        yield Taken(bytes(raw), "redis", queue)
                    if len(items) < chunk:
                        break
                    end -= chunk

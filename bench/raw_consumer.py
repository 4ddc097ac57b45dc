"""The raw ceiling's consumer process: a bare psycopg ``FOR UPDATE SKIP LOCKED`` loop.

Why it exists: to know how fast a Postgres job queue can possibly go on this machine, with no
library in the way. Each cycle is two transactions: claim up to ``k`` ready rows in one
statement (commit), then mark them done in a second statement (commit). Bodies do nothing.

    python -m bench.raw_consumer --dsn DSN --k 10
    python -m bench.raw_consumer --dsn DSN --k 1 --listen --redis-url URL --latency-key KEY

With ``--listen`` it sleeps on LISTEN (its own connection) and claims when notified (polling every
0.5 s as a floor); it takes ``time.time()`` as soon as the claim returns a row and RPUSHes
``"<sent> <now>"`` to Redis, so the consumer measures its own pick-up latency.

What it is not: a job system. No leases, retries, payload decoding or crash recovery; it is the
floor under every real design, not a competitor.
"""

from __future__ import annotations

import argparse
import time

import psycopg

CLAIM = """
with picked as (
    select id from raw_jobs
     where queue = 'bench' and state = 'ready'
     order by id
     limit %(k)s
     for update skip locked
)
update raw_jobs j
   set state = 'running', attempts = j.attempts + 1, claimed_at = now()
  from picked
 where j.id = picked.id
returning j.id, j.payload, j.sent
"""
DONE = "update raw_jobs set state = 'done', finished_at = now() where id = any(%s)"
CHANNEL = "raw_bench"
IDLE_SLEEP_S = 0.005


def drain_forever(dsn: str, k: int) -> None:
    with psycopg.connect(dsn) as conn:
        params = {"k": k}
        while True:
            rows = conn.execute(CLAIM, params).fetchall()
            conn.commit()
            if not rows:
                time.sleep(IDLE_SLEEP_S)
                continue
            conn.execute(DONE, ([r[0] for r in rows],))
            conn.commit()


def listen_forever(dsn: str, k: int, redis_url: str, key: str) -> None:
    import redis

    sink = redis.Redis.from_url(redis_url, socket_timeout=10)
    with (
        psycopg.connect(dsn, autocommit=True) as listener,
        psycopg.connect(dsn) as conn,
    ):
        listener.execute(f"listen {CHANNEL}")
        params = {"k": k}
        while True:
            for _ in listener.notifies(timeout=0.5, stop_after=1):
                break
            while True:
                rows = conn.execute(CLAIM, params).fetchall()
                conn.commit()
                now = time.time()
                if not rows:
                    break
                for _id, _payload, sent in rows:
                    sink.rpush(key, f"{sent!r} {now!r}")
                conn.execute(DONE, ([r[0] for r in rows],))
                conn.commit()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.raw_consumer")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--k", type=int, default=1)
    parser.add_argument("--listen", action="store_true")
    parser.add_argument("--redis-url")
    parser.add_argument("--latency-key")
    args = parser.parse_args()
    if args.listen:
        listen_forever(args.dsn, args.k, args.redis_url, args.latency_key)
    else:
        drain_forever(args.dsn, args.k)


if __name__ == "__main__":
    main()

-- Connection-level statements: LISTEN channels, commit modes, the database's clock, embedded setup.
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever job logic compares time.

-- database_exists --
select 1 from pg_database where datname = %(name)s

-- database_create_ujobs --
create database ujobs

-- listen_ready --
listen x_jobs_ready

-- listen_cancel --
listen x_jobs_cancel

-- listen_wake --
-- A worker's own channel (0025: an insert notifies one waiting worker on the channel its mark
-- names); the name is passed as an identifier.
listen {channel}

-- hand_off_lock --
-- The listen session of a worker armed for hand-offs holds its lock key (advisory lock class
-- 1970958178, 0027's x_jobs_arrive) for as long as it lives: a sender hands a job only to a
-- worker whose key it cannot take, so a worker whose session is gone (killed, disconnected) is
-- never handed one. Answers whether it was taken (another session of the same key: not taken).
select pg_try_advisory_lock(1970958178, %(lock_key)s::int)

-- session_claims_async --
-- The worker's claim connection commits claims without waiting for the WAL flush: a claim lost
-- in a server crash only leaves the job ready again (a re-run the at-least-once contract covers),
-- and any later synchronous commit (an outcome) flushes it anyway, since WAL is sequential.
set synchronous_commit = off

-- tx_claims_async --
-- The same, for one transaction: behind PgBouncer (transaction pooling) a session setting would
-- stay on a server session other clients then use.
set local synchronous_commit = off

-- tx_claim_plans --
-- The plans of the claim and the settle, for this transaction: index scans, never a sequential
-- or bitmap scan. Every statement of these transactions reaches its rows by key or walks the
-- claim index in claim order, and must do so whatever the statistics say. Why: a queue at rest
-- when its claim table was last analyzed holds nothing as far as the planner knows; when a
-- burst arrives it estimates a row or two, so it reads every ready job of the queue by bitmap
-- and sorts them on each claim (the ordered index scan stops after the batch), until autovacuum
-- analyzes the table again, up to a minute later: each claim of a burst of N jobs read all N
-- (`tests/integration/test_claim_plans.py`; the bench's drain cells show the rate).
select set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)

-- tx_outcomes_durable --
set local synchronous_commit = on

-- tx_idle_limit --
-- The server ends this transaction if it is left idle longer than %(ms)s milliseconds (a paused
-- process must not hold row locks forever); per transaction, so it also holds behind PgBouncer.
select set_config('idle_in_transaction_session_timeout', %(ms)s, true)

-- database_now --
-- The database's clock, read once where a pass must compare against instants it wrote.
select now()

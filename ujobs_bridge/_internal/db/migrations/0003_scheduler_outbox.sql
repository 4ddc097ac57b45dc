-- 0003_scheduler_outbox: the scheduler's leader lease and watermarks, the fire ledger that makes
-- a double fire impossible, and the transactional outbox.

-- One row per scheduler group: an expiring lease renewed by holder AND term. Expiry is always
-- compared with the database's now(), so a scheduler with a fast clock cannot take a live lease.
create table x_scheduler_leader (
    name        text primary key,
    holder      text not null,
    term        bigint not null,
    elected_at  timestamptz not null,
    expires_at  timestamptz not null
);

-- The durable watermark per task: every occurrence at or before it has been dealt with.
create table x_scheduler_state (
    task        text primary key,
    watermark   timestamptz not null,
    updated_at  timestamptz not null default now()
);

-- The guarantee against double fire: one row per (task, occurrence instant), inserted in the
-- same transaction as the jobs it enqueues. Leadership is an optimisation; this key is the rule.
create table x_scheduler_fires (
    task           text not null,
    occurrence_at  timestamptz not null,
    catch_up       boolean not null,
    job_ids        uuid[] not null,
    fired_at       timestamptz not null default now(),
    primary key (task, occurrence_at)
);

-- Jobs staged inside a caller's transaction, published by the relay in order. `txid` lets the
-- relay wait until every transaction that could still commit an earlier row has finished.
create table x_outbox (
    id               bigint generated always as identity primary key,
    txid             xid8 not null default pg_current_xact_id(),
    job_id           uuid not null,
    name             text not null,
    queue            text not null,
    input            jsonb not null,
    idempotency_key  text,
    max_attempts     integer not null,
    priority         smallint not null default 0,
    run_at           timestamptz,
    delay_s          double precision not null default 0,
    expires_at       timestamptz,
    expires_in_s     double precision,
    tenant_id        text,
    traceparent      text,
    enqueued_by      text,
    created_at       timestamptz not null default now(),
    published_at     timestamptz
);

create index x_outbox_pending_idx on x_outbox (id) where published_at is null;

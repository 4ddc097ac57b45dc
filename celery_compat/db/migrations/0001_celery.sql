-- 0001_celery: what celery_compat needs beside x_jobs.
-- Forward-only. Part `celery_compat` of the schema (ujobs_bridge/_internal/db/schema.py applies it after the
-- engine's, in the same locked transaction). Until the split this was the engine's
-- 0004_celery; a database that applied that one adopts this one (recorded, not run again).

-- One row per Celery message ever enqueued: (task id, retries, replaced-task nesting) is the
-- message's identity (a Celery retry of the same id is a new message). The ledger is permanent
-- until the retention sweep, unlike x_jobs' live-only idempotency key, so a message enqueued
-- twice (a crashed body re-running its retry, a re-drained broker message) is one job. It also
-- answers "which job rows belong to task id X" for revoke and AsyncResult.
create table x_celery_tasks (
    task_id     text not null,
    retries     integer not null default 0,
    nesting     integer not null default 0,
    job_id      uuid not null,
    created_at  timestamptz not null default now(),
    primary key (task_id, retries, nesting)
);
create index x_celery_tasks_created_idx on x_celery_tasks (created_at);

-- Celery's key/value result store (task meta, group meta): the value is the serialized meta
-- Celery's own backend code writes. A write notifies `x_celery_results` with the key, so
-- AsyncResult.get() wakes on completion instead of polling.
create table x_celery_results (
    key         text primary key,
    value       text not null,
    expires_at  timestamptz,
    updated_at  timestamptz not null default now()
);
create index x_celery_results_expires_idx on x_celery_results (expires_at) where expires_at is not null;

-- Chord counters: one row per chord, incremented atomically; each header part counts once
-- (x_celery_chord_parts is the dedup by child id, so a redelivered part cannot fire the body).
create table x_celery_counters (
    key         text primary key,
    value       bigint not null,
    expires_at  timestamptz
);
create table x_celery_chord_parts (
    key         text not null,
    task_id     text not null,
    created_at  timestamptz not null default now(),
    primary key (key, task_id)
);

-- Revoked task ids: durable, unlike Celery's in-memory revoke list. A message enqueued for a
-- revoked id is born cancelled.
create table x_celery_revoked (
    task_id     text primary key,
    terminate   boolean not null default false,
    created_at  timestamptz not null default now()
);

-- 0001_initial: the job table and the schema version ledger.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

create table x_jobs (
    id                uuid primary key,
    name              text not null,
    queue             text not null default 'default',
    input             jsonb not null default '{}'::jsonb,
    output            jsonb,
    idempotency_key   text,
    attempt           integer not null default 0,
    max_attempts      integer not null default 3 check (max_attempts >= 1),
    state             text not null default 'ready'
                      check (state in ('ready', 'running', 'sleeping', 'waiting', 'done', 'dead', 'cancelled')),
    priority          smallint not null default 0,
    run_at            timestamptz not null default now(),
    lease_expires_at  timestamptz,
    lease_token       uuid,
    claimed_by        text,
    expires_at        timestamptz,
    last_error        text,
    tenant_id         text,
    traceparent       text,
    enqueued_by       text,
    created_at        timestamptz not null default now(),
    updated_at        timestamptz not null default now(),
    finished_at       timestamptz
);

-- The claim: ready rows of ONE queue (equality keeps the index order: no sort), highest
-- priority first, then oldest due.
create index x_jobs_claim_idx on x_jobs (queue, priority desc, run_at, id) where state = 'ready';

-- One LIVE job per idempotency key; a finished job frees its key.
create unique index x_jobs_idempotency_live_idx on x_jobs (idempotency_key)
    where idempotency_key is not null and state in ('ready', 'running', 'sleeping', 'waiting');

-- The rescue sweep: running rows whose lease has run out.
create index x_jobs_lease_idx on x_jobs (lease_expires_at) where state = 'running';

-- Operator reads of dead letters. Partial on purpose: every index on x_jobs costs an insert on
-- each state change (a state change is never a HOT update), so the hot path keeps only four.
create index x_jobs_dead_idx on x_jobs (updated_at desc) where state = 'dead';

-- Wake idle workers when rows arrive. One notification per queue per statement, sent at commit,
-- so a job enqueued inside a caller's transaction wakes nobody until that transaction commits.
create function x_jobs_notify_insert() returns trigger language plpgsql as $fn$
begin
    perform pg_notify('x_jobs_ready', q.queue) from (select distinct queue from new_rows) as q;
    return null;
end
$fn$;

create trigger x_jobs_notify_insert_trg after insert on x_jobs
    referencing new table as new_rows
    for each statement execute function x_jobs_notify_insert();

-- 0002_steps_events: durable steps, events for wait_for_event, and suspended jobs in the claim.

-- One row per (run, step name). `ordinal` is the step's position in the run: replay compares the
-- name recorded at each position to catch bodies whose step names changed (non-determinism).
create table x_job_steps (
    run_id           uuid not null references x_jobs (id) on delete cascade,
    name             text not null,
    ordinal          integer not null,
    status           text not null check (status in ('completed', 'failed', 'sleeping', 'waiting')),
    output           jsonb,
    attempts         integer not null default 0,
    error            text,
    job_attempt      integer not null,
    started_at       timestamptz not null default now(),
    completed_at     timestamptz,
    wake_at          timestamptz,
    event            text,
    correlation_key  text,
    primary key (run_id, name)
);

create unique index x_job_steps_ordinal_idx on x_job_steps (run_id, ordinal);

-- Waiting steps by what they wait for: send_event finds the jobs to wake with it.
create index x_job_steps_waiting_idx on x_job_steps (event, correlation_key) where status = 'waiting';

-- Events, kept for a retention window so an event sent BEFORE the wait is registered is not
-- missed. `consumed_by` + `consumed_step` make a consume idempotent for the (run, step) that took it.
create table x_job_events (
    id               bigint generated always as identity primary key,
    event            text not null,
    correlation_key  text not null,
    payload          jsonb,
    created_at       timestamptz not null default now(),
    consumed_by      uuid,
    consumed_step    text,
    consumed_at      timestamptz
);

create index x_job_events_open_idx on x_job_events (event, correlation_key, id) where consumed_by is null;
create unique index x_job_events_consumer_idx on x_job_events (consumed_by, consumed_step) where consumed_by is not null;

-- Suspended jobs (sleeping until run_at, waiting for an event or its timeout) are claimed like
-- ready ones once due: the claim index now covers the three states.
drop index x_jobs_claim_idx;
create index x_jobs_claim_idx on x_jobs (queue, priority desc, run_at, id)
    where state in ('ready', 'sleeping', 'waiting');

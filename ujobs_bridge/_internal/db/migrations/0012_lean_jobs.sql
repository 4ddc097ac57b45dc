-- 0012_lean_jobs: x_jobs stays lean under a steady flow of jobs.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Room on each page for the settle's HOT version, and vacuum by row count, not by a share of
-- the table: a queue table's live rows are few and its churn is all of its writes, so the
-- default 20% of the table means "almost never" while the claim index fills with dead entries.
-- No cost delay: these vacuums are small and frequent. (autovacuum_naptime is server-wide: see
-- the README's "Table health".) Set first: adding the stored columns below rewrites the table,
-- and the rewrite then leaves that room on every page already.
alter table x_jobs set (
    fillfactor = 30,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- Why: an update is HOT (the new row version on the same page, no new entry in any index, the
-- old one pruned by the next reader without VACUUM) only when no column any index names (key,
-- INCLUDE or partial predicate) changes. Every x_jobs index named `state` or a lease column, so
-- the claim, the settle and every heartbeat wrote a new entry into every index (the pkey too),
-- and the claim index filled with dead entries between two vacuums.
--
-- Now the indexes name only columns that change when a row ENTERS or LEAVES that index's set:
--   claimable  the claim's set (ready, sleeping, waiting): the claim leaves it (never HOT), a
--              retry, a suspension or a rescue re-enters it; the settle of a finished job and
--              every heartbeat change no indexed column, so they can be HOT.
--   live_key   the idempotency key while the job is live, else null: null stays null for a job
--              without a key, so finishing it changes nothing indexed.
--   dead_at    updated_at of a dead job, else null: the dead-letter read's order.
-- They are generated columns: derived from `state` by the database on every write, so no
-- statement can set them inconsistently (and none may name them in an insert or update).
alter table x_jobs
    add column claimable boolean not null
        generated always as (state in ('ready', 'sleeping', 'waiting')) stored,
    add column live_key text
        generated always as (case when state in ('ready', 'running', 'sleeping', 'waiting')
                                  then idempotency_key end) stored,
    add column dead_at timestamptz
        generated always as (case when state = 'dead' then updated_at end) stored;

drop index x_jobs_claim_idx;
create index x_jobs_claim_idx on x_jobs (queue, priority desc, run_at, id) where claimable;

drop index x_jobs_idempotency_live_idx;
create unique index x_jobs_idempotency_live_idx on x_jobs (live_key) where live_key is not null;

drop index x_jobs_dead_idx;
create index x_jobs_dead_idx on x_jobs (dead_at desc, id) where dead_at is not null;

-- The rescue sweep's set (running jobs) now lives beside x_jobs: one row per lease a claim
-- granted, (job, token), inserted by the claim and deleted by the settle in the same statement.
-- The truth stays in x_jobs (state = 'running', the token, lease_expires_at): the sweep reads
-- only rows whose job still runs under that token, so a lease some other statement ended (a
-- cancel) is just a stale row the sweep deletes. A running job always has its row: the claim
-- writes both in one transaction, and a re-claim has a new token, so no stale-row delete can
-- take a live lease's row. Bounded by the jobs running at once; heartbeats never touch it.
drop index x_jobs_lease_idx;
create table x_job_leases (
    job_id  uuid not null,
    token   uuid not null,
    primary key (job_id, token)
);
insert into x_job_leases (job_id, token)
select id, lease_token from x_jobs where state = 'running' and lease_token is not null;
-- Vacuumed as often as x_jobs (see above): every lease is one insert and one delete.
alter table x_job_leases set (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- The insert wakes idle workers itself (one pg_notify per distinct queue of the rows it
-- inserted, sent at commit, as before), so the statement trigger goes: its transition table
-- copied every inserted row into a tuplestore only to read their queues back. x_jobs_insert is
-- the only statement that inserts job rows (0008); same signature, same rows, same result.
drop trigger x_jobs_notify_insert_trg on x_jobs;
drop function x_jobs_notify_insert();

create or replace function x_jobs_insert(
    p_now              timestamptz,
    p_ids              uuid[],
    p_names            text[],
    p_queues           text[],
    p_inputs           text[],
    p_idempotency_keys text[],
    p_max_attempts     int[],
    p_priorities       smallint[],
    p_run_ats          timestamptz[],
    p_delays           float8[],
    p_expires_ats      timestamptz[],
    p_expires_ins      float8[],
    p_tenant_ids       text[],
    p_traceparents     text[],
    p_enqueued_bys     text[],
    p_cancel_reasons   text[]
) returns setof uuid language plpgsql volatile as $fn$
begin
    return query
    with inserted as (
        insert into x_jobs
            (id, name, queue, input, idempotency_key, max_attempts, priority, run_at, expires_at,
             state, last_error, finished_at, tenant_id, traceparent, enqueued_by,
             created_at, updated_at)
        select u.id, u.name, u.queue, u.input::jsonb, u.idempotency_key, u.max_attempts,
               u.priority, u.due,
               coalesce(u.expires_at, u.due + make_interval(secs => u.expires_in_s)),
               case when u.cancel_reason is null then 'ready' else 'cancelled' end,
               u.cancel_reason,
               case when u.cancel_reason is null then null else now() end,
               u.tenant_id, u.traceparent, u.enqueued_by, now(), now()
          from (
            select r.*,
                   coalesce(r.run_at, coalesce(p_now, now()) + make_interval(secs => r.delay_s))
                       as due
              from unnest(p_ids, p_names, p_queues, p_inputs, p_idempotency_keys,
                          p_max_attempts, p_priorities, p_run_ats, p_delays, p_expires_ats,
                          p_expires_ins, p_tenant_ids, p_traceparents, p_enqueued_bys,
                          p_cancel_reasons)
                as r(id, name, queue, input, idempotency_key, max_attempts, priority, run_at,
                     delay_s, expires_at, expires_in_s, tenant_id, traceparent, enqueued_by,
                     cancel_reason)
          ) as u
        on conflict do nothing
        returning x_jobs.id, x_jobs.queue, x_jobs.state
    ), woken as materialized (
        select count(pg_notify('x_jobs_ready', q.queue)) as queues
          from (select distinct queue from inserted where state = 'ready') as q
    )
    select inserted.id from inserted cross join woken;
end
$fn$;

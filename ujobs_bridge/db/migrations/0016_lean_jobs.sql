-- 0016_lean_jobs: x_jobs stays lean under a steady flow of jobs.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

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

-- Room on each page for the settle's HOT version, and vacuum by row count, not by a share of
-- the table: a queue table's live rows are few and its churn is all of its writes, so the
-- default 20% of the table means "almost never" while the claim index fills with dead entries.
-- No cost delay: these vacuums are small and frequent. (autovacuum_naptime is server-wide: see
-- the README's "Table health".)
alter table x_jobs set (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 5000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
alter table x_job_leases set (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- 0016_attempts_latency: each attempt's history, the pick-up latency per minute, and the jobs
-- list in creation order from an index, for the dashboard.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- The jobs list (`job_list`, newest first, paged by key) walks this index instead of sorting
-- the table. created_at is written once by the insert and never changed (HOT rule: no index on
-- x_jobs names a column a settle or heartbeat changes); it costs each enqueue one entry at the
-- right edge of a small index (measured with `python -m bench --cells enqueue-batch`).
create index x_jobs_created_idx on x_jobs (created_at desc, id);

-- The lease row a claim writes now says who claimed the job, when, and which attempt that
-- claim began, so that the settle (and the rescue), which delete it in the same statement, can
-- record the attempt without reading anything more (and whatever the settle then does to the
-- job's attempt count). Rows written before this migration have none of them (their attempts
-- show '-' and the job's count).
alter table x_job_leases
    add column worker text,
    add column claimed_at timestamptz,
    add column attempt int;

-- One row per attempt that ended (settled by its worker, or rescued after its lease ran out):
-- appended by job_settle and job_rescue in the same statement, never updated; deleted with its
-- job (the purge, a discard). No foreign key: its check would cost every settle a trigger per
-- row, and the statements that delete jobs delete their attempts beside them. `token` is the
-- claim's lease token: one attempt per (job, claim).
create table x_job_attempts (
    job_id       uuid not null,
    token        uuid not null,
    attempt      int not null,
    worker       text,
    claimed_at   timestamptz,
    finished_at  timestamptz not null,
    outcome      text not null,  -- done, dead, cancelled, retried, snoozed, handed_back,
                                 -- sleeping, waiting, lost (rescued: the lease ran out)
    error        text,
    primary key (job_id, token)
) with (
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000
);

-- Pick-up latency per minute (claimed_at - max(run_at, created_at), in seconds), added to this
-- backend's row of x_job_counts by the claim that picked the jobs (as the settle adds its done
-- and dead jobs): how many were picked, the sum and the largest of their waits.
alter table x_job_counts
    add column picked bigint not null default 0,
    add column wait_sum_s float8 not null default 0,
    add column wait_max_s float8 not null default 0;

-- 0014_observe_lean: the dashboard's, /metrics' and `health`'s reads without an index that a
-- settle changes, so settling a finished job and renewing a lease stay HOT (0012) while the
-- overview stays index-only on a table of millions of done rows.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Why: 0011 indexed (queue, state, run_at) and finished_at. Both change at every settle, so no
-- settle could be HOT again. The overview's questions are answered from sets a settle of a
-- finished job never enters or leaves instead (see ujobs_bridge/db/sql/observe.sql):
--   ready, scheduled  the claim index (0012), less the suspended jobs below;
--   sleeping/waiting  `suspended`: the state while a job sleeps or waits, else null (null stays
--                     null when a running job finishes), with a partial index;
--   running           x_job_leases (0012) joined to x_jobs by primary key;
--   dead              the dead-letter index, which now carries the queue;
--   the last hour     x_job_counts: jobs done and dead per minute, queue and backend, added to
--                     by the statement that finishes them, in the same transaction.
drop index if exists x_jobs_open_idx;
drop index if exists x_jobs_finished_idx;

-- Adding a stored column rewrites the table (fillfactor and the other storage options stay).
alter table x_jobs
    add column suspended text
        generated always as (case when state in ('sleeping', 'waiting') then state end) stored;
create index x_jobs_suspended_idx on x_jobs (queue, suspended, run_at) where suspended is not null;

-- job_dead's order as before; the queue beside it, so dead letters are counted per queue from
-- the index alone (queue never changes, so this costs no HOT update).
drop index x_jobs_dead_idx;
create index x_jobs_dead_idx on x_jobs (dead_at desc, id) include (queue) where dead_at is not null;

-- One row per (minute, queue, backend): the settle adds its batch's done and dead jobs to the row
-- of its own server backend (pg_backend_pid()), which no other transaction writes at the same
-- time, so concurrent workers never wait on each other's counter. The dashboard sums over
-- backends. Written by job_settle, job_rescue and job_dead_unregistered (every way a job ends
-- done or dead); purged with the finished jobs (ujobs.purge).
create table x_job_counts (
    minute   timestamptz not null,
    queue    text not null,
    backend  int not null,
    done     bigint not null default 0,
    dead     bigint not null default 0,
    primary key (minute, queue, backend)
) with (
    fillfactor = 50,  -- room for the HOT versions of a counter updated many times a minute
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- What finished before this migration, so the chart does not start empty.
insert into x_job_counts (minute, queue, backend, done, dead)
select date_trunc('minute', finished_at), queue, 0,
       count(*) filter (where state = 'done'), count(*) filter (where state = 'dead')
  from x_jobs
 where state in ('done', 'dead') and finished_at is not null
 group by 1, 2;

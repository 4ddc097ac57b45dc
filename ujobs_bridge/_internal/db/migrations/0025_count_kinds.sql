-- 0025_count_kinds: the per-minute counts of finished jobs (the dashboard's chart) keep a dead
-- job's failure kind (0024), so the chart shows a package's own failures (FAILURE) apart from
-- the engine's dead letters, as every other view does.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.
--
-- kind  '': done jobs, dead letters and claims (picked); else the failure kind of the dead
--       jobs the row counts (in `dead`). Part of the key, so a settle adds each kind to its own
--       row of its backend for the minute. Adding a column with a constant default rewrites
--       nothing; the table holds one row per minute, queue and backend (purged with the jobs).
alter table x_job_counts add column kind text not null default '';
alter table x_job_counts drop constraint x_job_counts_pkey;
alter table x_job_counts add primary key (minute, queue, backend, kind);

-- The last hour's failures with a kind were counted as dead letters: moved to their kind, so the
-- chart is right from the upgrade on. Read from x_jobs_dead_idx (dead_at is the updated_at of
-- the settle that made the row dead: its now(), the instant the counts use); the dead letters'
-- row of backend 0 takes the difference (the chart sums over backends).
with failed as (
    select date_trunc('minute', dead_at) as minute, queue, failure_kind as kind, count(*) as jobs
      from x_jobs
     where dead_at is not null and dead_at > now() - interval '1 hour'
       and failure_kind is not null
     group by 1, 2, 3
), kinds as (
    insert into x_job_counts as c (minute, queue, backend, kind, dead)
    select minute, queue, 0, kind, jobs from failed
    on conflict (minute, queue, backend, kind) do update set dead = c.dead + excluded.dead
)
insert into x_job_counts as c (minute, queue, backend, kind, dead)
select minute, queue, 0, '', -sum(jobs) from failed group by minute, queue
on conflict (minute, queue, backend, kind) do update set dead = c.dead + excluded.dead;

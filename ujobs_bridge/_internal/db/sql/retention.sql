-- Retention: the purge's bounded deletes, one block per table it owns.
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever job logic compares time.

-- purge_jobs --
-- Finished jobs (their steps go with them, by cascade; their attempts' history beside them), a
-- bounded batch at a time.
with gone as (
    select id from x_jobs
     where state in ('done', 'dead', 'cancelled') and finished_at < %(cutoff)s
     limit %(limit)s
), attempts as (
    delete from x_job_attempts as a using gone where a.job_id = gone.id
)
delete from x_jobs as j using gone where j.id = gone.id

-- purge_job_counts --
-- Per-minute counts of finished jobs (x_job_counts, the dashboard's chart), kept as long as the
-- jobs they count.
with gone as (
    select minute, queue, backend from x_job_counts where minute < %(cutoff)s limit %(limit)s
)
delete from x_job_counts as c using gone
 where c.minute = gone.minute and c.queue = gone.queue and c.backend = gone.backend

-- purge_job_failure_counts --
-- Per-minute counts of the dead jobs with a failure kind (x_job_failure_counts, migration 0026),
-- kept as long as x_job_counts.
with gone as (
    select minute, queue, backend, kind from x_job_failure_counts
     where minute < %(cutoff)s limit %(limit)s
)
delete from x_job_failure_counts as c using gone
 where c.minute = gone.minute and c.queue = gone.queue and c.backend = gone.backend
   and c.kind = gone.kind

-- purge_events --
-- Old events, except one a live job consumed: its step may still read the payload back on replay.
with gone as (
    select e.id from x_job_events as e
     where e.created_at < %(cutoff)s
       and (e.consumed_by is null
            or not exists (select 1 from x_jobs as j
                            where j.id = e.consumed_by
                              and j.state in ('ready', 'running', 'sleeping', 'waiting')))
     limit %(limit)s
)
delete from x_job_events as e using gone where e.id = gone.id

-- purge_outbox --
with gone as (
    select id from x_outbox where published_at < %(cutoff)s limit %(limit)s
)
delete from x_outbox as o using gone where o.id = gone.id

-- purge_fires --
-- Old fire records, except each task's latest: `tasks ls` reports it as the last occurrence.
with gone as (
    select f.task, f.occurrence_at from x_scheduler_fires as f
     where f.fired_at < %(cutoff)s
       and f.occurrence_at < (select max(l.occurrence_at) from x_scheduler_fires as l
                               where l.task = f.task)
     limit %(limit)s
)
delete from x_scheduler_fires as f using gone
 where f.task = gone.task and f.occurrence_at = gone.occurrence_at

-- Observation: what the dashboard, /metrics and `health` read. Every read here must stay an
-- index scan on a large x_jobs, through indexes no settle of a finished job and no heartbeat
-- changes (migrations 0012, 0014; bench/dashboard_bench.py prints the plans).

-- observe_depth --
-- Jobs per queue and shown state, from four sets each read from its own index:
--   claimable (x_job_claimable, migration 0019, its claim index): ready, sleeping and waiting
--     jobs, due or not;
--   suspended (x_jobs_suspended_idx, index-only): the sleeping and waiting ones among them,
--     so ready = claimable due - suspended due, scheduled = claimable not due - suspended not due;
--   running: x_job_leases joined to x_jobs by primary key (a lease a cancel ended is no longer
--     its job's token, so it is not counted);
--   dead (x_jobs_dead_idx, index-only, it carries the queue and the failure kind): the dead
--     letters as `dead`, a package's own terminal failures under their kind (0024: FAILURE).
-- `oldest_due` (on the `ready` row) is the earliest run_at among claimable jobs that are due:
-- the longest a job a worker could claim now has waited (a sleeping job whose time has come
-- waits for a worker just as a ready one does). Rows with no jobs and no oldest_due are left out.
with claimable as (
    select queue,
           count(*) filter (where run_at <= coalesce(%(now)s, now())) as due,
           count(*) filter (where run_at > coalesce(%(now)s, now())) as later,
           min(run_at) filter (where run_at <= coalesce(%(now)s, now())) as oldest_due
      from x_job_claimable
     group by queue
), suspended as (
    select queue, suspended as state, count(*) as jobs,
           count(*) filter (where run_at <= coalesce(%(now)s, now())) as due
      from x_jobs
     where suspended is not null
     group by queue, suspended
), suspended_per_queue as (
    select queue, sum(due)::bigint as due, sum(jobs - due)::bigint as later
      from suspended
     group by queue
), shown as (
    select c.queue, 'ready' as state, c.due - coalesce(s.due, 0) as jobs, c.oldest_due
      from claimable as c left join suspended_per_queue as s on s.queue = c.queue
    union all
    select c.queue, 'scheduled', c.later - coalesce(s.later, 0), null
      from claimable as c left join suspended_per_queue as s on s.queue = c.queue
    union all
    select queue, state, jobs, null from suspended
    union all
    select j.queue, 'running', count(*), null
      from x_job_leases as l
      join x_jobs as j on j.id = l.job_id and j.lease_token = l.token
     where j.state = 'running'
     group by j.queue
    union all
    select queue, coalesce(failure_kind, 'dead'), count(*), null
      from x_jobs
     where dead_at is not null
     group by queue, failure_kind
)
select queue, state, jobs, oldest_due
  from shown
 where jobs > 0 or oldest_due is not null
 order by queue, state

-- observe_finished_per_minute --
-- Jobs that finished done or dead in the last `minutes` whole minutes up to `now`, per minute
-- and final state: the throughput and failure chart, from x_job_counts (migration 0014; the
-- statements that finish jobs count them there, stamped with the database's clock, as
-- finished_at is). `dead` is the dead letters; a dead job a package ended with its own failure
-- kind (0024) is counted in x_job_failure_counts under that kind (0026), given as the state
-- (`FAILURE`). Cancelled jobs are not counted.
select m.minute, v.state, v.jobs
  from (select minute, sum(done)::bigint as done, sum(dead)::bigint as dead
          from x_job_counts
         where minute > coalesce(%(now)s, now()) - make_interval(mins => %(minutes)s)
           and minute <= coalesce(%(now)s, now())
         group by minute) as m
 cross join lateral (values ('done', m.done), ('dead', m.dead)) as v(state, jobs)
 where v.jobs > 0
union all
select minute, kind, sum(jobs)::bigint
  from x_job_failure_counts
 where minute > coalesce(%(now)s, now()) - make_interval(mins => %(minutes)s)
   and minute <= coalesce(%(now)s, now())
 group by minute, kind
having sum(jobs) > 0
 order by 1, 2

-- observe_outbox_lag --
-- Rows staged in the outbox and not yet published: how many, and the oldest one's age.
select count(*) as pending,
       coalesce(extract(epoch from coalesce(%(now)s, now()) - min(created_at)), 0) as lag_s
  from x_outbox
 where published_at is null

-- observe_pickup_per_minute --
-- Pick-up latency in the last `minutes` whole minutes up to `now`, per minute: jobs claimed, the
-- mean and the largest wait from due (max(run_at, created_at)) to claim, in seconds, from the
-- counts each claim adds to x_job_counts (migration 0016), summed over queues and backends.
select minute, sum(picked)::bigint as picked,
       sum(wait_sum_s) / nullif(sum(picked), 0) as wait_mean_s, max(wait_max_s) as wait_max_s
  from x_job_counts
 where minute > coalesce(%(now)s, now()) - make_interval(mins => %(minutes)s)
   and minute <= coalesce(%(now)s, now())
 group by minute
having sum(picked) > 0
 order by minute

-- observe_attempts --
-- One job's attempts that ended, oldest first (x_job_attempts, migration 0016; primary key).
select attempt, worker, claimed_at, finished_at, outcome, error
  from x_job_attempts
 where job_id = %(id)s
 order by finished_at, attempt

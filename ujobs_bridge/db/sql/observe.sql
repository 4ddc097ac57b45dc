-- Observation: what the dashboard, /metrics and `health` read. Every read here must stay an
-- index scan on a large x_jobs (migration 0015; bench/observe_bench.py shows the plans).

-- observe_depth --
-- Jobs per queue and state, not finished (plus dead letters); a ready job not yet due counts
-- as `scheduled`. `oldest_due` is the earliest run_at among due ready jobs (the backlog's age).
select queue,
       case when state = 'ready' and run_at > coalesce(%(now)s, now()) then 'scheduled'
            else state end as shown_state,
       count(*) as jobs,
       min(run_at) filter (where state = 'ready' and run_at <= coalesce(%(now)s, now()))
           as oldest_due
  from x_jobs
 where state in ('ready', 'running', 'sleeping', 'waiting', 'dead')
 group by queue, shown_state
 order by queue, shown_state

-- observe_finished_per_minute --
-- Jobs that finished in the last `minutes` minutes, per minute and final state (done, dead,
-- cancelled): the throughput and failure chart.
select date_trunc('minute', finished_at) as minute, state, count(*) as jobs
  from x_jobs
 where finished_at is not null
   and finished_at > coalesce(%(now)s, now()) - make_interval(mins => %(minutes)s)
   and finished_at <= coalesce(%(now)s, now())
 group by minute, state
 order by minute, state

-- observe_outbox_lag --
-- Rows staged in the outbox and not yet published: how many, and the oldest one's age.
select count(*) as pending,
       coalesce(extract(epoch from coalesce(%(now)s, now()) - min(created_at)), 0) as lag_s
  from x_outbox
 where published_at is null

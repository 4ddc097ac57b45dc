-- Durable steps and events: every write carries the attempt's lease token (fencing).
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever job logic compares time.

-- step_list --
select name, ordinal, status, output, attempts, error, job_attempt, started_at, completed_at,
       wake_at, event, correlation_key
  from x_job_steps
 where run_id = %(run_id)s
 order by ordinal

-- steps_complete --
-- The group commit of step results: many steps (of many attempts) in ONE statement, so one
-- commit. Each is persisted only while its attempt still holds the lease (fencing, the same test
-- as step_complete's); a row that is already completed is left alone (an ambiguous earlier
-- commit: the caller reads it back). Answers the (run_id, name) of each row written; the batch
-- is a jsonb array of {run_id, token, name, ordinal, job_attempt, started_at, output}, with
-- (run_id, name) distinct within it. The lease test is a scalar subquery looking the job up by
-- id alone, so each row costs one primary-key probe of x_jobs, however many jobs are running
-- (a test on `state` in its WHERE would let the planner walk an index of the running ones).
insert into x_job_steps
    (run_id, name, ordinal, status, output, attempts, job_attempt, started_at, completed_at)
select b.run_id, b.name, b.ordinal, 'completed', b.output, 1, b.job_attempt, b.started_at, now()
  from jsonb_to_recordset(%(batch)s::jsonb)
       as b(run_id uuid, token uuid, name text, ordinal int, job_attempt int,
            started_at timestamptz, output jsonb)
 where (select j.state = 'running' and j.lease_token = b.token from x_jobs as j where j.id = b.run_id)
on conflict (run_id, name) do update
   set status = 'completed', output = excluded.output, attempts = x_job_steps.attempts + 1,
       job_attempt = excluded.job_attempt, completed_at = now(), error = null
 where x_job_steps.status <> 'completed'
returning run_id, name

-- step_complete --
-- Persist one step's result (an event's consume, in its transaction), but only while the
-- attempt still holds the lease (fencing). A row already completed is left alone.
insert into x_job_steps
    (run_id, name, ordinal, status, output, attempts, job_attempt, started_at, completed_at)
select %(run_id)s, %(name)s, %(ordinal)s, 'completed', %(output)s::jsonb, 1, %(job_attempt)s,
       %(started_at)s, now()
 where (select j.state = 'running' and j.lease_token = %(token)s
          from x_jobs as j where j.id = %(run_id)s)
on conflict (run_id, name) do update
   set status = 'completed', output = excluded.output, attempts = x_job_steps.attempts + 1,
       job_attempt = excluded.job_attempt, completed_at = now(), error = null
 where x_job_steps.status <> 'completed'
returning status

-- step_fail --
insert into x_job_steps
    (run_id, name, ordinal, status, attempts, error, job_attempt, started_at)
select %(run_id)s, %(name)s, %(ordinal)s, 'failed', 1, %(error)s, %(job_attempt)s, %(started_at)s
 where (select j.state = 'running' and j.lease_token = %(token)s
          from x_jobs as j where j.id = %(run_id)s)
on conflict (run_id, name) do update
   set status = 'failed', attempts = x_job_steps.attempts + 1, error = excluded.error,
       job_attempt = excluded.job_attempt
 where x_job_steps.status <> 'completed'
returning status

-- step_suspend --
-- Record a sleeping or waiting step; wake_at is absolute, or now (injected or database) plus a
-- duration. Returns the wake time the job is parked until.
insert into x_job_steps
    (run_id, name, ordinal, status, attempts, job_attempt, wake_at, event, correlation_key)
select %(run_id)s, %(name)s, %(ordinal)s, %(status)s, 1, %(job_attempt)s,
       coalesce(%(wake_at)s, coalesce(%(now)s, now()) + make_interval(secs => %(duration_s)s)),
       %(event)s, %(correlation_key)s
 where (select j.state = 'running' and j.lease_token = %(token)s
          from x_jobs as j where j.id = %(run_id)s)
on conflict (run_id, name) do update
   set status = excluded.status, job_attempt = excluded.job_attempt
 where x_job_steps.status <> 'completed'
returning status, wake_at

-- step_wake_if_due --
-- A sleeping step whose wake time has come completes; answers nothing while it is not due.
update x_job_steps
   set status = 'completed', completed_at = now(), output = %(output)s::jsonb
 where run_id = %(run_id)s and name = %(name)s and status in ('sleeping', 'waiting')
   and wake_at <= coalesce(%(now)s, now())
   and (select j.state = 'running' and j.lease_token = %(token)s
          from x_jobs as j where j.id = %(run_id)s)
returning status

-- step_lease_check --
select 1 from x_jobs
 where id = %(run_id)s and lease_token = %(token)s and state = 'running'
   for no key update

-- event_consumed_by --
select payload from x_job_events where consumed_by = %(run_id)s and consumed_step = %(name)s

-- event_consume --
with picked as materialized (
    select id from x_job_events
     where event = %(event)s and correlation_key = %(correlation_key)s and consumed_by is null
       and created_at >= coalesce(%(now)s, now()) - make_interval(secs => %(retention_s)s)
     order by id
     limit 1
     for update skip locked
)
update x_job_events as e
   set consumed_by = %(run_id)s, consumed_step = %(name)s, consumed_at = now()
  from picked
 where e.id = picked.id
returning e.payload

-- event_send --
-- Store the event, then wake every job waiting for it (a waiter that loses the race to consume it
-- suspends again). Notifications go out at commit: one waiting worker per woken job (0025).
with sent as (
    insert into x_job_events (event, correlation_key, payload, created_at)
    values (%(event)s, %(correlation_key)s, %(payload)s::jsonb, coalesce(%(now)s, now()))
    returning id
),
woken as (
    update x_jobs as j
       set run_at = coalesce(%(now)s, now()), updated_at = now()
      from x_job_steps as s
     where s.status = 'waiting' and s.event = %(event)s and s.correlation_key = %(correlation_key)s
       and j.id = s.run_id and j.state = 'waiting'
    returning j.id, j.queue
),
notified as (
    select x_jobs_wake(q.queue, q.jobs) as sent
      from (select queue, count(*)::int as jobs from woken group by queue) as q
)
select (select id from sent) as event_id,
       (select count(*) from woken) as woken,
       (select count(*) from notified where sent > 0) as notified

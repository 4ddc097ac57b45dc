-- Every statement the Postgres driver runs, as named blocks: `-- name --` on its own line.
-- Rules: explicit column lists (no star projections), values only as parameters,
-- `%(now)s` (NULL = the database's now()) wherever job logic compares time. Leases always use
-- the database's now().

-- schema_lock --
select pg_advisory_xact_lock(7283190441)

-- schema_version_table --
create table if not exists x_schema_version (
    version    integer primary key,
    name       text not null,
    applied_at timestamptz not null default now()
)

-- schema_versions --
select version, name, applied_at from x_schema_version order by version

-- schema_version_record --
insert into x_schema_version (version, name) values (%(version)s, %(name)s)

-- schema_table_exists --
select to_regclass('x_schema_version') is not null as present

-- job_enqueue --
insert into x_jobs
    (id, name, queue, input, idempotency_key, max_attempts, priority, run_at, expires_at,
     tenant_id, traceparent, enqueued_by, created_at, updated_at)
values
    (%(id)s, %(name)s, %(queue)s, %(input)s::jsonb, %(idempotency_key)s, %(max_attempts)s, %(priority)s,
     coalesce(%(run_at)s, coalesce(%(now)s, now()) + make_interval(secs => %(delay_s)s)),
     coalesce(%(expires_at)s, coalesce(%(run_at)s, coalesce(%(now)s, now()) + make_interval(secs => %(delay_s)s))
                              + make_interval(secs => %(expires_in_s)s)),
     %(tenant_id)s, %(traceparent)s, %(enqueued_by)s, now(), now())
on conflict (idempotency_key)
    where idempotency_key is not null and state in ('ready', 'running', 'sleeping', 'waiting')
    do nothing
returning id

-- job_enqueue_many --
insert into x_jobs
    (id, name, queue, input, idempotency_key, max_attempts, priority, run_at, expires_at,
     tenant_id, traceparent, enqueued_by, created_at, updated_at)
select u.id, u.name, u.queue, u.input::jsonb, u.idempotency_key, u.max_attempts, u.priority,
       coalesce(u.run_at, coalesce(%(now)s, now()) + make_interval(secs => u.delay_s)),
       coalesce(u.expires_at, coalesce(u.run_at, coalesce(%(now)s, now()) + make_interval(secs => u.delay_s))
                              + make_interval(secs => u.expires_in_s)),
       u.tenant_id, u.traceparent, u.enqueued_by, now(), now()
  from unnest(%(ids)b::uuid[], %(names)b::text[], %(queues)b::text[], %(inputs)b::text[],
              %(idempotency_keys)b::text[], %(max_attempts)b::int[], %(priorities)b::smallint[],
              %(run_ats)b::timestamptz[], %(delays)b::float8[], %(expires_ats)b::timestamptz[], %(expires_ins)b::float8[],
              %(tenant_ids)b::text[], %(traceparents)b::text[], %(enqueued_bys)b::text[])
       as u(id, name, queue, input, idempotency_key, max_attempts, priority, run_at, delay_s,
            expires_at, expires_in_s, tenant_id, traceparent, enqueued_by)
on conflict (idempotency_key)
    where idempotency_key is not null and state in ('ready', 'running', 'sleeping', 'waiting')
    do nothing
returning id

-- job_get_live_by_key --
select id from x_jobs
 where idempotency_key = %(idempotency_key)s
   and state in ('ready', 'running', 'sleeping', 'waiting')

-- job_claim --
with picked as materialized (
    select id from x_jobs
     where state in ('ready', 'sleeping', 'waiting')
       and queue = %(queue)s
       and name = any(%(names)s::text[])
       and run_at <= coalesce(%(now)s, now())
     order by priority desc, run_at, id
     limit %(limit)s
     for update skip locked
)
update x_jobs as j
   set state = 'running', attempt = j.attempt + 1, deliveries = j.deliveries + 1,
       lease_token = %(token)s,
       lease_expires_at = now() + make_interval(secs => %(lease_s)s),
       claimed_by = %(worker)s, updated_at = now()
  from picked
 where j.id = picked.id
returning j.id, j.name, j.queue, j.input, j.attempt, j.max_attempts, j.lease_token,
          (j.expires_at is not null and j.expires_at <= coalesce(%(now)s, now())) as expired,
          j.deliveries

-- job_settle --
-- The batch arrives as ONE jsonb array (one C-level json.dumps on the client, no per-element
-- array dumping): [{"id", "token", "state", "output" (JSON text), "delay_s", "error", "uncount",
-- "run_at" (when a suspended job is due again; null = never by time alone: year 9999, which
-- Python can still read, unlike infinity)}].
update x_jobs as j
   set state = u.state,
       output = case when u.state = 'done' then u.output::jsonb else j.output end,
       attempt = j.attempt - u.uncount,
       run_at = case when u.state = 'ready'
                     then coalesce(%(now)s, now()) + make_interval(secs => u.delay_s)
                     when u.state in ('sleeping', 'waiting')
                     then coalesce(u.run_at, '9999-12-31 00:00:00+00'::timestamptz)
                     else j.run_at end,
       last_error = coalesce(u.error, j.last_error),
       lease_token = null, lease_expires_at = null, claimed_by = null,
       updated_at = now(),
       finished_at = case when u.state in ('done', 'dead', 'cancelled') then now() else null end
  from jsonb_to_recordset(%(batch)s::jsonb)
       as u(id uuid, token uuid, state text, output text, delay_s float8, error text, uncount int,
             run_at timestamptz)
 where j.id = u.id and j.lease_token = u.token and j.state = 'running'
returning j.id

-- job_heartbeat --
update x_jobs as j
   set lease_expires_at = now() + make_interval(secs => %(lease_s)s)
  from jsonb_to_recordset(%(leases)s::jsonb) as u(id uuid, token uuid)
 where j.id = u.id and j.lease_token = u.token and j.state = 'running'
returning j.id

-- job_states --
select id, state, lease_token from x_jobs where id = any(%(ids)s::uuid[])

-- job_rescue --
with lost as materialized (
    select id from x_jobs
     where state = 'running' and lease_expires_at < now()
     order by lease_expires_at
     limit %(limit)s
     for update skip locked
)
update x_jobs as j
   set state = case when j.attempt >= j.max_attempts then 'dead' else 'ready' end,
       last_error = %(error)s,
       lease_token = null, lease_expires_at = null, claimed_by = null,
       run_at = coalesce(%(now)s, now()),
       updated_at = now(),
       finished_at = case when j.attempt >= j.max_attempts then now() else null end
  from lost
 where j.id = lost.id
returning j.id, j.state

-- job_expire --
with gone as materialized (
    select id from x_jobs
     where state = 'ready' and expires_at is not null and expires_at <= coalesce(%(now)s, now())
     limit %(limit)s
     for update skip locked
)
update x_jobs as j
   set state = 'cancelled', last_error = %(error)s, updated_at = now(), finished_at = now()
  from gone
 where j.id = gone.id
returning j.id

-- job_cancel --
with target as (
    update x_jobs
       set state = 'cancelled', lease_token = null, lease_expires_at = null, claimed_by = null,
           last_error = %(error)s, updated_at = now(), finished_at = now()
     where id = %(id)s and state in ('ready', 'running', 'sleeping', 'waiting')
    returning id
)
select id, pg_notify('x_jobs_cancel', id::text) from target

-- job_requeue --
update x_jobs
   set state = 'ready', attempt = 0, run_at = coalesce(%(now)s, now()), output = null,
       lease_token = null, lease_expires_at = null, claimed_by = null,
       updated_at = now(), finished_at = null
 where id = %(id)s and state in ('dead', 'cancelled')
returning id

-- job_get --
select id, name, queue, input, output, idempotency_key, attempt, max_attempts, state, priority,
       run_at, lease_expires_at, claimed_by, expires_at, last_error, tenant_id, traceparent,
       enqueued_by, created_at, updated_at, finished_at
  from x_jobs
 where id = %(id)s

-- job_list --
select id, name, queue, input, output, idempotency_key, attempt, max_attempts, state, priority,
       run_at, lease_expires_at, claimed_by, expires_at, last_error, tenant_id, traceparent,
       enqueued_by, created_at, updated_at, finished_at
  from x_jobs
 where (%(state)s::text is null or state = %(state)s)
   and (%(queue)s::text is null or queue = %(queue)s)
   and (%(name)s::text is null or name = %(name)s)
 order by created_at desc, id
 limit %(limit)s

-- job_dead --
select id, name, queue, input, output, idempotency_key, attempt, max_attempts, state, priority,
       run_at, lease_expires_at, claimed_by, expires_at, last_error, tenant_id, traceparent,
       enqueued_by, created_at, updated_at, finished_at
  from x_jobs
 where state = 'dead'
 order by updated_at desc, id
 limit %(limit)s

-- job_stats --
select queue, state, count(*) as jobs, min(run_at) as oldest_run_at
  from x_jobs
 group by queue, state
 order by queue, state

-- database_exists --
select 1 from pg_database where datname = %(name)s

-- database_create_ujobs --
create database ujobs

-- listen_ready --
listen x_jobs_ready

-- listen_cancel --
listen x_jobs_cancel

-- session_claims_async --
-- The worker's claim connection commits claims without waiting for the WAL flush: a claim lost
-- in a server crash only leaves the job ready again (a re-run the at-least-once contract covers),
-- and any later synchronous commit (an outcome) flushes it anyway, since WAL is sequential.
set synchronous_commit = off

-- tx_outcomes_durable --
set local synchronous_commit = on

-- step_list --
select name, ordinal, status, output, attempts, error, job_attempt, started_at, completed_at,
       wake_at, event, correlation_key
  from x_job_steps
 where run_id = %(run_id)s
 order by ordinal

-- step_complete --
-- Persist a step's result, but only while the attempt still holds the lease (fencing). A row that
-- is already completed is left alone (an ambiguous earlier commit): the caller reads it back.
insert into x_job_steps
    (run_id, name, ordinal, status, output, attempts, job_attempt, started_at, completed_at)
select %(run_id)s, %(name)s, %(ordinal)s, 'completed', %(output)s::jsonb, 1, %(job_attempt)s,
       %(started_at)s, now()
 where exists (select 1 from x_jobs
                where id = %(run_id)s and lease_token = %(token)s and state = 'running')
on conflict (run_id, name) do update
   set status = 'completed', output = excluded.output, attempts = x_job_steps.attempts + 1,
       job_attempt = excluded.job_attempt, completed_at = now(), error = null
 where x_job_steps.status <> 'completed'
returning status

-- step_fail --
insert into x_job_steps
    (run_id, name, ordinal, status, attempts, error, job_attempt, started_at)
select %(run_id)s, %(name)s, %(ordinal)s, 'failed', 1, %(error)s, %(job_attempt)s, %(started_at)s
 where exists (select 1 from x_jobs
                where id = %(run_id)s and lease_token = %(token)s and state = 'running')
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
 where exists (select 1 from x_jobs
                where id = %(run_id)s and lease_token = %(token)s and state = 'running')
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
   and exists (select 1 from x_jobs
                where id = %(run_id)s and lease_token = %(token)s and state = 'running')
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
-- suspends again). Notifications go out at commit, one per queue.
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
    select pg_notify('x_jobs_ready', q.queue) from (select distinct queue from woken) as q
)
select (select id from sent) as event_id,
       (select count(*) from woken) as woken,
       (select count(*) from notified) as notified

-- leader_elect --
-- Take the lease if nobody holds it or the holder's lease has run out (database clock only).
insert into x_scheduler_leader (name, holder, term, elected_at, expires_at)
values (%(name)s, %(holder)s, 1, now(), now() + make_interval(secs => %(ttl_s)s))
on conflict (name) do update
   set holder = excluded.holder, term = x_scheduler_leader.term + 1,
       elected_at = now(), expires_at = excluded.expires_at
 where x_scheduler_leader.expires_at < now()
returning holder, term

-- leader_renew --
-- Renew only OUR term: matched by holder AND term, and only while it has not expired.
update x_scheduler_leader
   set expires_at = now() + make_interval(secs => %(ttl_s)s)
 where name = %(name)s and holder = %(holder)s and term = %(term)s and expires_at >= now()
returning term

-- leader_resign --
update x_scheduler_leader
   set expires_at = now() - interval '1 microsecond'
 where name = %(name)s and holder = %(holder)s and term = %(term)s

-- leader_get --
select holder, term, elected_at, expires_at, expires_at >= now() as live
  from x_scheduler_leader
 where name = %(name)s

-- scheduler_watermarks --
select task, watermark from x_scheduler_state

-- scheduler_watermark_set --
insert into x_scheduler_state (task, watermark, updated_at)
values (%(task)s, %(watermark)s, now())
on conflict (task) do update
   set watermark = greatest(x_scheduler_state.watermark, excluded.watermark), updated_at = now()

-- scheduler_fire --
-- Claim one (task, occurrence); nothing comes back if it was fired already (by anyone).
insert into x_scheduler_fires (task, occurrence_at, catch_up, job_ids)
values (%(task)s, %(occurrence_at)s, %(catch_up)s, %(job_ids)s::uuid[])
on conflict (task, occurrence_at) do nothing
returning task

-- scheduler_last_fires --
select distinct on (task) task, occurrence_at, catch_up, fired_at
  from x_scheduler_fires
 order by task, occurrence_at desc

-- outbox_stage --
insert into x_outbox
    (job_id, name, queue, input, idempotency_key, max_attempts, priority, run_at, delay_s,
     expires_at, expires_in_s, tenant_id, traceparent, enqueued_by)
values
    (%(id)s, %(name)s, %(queue)s, %(input)s::jsonb, %(idempotency_key)s, %(max_attempts)s,
     %(priority)s, %(run_at)s, %(delay_s)s, %(expires_at)s, %(expires_in_s)s, %(tenant_id)s,
     %(traceparent)s, %(enqueued_by)s)
returning id

-- outbox_relay_lock --
-- One relay at a time per database, for the length of one batch: order needs a single reader.
select pg_try_advisory_xact_lock(7283190442)

-- outbox_claim --
-- Rows whose inserting transaction is older than every transaction still running: no earlier
-- row can still appear, so publishing in id order never lets a later row overtake an earlier one.
select id, job_id, name, queue, input::text, idempotency_key, max_attempts, priority, run_at,
       delay_s, expires_at, expires_in_s, tenant_id, traceparent, enqueued_by
  from x_outbox
 where published_at is null
   and txid < pg_snapshot_xmin(pg_current_snapshot())
 order by id
 limit %(limit)s
   for update

-- outbox_mark --
update x_outbox set published_at = now() where id = any(%(ids)s::bigint[])

-- outbox_publish --
-- One staged row into ANOTHER database's x_jobs. `on conflict do nothing` with no target covers
-- the primary key too: a row published before a crash (same job id), even one whose job has
-- finished since, is not inserted twice, and a live job holding the row's key absorbs it.
insert into x_jobs
    (id, name, queue, input, idempotency_key, max_attempts, priority, run_at, expires_at,
     tenant_id, traceparent, enqueued_by, created_at, updated_at)
values
    (%(id)s, %(name)s, %(queue)s, %(input)s::jsonb, %(idempotency_key)s, %(max_attempts)s, %(priority)s,
     coalesce(%(run_at)s, coalesce(%(now)s, now()) + make_interval(secs => %(delay_s)s)),
     coalesce(%(expires_at)s, coalesce(%(run_at)s, coalesce(%(now)s, now()) + make_interval(secs => %(delay_s)s))
                              + make_interval(secs => %(expires_in_s)s)),
     %(tenant_id)s, %(traceparent)s, %(enqueued_by)s, now(), now())
on conflict do nothing
returning id

-- purge_jobs --
-- Finished jobs (their steps go with them, by cascade), a bounded batch at a time.
with gone as (
    select id from x_jobs
     where state in ('done', 'dead', 'cancelled') and finished_at < %(cutoff)s
     limit %(limit)s
)
delete from x_jobs as j using gone where j.id = gone.id

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

-- ---------------------------------------------------------------------------------------------
-- celery_compat: Celery messages as jobs, the result store, chord counters, revokes.
-- ---------------------------------------------------------------------------------------------

-- celery_enqueue --
-- One Celery message → one job, deduplicated for good by (task id, retries, nesting) through the
-- ledger. A message for a revoked task id is born cancelled (it never runs).
with ledger as (
    insert into x_celery_tasks (task_id, retries, nesting, job_id, created_at)
    values (%(task_id)s, %(retries)s, %(nesting)s, %(id)s, now())
    on conflict (task_id, retries, nesting) do nothing
    returning job_id
)
insert into x_jobs
    (id, name, queue, input, max_attempts, priority, run_at, state, last_error, finished_at,
     traceparent, enqueued_by, created_at, updated_at)
select ledger.job_id, %(name)s, %(queue)s, %(input)s::jsonb, %(max_attempts)s, %(priority)s,
       coalesce(%(run_at)s, coalesce(%(now)s, now())),
       case when r.task_id is null then 'ready' else 'cancelled' end,
       case when r.task_id is null then null else 'UJ_JOB_CANCELLED: task id was revoked' end,
       case when r.task_id is null then null else now() end,
       %(traceparent)s, %(enqueued_by)s, now(), now()
  from ledger
  left join x_celery_revoked as r on r.task_id = %(task_id)s
returning id

-- celery_enqueue_many --
with u as (
    select u.task_id, u.retries, u.nesting, u.id, u.name, u.queue, u.input, u.priority, u.run_at
      from unnest(%(task_ids)b::text[], %(retries)b::int[], %(nestings)b::int[],
                         %(ids)b::uuid[], %(names)b::text[], %(queues)b::text[],
                         %(inputs)b::text[], %(priorities)b::smallint[], %(run_ats)b::timestamptz[])
        as u(task_id, retries, nesting, id, name, queue, input, priority, run_at)
),
ledger as (
    insert into x_celery_tasks (task_id, retries, nesting, job_id, created_at)
    select task_id, retries, nesting, id, now() from u
    on conflict (task_id, retries, nesting) do nothing
    returning job_id
)
insert into x_jobs
    (id, name, queue, input, max_attempts, priority, run_at, state, enqueued_by, created_at, updated_at)
select u.id, u.name, u.queue, u.input::jsonb, %(max_attempts)s, u.priority,
       coalesce(u.run_at, coalesce(%(now)s, now())),
       case when r.task_id is null then 'ready' else 'cancelled' end,
       %(enqueued_by)s, now(), now()
  from u
  join ledger on ledger.job_id = u.id
  left join x_celery_revoked as r on r.task_id = u.task_id
returning id

-- celery_jobs_of_task --
select t.job_id, j.state, j.last_error, j.updated_at
  from x_celery_tasks as t
  join x_jobs as j on j.id = t.job_id
 where t.task_id = %(task_id)s
 order by t.retries desc, t.nesting desc

-- celery_revoke --
-- Record the revoke and NOTIFY it in the same statement (so at the same commit): a worker that
-- holds a claimed message of this id drops it before its body starts (revoked_ids.py).
with saved as (
    insert into x_celery_revoked (task_id, terminate, created_at)
    values (%(task_id)s, %(terminate)s, now())
    on conflict (task_id) do update set terminate = x_celery_revoked.terminate or excluded.terminate
    returning task_id
)
select pg_notify('x_celery_revoked', task_id) from saved

-- celery_result_get --
select value from x_celery_results
 where key = %(key)s and (expires_at is null or expires_at > coalesce(%(now)s, now()))

-- celery_result_mget --
select key, value from x_celery_results
 where key = any(%(keys)s::text[]) and (expires_at is null or expires_at > coalesce(%(now)s, now()))

-- celery_result_set --
with saved as (
    insert into x_celery_results (key, value, expires_at, updated_at)
    values (%(key)s, %(value)s,
            case when %(ttl_s)s::float8 is null then null
                 else coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s::float8) end,
            now())
    on conflict (key) do update
        set value = excluded.value, expires_at = excluded.expires_at, updated_at = now()
    returning key
)
select pg_notify('x_celery_results', key) from saved

-- celery_result_delete --
with gone as (
    delete from x_celery_results where key = %(key)s returning key
), counter as (
    delete from x_celery_counters where key = %(key)s returning key
), parts as (
    delete from x_celery_chord_parts where key = %(key)s returning key
)
select (select count(*) from gone) + (select count(*) from counter) + (select count(*) from parts)

-- celery_result_expire --
with a as (
    update x_celery_results
       set expires_at = coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s::float8)
     where key = %(key)s
    returning key
)
update x_celery_counters
   set expires_at = coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s::float8)
 where key = %(key)s

-- celery_counter_incr --
insert into x_celery_counters (key, value) values (%(key)s, 1)
on conflict (key) do update set value = x_celery_counters.value + 1
returning value

-- celery_chord_part_incr --
-- Count one header part of a chord, once per child task id, atomically: a redelivered part
-- inserts nothing and increments nothing (no row returned). A chord whose header was a generator
-- lists its parts as they return (`listed_key`: [group_index, task_id], as Celery's Redis backend
-- does; no GroupResult is saved up front): a first count appends to that list if it exists.
with part as (
    insert into x_celery_chord_parts (key, task_id, created_at)
    values (%(key)s, %(task_id)s, now())
    on conflict (key, task_id) do nothing
    returning key
), listed as (
    update x_celery_results as r
       set value = (r.value::jsonb || jsonb_build_array(
                        jsonb_build_array(%(group_index)s::int, %(task_id)s::text)))::text,
           updated_at = now()
     where r.key = %(listed_key)s and exists (select 1 from part)
    returning r.key
)
insert into x_celery_counters (key, value)
select key, 1 from part
on conflict (key) do update set value = x_celery_counters.value + 1
returning value

-- celery_chord_add --
-- Task.add_to_chord: grow a running chord by one part. The chord's added parts are one JSON list
-- of [group_index, task_id] under the group's `.t` key; appending under the row lock of the
-- upsert means concurrent adds are never lost. A task id already in the list is not added again
-- (no row back). Returns the number of parts added so far.
insert into x_celery_results as r (key, value, expires_at, updated_at)
values (%(key)s,
        jsonb_build_array(jsonb_build_array(%(group_index)s::int, %(task_id)s::text))::text,
        case when %(ttl_s)s::float8 is null then null
             else coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s::float8) end,
        now())
on conflict (key) do update
    set value = (r.value::jsonb || excluded.value::jsonb)::text,
        expires_at = excluded.expires_at, updated_at = now()
  where not exists (select 1 from jsonb_array_elements(r.value::jsonb) as e(part)
                     where e.part ->> 1 = %(task_id)s::text)
returning jsonb_array_length(r.value::jsonb)

-- listen_celery_results --
listen x_celery_results

-- purge_celery --
-- Results past their expiry, and ledger/revoke rows older than the cutoff (their jobs are gone).
with r as (
    delete from x_celery_results where expires_at < %(cutoff)s returning 1
), c as (
    delete from x_celery_counters where expires_at < %(cutoff)s returning 1
), p as (
    delete from x_celery_chord_parts where created_at < %(cutoff)s returning 1
), t as (
    delete from x_celery_tasks as t
     where t.created_at < %(cutoff)s
       and not exists (select 1 from x_jobs as j where j.id = t.job_id
                        and j.state in ('ready', 'running', 'sleeping', 'waiting'))
    returning 1
), v as (
    delete from x_celery_revoked where created_at < %(cutoff)s returning 1
)
select (select count(*) from r) + (select count(*) from c) + (select count(*) from p)
     + (select count(*) from t) + (select count(*) from v)

-- database_now --
-- The database's clock, read once where a pass must compare against instants it wrote.
select now()

-- ---------------------------------------------------------------------------------------------
-- migrate_*: `ujobs-bridge migrate` (package migrate/). Job rows go through celery_enqueue_many;
-- these are the quarantine (0006_migrate) and the chord-state check.

-- migrate_quarantine_put --
-- One poison message, kept byte for byte. The same bytes again (a redelivery after a crash
-- between commit and ack) are the same entry: `seen` counts; `inserted` says which happened.
insert into x_migrate_quarantine
    (broker, queue, reason, detail, task, task_id, format, raw, meta, sha256, size)
values
    (%(broker)s, %(queue)s, %(reason)s, %(detail)s, %(task)s, %(task_id)s, %(format)s, %(raw)s,
     %(meta)s, %(sha256)s, %(size)s)
on conflict (sha256, queue, broker) do update
    set seen = x_migrate_quarantine.seen + 1, last_seen_at = now()
returning id, (xmax = 0) as inserted

-- migrate_quarantine_list --
select id, created_at, broker, queue, reason, detail, task, task_id, format, size, seen,
       resolution, resolved_at, job_id
  from x_migrate_quarantine
 where (%(all)s or resolution is null)
   and (%(reason)s::text is null or reason = %(reason)s::text)
 order by id
 limit %(limit)s

-- migrate_quarantine_get --
select id, created_at, broker, queue, reason, detail, task, task_id, format, size, seen,
       resolution, resolved_at, job_id, raw, meta, sha256
  from x_migrate_quarantine
 where id = %(id)s

-- migrate_quarantine_resolve --
update x_migrate_quarantine
   set resolution = %(resolution)s, resolved_at = now(), job_id = %(job_id)s
 where id = %(id)s and resolution is null
returning id

-- migrate_quarantine_reason --
update x_migrate_quarantine set reason = %(reason)s, detail = %(detail)s where id = %(id)s

-- migrate_quarantine_counts --
select reason, count(*) from x_migrate_quarantine where resolution is null group by reason

-- migrate_chord_groups_known --
-- Chord header parts are drained only if their chord's group meta is in the bridge's result
-- store (celery_compat's backend keeps it under Celery's group key prefix).
select key from x_celery_results where key = any(%(keys)s::text[])

-- rate_limit_take --
-- Spend one token of bucket `key` (refilled at `rate` per second up to `capacity`) if one is
-- there; no row back means none is: try again in about 1/rate seconds.
insert into x_rate_limits as b (key, tokens, updated_at)
values (%(key)s, %(capacity)s::float8 - 1, coalesce(%(now)s, now()))
on conflict (key) do update
    set tokens = least(%(capacity)s::float8,
                       b.tokens + greatest(0, extract(epoch from (coalesce(%(now)s, now()) - b.updated_at)))
                                  * %(rate)s::float8) - 1,
        updated_at = greatest(b.updated_at, coalesce(%(now)s, now()))
  where least(%(capacity)s::float8,
              b.tokens + greatest(0, extract(epoch from (coalesce(%(now)s, now()) - b.updated_at)))
                         * %(rate)s::float8) >= 1
returning tokens

-- celery_revoked_terminate --
select terminate from x_celery_revoked where task_id = %(task_id)s

-- listen_celery_revoked --
listen x_celery_revoked

-- celery_revoked_recent --
-- What a worker's listener loads once it LISTENs on x_celery_revoked (revoked_ids.py): the ids
-- revoked within the window (the purge deletes older ones anyway), oldest first, with their age
-- in seconds. created_at is the database's clock, so the age is taken on it too.
select task_id, extract(epoch from (coalesce(%(now)s, now()) - created_at))::float8 as age_s
  from x_celery_revoked
 where created_at > coalesce(%(now)s, now()) - make_interval(secs => %(window_s)s)
 order by created_at, task_id

-- migrate_ledger_arguments --
-- For messages the ledger already held: the arguments of the job it points at, so a redelivery
-- (same arguments) is absorbed and a different message under the same key is reported.
select t.task_id, t.retries, t.nesting, j.input -> 'args', j.input -> 'kwargs'
  from unnest(%(task_ids)s::text[], %(retries)s::int[], %(nestings)s::int[])
       as k(task_id, retries, nesting)
  join x_celery_tasks as t
    on t.task_id = k.task_id and t.retries = k.retries and t.nesting = k.nesting
  join x_jobs as j on j.id = t.job_id

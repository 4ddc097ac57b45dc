-- celery_compat: Celery messages as jobs, the result store, chord counters, revokes, rate limits.
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever job logic compares time.

-- celery_enqueue --
-- One Celery message with no send key → one job, no ledger row: the one-row form of
-- x_jobs_insert (migrations 0021, 0025) written as one plain statement, the same columns and values
-- (tests/test_insert_path.py compares the rows column by column). A message for a revoked task
-- id is born cancelled (it never runs) with %(revoked_reason)s as last_error. Why not the insert
-- function: a one-by-one .delay() is one round trip and one durable commit, and the PL/pgSQL
-- insert (its SPI execution, the set-returning call's tuplestore, the lateral join) is work on
-- that path it need not pay (`python -m bench --cells delay-one`).
-- The job arrives through the engine's x_jobs_arrive (its migration 0027): a message due now
-- whose body fits in a notification is handed to an idle worker armed for its queue and task
-- (the row written as that worker's running claim; the function sends the job on the worker's
-- hand-off channel, as for the engine's job_enqueue_one); otherwise a ready job wakes one
-- waiting worker.
-- %(send_commit)s, when not null, is the synchronous_commit of this statement's own transaction
-- (a send through the app's pool: ujobs_send_commit), set when it writes a row; null on a
-- caller's transaction, whose commit is the caller's.
with m as materialized (
    select case when r.task_id is null then null else %(revoked_reason)s::text end
               as cancel_reason,
           coalesce(%(run_at)s::timestamptz, coalesce(%(now)s::timestamptz, now())) as due
      from (select %(task_id)s::text as task_id) as t
      left join x_celery_revoked as r on r.task_id = t.task_id
), arrival as materialized (
    select x_jobs_arrive(
               %(queue)s::text, %(name)s::text, %(id)s::uuid,
               m.cancel_reason is null
                   and m.due <= coalesce(%(now)s::timestamptz, now())
                   and octet_length(%(input)s::text) <= 7000
                   and octet_length(%(name)s::text) + octet_length(%(queue)s::text)
                       + coalesce(octet_length(%(traceparent)s::text), 0) <= 500,
               m.cancel_reason is null, %(max_attempts)s::int, %(traceparent)s::text, m.due,
               false, %(input)s::text) as h
      from m
), inserted as (
    insert into x_jobs
        (id, name, queue, input, idempotency_key, max_attempts, priority, run_at, expires_at,
         state, last_error, finished_at, tenant_id, traceparent, enqueued_by,
         created_at, updated_at, attempt, deliveries, lease_token, lease_expires_at, claimed_by)
    select %(id)s::uuid, %(name)s::text, %(queue)s::text, %(input)s::jsonb, null,
           %(max_attempts)s::int, %(priority)s::smallint, m.due, null,
           case when m.cancel_reason is not null then 'cancelled'
                when (a.h).token is not null then 'running'
                else 'ready' end,
           m.cancel_reason,
           case when m.cancel_reason is null then null else now() end,
           null, %(traceparent)s::text, %(enqueued_by)s::text, now(), now(),
           case when (a.h).token is null then 0 else 1 end,
           case when (a.h).token is null then 0 else 1 end,
           (a.h).token, now() + make_interval(secs => (a.h).lease_s), (a.h).worker
      from m, arrival as a
    on conflict do nothing
    returning x_jobs.id
)
select inserted.id, null::integer as woken,
       case when %(send_commit)s::text is not null
            then set_config('synchronous_commit', %(send_commit)s::text, true) end as commit_level
  from inserted

-- celery_enqueue_keyed --
-- celery_enqueue under a send key (send_keys.py): the key is taken in the ledger first, for good;
-- a key already taken absorbs the message (no row back). %(send_commit)s: as celery_enqueue's.
with ledger as (
    insert into x_celery_tasks (task_id, retries, nesting, sent_by, ordinal, job_id, created_at)
    values (%(key_task_id)s, %(key_retries)s, %(key_nesting)s, %(sent_by)s, %(ordinal)s, %(id)s,
            now())
    on conflict (task_id, retries, nesting, sent_by, ordinal) do nothing
    returning job_id
)
select x.id,
       case when %(send_commit)s::text is not null
            then set_config('synchronous_commit', %(send_commit)s::text, true) end as commit_level
  from ledger
  left join x_celery_revoked as r on r.task_id = %(task_id)s
 cross join lateral x_jobs_insert(
           %(now)s, array[ledger.job_id], array[%(name)s::text], array[%(queue)s::text],
           array[%(input)s::text], null, array[%(max_attempts)s::int],
           array[%(priority)s::smallint], array[%(run_at)s::timestamptz], array[0::float8],
           null, null, null, array[%(traceparent)s::text], array[%(enqueued_by)s::text],
           array[case when r.task_id is null then null else %(revoked_reason)s::text end]) as x(id)

-- celery_enqueue_many --
-- The batch form of celery_enqueue(_keyed): the keyed messages take their keys in the ledger,
-- the messages kept (no key, or a key not taken before) are gathered back into arrays (one
-- aggregate row) and inserted by ONE call of x_jobs_insert. A key twice in one batch: the first
-- message takes it.
with u as (
    select u.task_id, u.keyed, u.key_task_id, u.retries, u.nesting, u.sent_by, u.ordinal, u.id,
           u.name, u.queue, u.input, u.priority, u.run_at, u.traceparent
      from unnest(%(task_ids)b::text[], %(keyeds)b::bool[], %(key_task_ids)b::text[],
                  %(retries)b::int[], %(nestings)b::int[], %(sent_bys)b::uuid[],
                  %(ordinals)b::int[], %(ids)b::uuid[], %(names)b::text[], %(queues)b::text[],
                  %(inputs)b::text[], %(priorities)b::smallint[], %(run_ats)b::timestamptz[],
                  %(traceparents)b::text[])
        as u(task_id, keyed, key_task_id, retries, nesting, sent_by, ordinal, id, name, queue,
             input, priority, run_at, traceparent)
),
ledger as (
    insert into x_celery_tasks (task_id, retries, nesting, sent_by, ordinal, job_id, created_at)
    select key_task_id, retries, nesting, sent_by, ordinal, id, now() from u where keyed
    on conflict (task_id, retries, nesting, sent_by, ordinal) do nothing
    returning job_id
),
kept as (
    select array_agg(u.id) as ids, array_agg(u.name) as names, array_agg(u.queue) as queues,
           array_agg(u.input) as inputs, array_agg(%(max_attempts)s::int) as max_attempts,
           array_agg(u.priority) as priorities, array_agg(u.run_at) as run_ats,
           array_agg(0::float8) as delays, array_agg(u.traceparent) as traceparents,
           array_agg(%(enqueued_by)s::text) as enqueued_bys,
           array_agg(case when r.task_id is null then null else %(revoked_reason)s::text end)
               as cancel_reasons
      from u
      left join ledger on ledger.job_id = u.id
      left join x_celery_revoked as r on r.task_id = u.task_id
     where not u.keyed or ledger.job_id is not null
)
select x.id
  from kept
 cross join lateral x_jobs_insert(
           %(now)s, kept.ids, kept.names, kept.queues, kept.inputs, null, kept.max_attempts,
           kept.priorities, kept.run_ats, kept.delays, null, null, null, kept.traceparents,
           kept.enqueued_bys, kept.cancel_reasons) as x(id)

-- celery_send_commit_set --
-- The synchronous_commit of the rest of this transaction, one the sender owns (a group's sends
-- through the pool): the app's ujobs_send_commit; it ends with the transaction.
select set_config('synchronous_commit', %(level)s::text, true)

-- celery_jobs_of_task --
-- Through x_jobs_celery_task_idx (migration 0013): the rows of a task id that are not done
-- (or all of them, for an operator's look-up).
select j.id, j.state, j.last_error, j.updated_at
  from x_jobs as j
 where coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id') = %(task_id)s::text
   and j.enqueued_by = 'celery_compat' and (%(include_done)s or j.state <> 'done')
 order by j.created_at desc, j.id desc

-- celery_task_ids_sent_here --
-- Which of these Celery task ids have a job row in any state (they went through Postgres); the
-- others were kept on the old broker, or never sent (results across both systems).
select distinct coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id')
  from x_jobs as j
 where coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id') = any(%(task_ids)s::text[])
   and j.enqueued_by = 'celery_compat'

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
-- %(status)s: a task result's state (its write never replaces a stored SUCCESS, as Celery's
-- own read-then-write guard intends, but atomically); NULL for keys that are not task results.
with saved as (
    insert into x_celery_results (key, value, expires_at, updated_at, status)
    values (%(key)s, %(value)s,
            case when %(ttl_s)s::float8 is null then null
                 else coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s::float8) end,
            now(), %(status)s::text)
    on conflict (key) do update
        set value = excluded.value, expires_at = excluded.expires_at, updated_at = now(),
            status = excluded.status
        where excluded.status is null or x_celery_results.status is distinct from 'SUCCESS'
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
-- Results past their expiry, and ledger/revoke rows older than the cutoff (their live jobs are
-- gone: a key must outlive any replay of its send).
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

-- celery_cancelled_recent --
-- The Celery task ids whose rows were cancelled within the window other than by a purge (Celery's
-- purge revokes nothing): an operator's cancel (`jobs cancel`, the dashboard's action, any caller
-- of x_job_cancel), which the engine records on the row as it records every cancel, besides the
-- revokes and expiries; each with the age of its latest cancel in seconds, the newest
-- %(limit)s, oldest first. A requeued row is live again, so no longer listed. For `inspect
-- revoked` only, read when asked: no index serves it (one on state or finished_at would make
-- every settle a non-HOT update).
select task_id, age_s
  from (select coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id') as task_id,
               min(extract(epoch from (coalesce(%(now)s, now()) - j.finished_at)))::float8
                   as age_s
          from x_jobs as j
         where j.enqueued_by = 'celery_compat' and j.state = 'cancelled'
           and j.finished_at > coalesce(%(now)s, now()) - make_interval(secs => %(window_s)s)
           and j.last_error is distinct from %(purged)s
         group by 1
         order by 2
         limit %(limit)s) as c
 where task_id is not null
 order by age_s desc, task_id

-- celery_purge_ready --
-- Celery's purge: the ready messages of the given queues are cancelled (they never run; the
-- retention sweep deletes them later), per queue, in one statement. Running, sleeping and waiting
-- rows are left alone: a worker holds them, as a Celery worker holds its unacked messages; so
-- are messages with an `eta` (countdown, eta, a retry's countdown), due or not, which a Celery
-- worker takes off the queue at once and holds unacked until their time, so Celery's purge never
-- sees them.
-- The candidates are read from x_job_claimable's claim index (migration 0019), not a scan of
-- every row x_jobs keeps.
with gone as (
    update x_jobs
       set state = 'cancelled', lease_token = null, lease_expires_at = null, claimed_by = null,
           last_error = %(error)s, updated_at = now(), finished_at = now()
     where state = 'ready' and queue = any(%(queues)s)
       and input -> 'headers' ->> 'eta' is null
       and id in (select c.id from x_job_claimable as c where c.queue = any(%(queues)s))
    returning queue
)
select q.queue, count(gone.queue)::int
  from unnest(%(queues)s::text[]) as q(queue)
  left join gone on gone.queue = q.queue
 group by q.queue

-- celery_row_access --
-- Whether this connection's role writes job rows and reads results directly (a worker, an
-- application role) or only through the SECURITY DEFINER functions of 0006_duties (a producer):
-- row_access.py asks once per role.
select has_table_privilege('x_jobs', 'INSERT') and has_table_privilege('x_celery_revoked', 'SELECT')
           as writes_rows,
       has_table_privilege('x_celery_results', 'SELECT') and has_table_privilege('x_jobs', 'SELECT')
           as reads_rows

-- celery_send_one --
-- celery_enqueue for a role with no row privilege (a producer): the same row, through
-- x_celery_send (0006_duties). %(send_commit)s: as celery_enqueue's.
select x.id,
       case when %(send_commit)s::text is not null
            then set_config('synchronous_commit', %(send_commit)s::text, true) end as commit_level
  from x_celery_send(%(now)s, array[%(task_id)s::text], array[%(id)s::uuid], array[%(name)s::text],
                     array[%(queue)s::text], array[%(input)s::text], array[%(max_attempts)s::int],
                     array[%(priority)s::smallint], array[%(run_at)s::timestamptz],
                     array[%(traceparent)s::text], %(revoked_reason)s::text) as x(id)

-- celery_send_many --
-- celery_enqueue_many of messages with no send key, for a role with no row privilege.
select x.id
  from x_celery_send(%(now)s, %(task_ids)b::text[], %(ids)b::uuid[], %(names)b::text[],
                     %(queues)b::text[], %(inputs)b::text[],
                     array_fill(%(max_attempts)s::int, array[cardinality(%(ids)b::uuid[])]),
                     %(priorities)b::smallint[], %(run_ats)b::timestamptz[],
                     %(traceparents)b::text[], %(revoked_reason)s::text) as x(id)

-- celery_result_get_by_key --
-- celery_result_get and celery_result_mget for a role that reads no table (a producer).
select r.key, r.value from x_celery_result_get(%(keys)s::text[], %(now)s) as r(key, value)

-- celery_jobs_of_task_by_id --
-- celery_jobs_of_task for a role that reads no table.
select j.id, j.state, j.last_error, j.updated_at
  from x_celery_jobs_of_task(%(task_id)s::text, %(include_done)s::boolean)
       as j(id, state, last_error, updated_at)

-- celery_task_ids_sent_here_by_id --
-- celery_task_ids_sent_here for a role that reads no table.
select t.task_id from x_celery_task_ids_sent_here(%(task_ids)s::text[]) as t(task_id)

-- celery_group_save --
-- celery_result_set of a group's result for a role with no row privilege (a producer): through
-- x_celery_group_save (0006_duties), group keys only, written once. A row back: it was written.
select g.key from x_celery_group_save(%(key)s::text, %(value)s::text, %(ttl_s)s::float8,
                                      %(now)s::timestamptz) as g(key)

-- celery_group_expire --
-- celery_result_expire of a group key for a role with no row privilege (x_celery_group_expire).
select g.key from x_celery_group_expire(%(key)s::text, %(ttl_s)s::float8, %(now)s::timestamptz)
       as g(key)

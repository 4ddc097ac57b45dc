-- Jobs: enqueue, claim, settle, lease renewal, rescue, expiry, and the reads `jobs` shows.
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever job logic compares time.

-- job_enqueue --
-- One row through the one insert (x_jobs_insert, migration 0008): the id it inserted; none when
-- a live job holds the key or the id exists (the outbox relay republishing after a crash also
-- runs this statement, against the target database).
select id
  from x_jobs_insert(%(now)s, array[%(id)s::uuid], array[%(name)s::text], array[%(queue)s::text],
                     array[%(input)s::text], array[%(idempotency_key)s::text],
                     array[%(max_attempts)s::int], array[%(priority)s::smallint],
                     array[%(run_at)s::timestamptz], array[%(delay_s)s::float8],
                     array[%(expires_at)s::timestamptz], array[%(expires_in_s)s::float8],
                     array[%(tenant_id)s::text], array[%(traceparent)s::text],
                     array[%(enqueued_by)s::text], null) as id

-- job_enqueue_one --
-- One job from a client's own connection (Client.enqueue_spec in autocommit: one round trip, one
-- statement, its own commit): the one-row form of x_jobs_insert (migration 0025) written as one
-- plain statement, the same columns and values (tests/integration/test_insert_path.py compares
-- the rows column by column), as celery_enqueue is for a .delay(). Why not the function: its
-- PL/pgSQL call, its one-element arrays and its SECURITY DEFINER switch are work a one-by-one
-- enqueue need not pay (`python -m bench --cells enqueue-one`). A role that may not insert into
-- x_jobs (a producer's) runs job_enqueue_one_definer instead.
-- Answers (id, existing, woken, commit level): the new job; else the live job holding the key,
-- when this statement's snapshot sees it; else no row (the id exists, or the holder committed
-- after the snapshot: the caller asks again, as job_enqueue's caller does). The job arrives
-- through x_jobs_arrive (migration 0027): a job due now with no key, whose input fits in a
-- notification, is handed to an idle worker waiting for its queue when one is armed (the row is
-- written as that worker's running claim, and the function sends the job on the worker's
-- hand-off channel: its body starts without a claim); otherwise one waiting worker is woken. %(send_commit)s, when not
-- null, is the synchronous_commit of this statement's own transaction, set when it writes a row.
with d as materialized (
    select u.due, coalesce(%(expires_at)s::timestamptz,
                           u.due + make_interval(secs => %(expires_in_s)s::float8)) as expires_at
      from (select coalesce(%(run_at)s::timestamptz,
                            coalesce(%(now)s::timestamptz, now())
                                + make_interval(secs => %(delay_s)s::float8)) as due) as u
), arrival as materialized (
    select x_jobs_arrive(
               %(queue)s::text, %(name)s::text, %(id)s::uuid,
               %(idempotency_key)s::text is null
                   and d.due <= coalesce(%(now)s::timestamptz, now())
                   and octet_length(%(input)s::text) <= 7000
                   and octet_length(%(name)s::text) + octet_length(%(queue)s::text)
                       + coalesce(octet_length(%(traceparent)s::text), 0) <= 500,
               true, %(max_attempts)s::int, %(traceparent)s::text, d.due,
               d.expires_at is not null and d.expires_at <= coalesce(%(now)s::timestamptz, now()),
               %(input)s::text) as h
      from d
), inserted as (
    insert into x_jobs
        (id, name, queue, input, idempotency_key, max_attempts, priority, run_at, expires_at,
         state, last_error, finished_at, tenant_id, traceparent, enqueued_by,
         created_at, updated_at, attempt, deliveries, lease_token, lease_expires_at, claimed_by)
    select %(id)s::uuid, %(name)s::text, %(queue)s::text, %(input)s::jsonb,
           %(idempotency_key)s::text, %(max_attempts)s::int, %(priority)s::smallint, d.due,
           d.expires_at,
           case when (a.h).token is null then 'ready' else 'running' end, null, null,
           %(tenant_id)s::text, %(traceparent)s::text, %(enqueued_by)s::text, now(), now(),
           case when (a.h).token is null then 0 else 1 end,
           case when (a.h).token is null then 0 else 1 end,
           (a.h).token, now() + make_interval(secs => (a.h).lease_s), (a.h).worker
      from d, arrival as a
    on conflict do nothing
    returning x_jobs.id
)
select inserted.id, false as existing, null::integer as woken,
       case when %(send_commit)s::text is not null
            then set_config('synchronous_commit', %(send_commit)s::text, true) end as commit_level
  from inserted
union all
select j.id, true, null, null
  from x_jobs as j
 where j.live_key = %(idempotency_key)s::text and not exists (select from inserted)

-- job_enqueue_one_definer --
-- job_enqueue_one for a role without row privileges on x_jobs (a producer, migration 0023):
-- through the one insert (x_jobs_insert) and x_job_live_by_key, which run as the schema owner;
-- the same answer.
with inserted as (
    select x.id
      from x_jobs_insert(%(now)s, array[%(id)s::uuid], array[%(name)s::text],
                         array[%(queue)s::text], array[%(input)s::text],
                         array[%(idempotency_key)s::text], array[%(max_attempts)s::int],
                         array[%(priority)s::smallint], array[%(run_at)s::timestamptz],
                         array[%(delay_s)s::float8], array[%(expires_at)s::timestamptz],
                         array[%(expires_in_s)s::float8], array[%(tenant_id)s::text],
                         array[%(traceparent)s::text], array[%(enqueued_by)s::text], null)
           as x(id)
)
select inserted.id, false as existing, null::integer as woken,
       case when %(send_commit)s::text is not null
            then set_config('synchronous_commit', %(send_commit)s::text, true) end as commit_level
  from inserted
union all
select held.id, true, null, null
  from x_job_live_by_key(%(idempotency_key)s::text) as held(id)
 where %(idempotency_key)s::text is not null and not exists (select from inserted)

-- job_enqueue_many --
-- The whole batch as parallel binary arrays, through the one insert (x_jobs_insert). A field no
-- row sets comes as NULL (unnest pads it with nulls). Answers the ids it did NOT insert (a live
-- job holds the key, or the id exists): usually none, so the batch's ids do not travel back.
with inserted as materialized (
    select id
      from x_jobs_insert(%(now)s, %(ids)b::uuid[], %(names)b::text[], %(queues)b::text[],
                         %(inputs)b::text[], %(idempotency_keys)b::text[],
                         %(max_attempts)b::int[], %(priorities)b::smallint[],
                         %(run_ats)b::timestamptz[], %(delays)b::float8[],
                         %(expires_ats)b::timestamptz[], %(expires_ins)b::float8[],
                         %(tenant_ids)b::text[], %(traceparents)b::text[],
                         %(enqueued_bys)b::text[], null) as id
)
select batch.id
  from unnest(%(ids)b::uuid[]) as batch (id)
 where not exists (select 1 from inserted where inserted.id = batch.id)

-- send_commit_set --
-- The synchronous_commit of the rest of this transaction, one the engine owns (an enqueue_many
-- through the pool, a group of Celery sends): the send commit the user chose
-- (jobs/send_commit.py); it ends with the transaction.
select set_config('synchronous_commit', %(level)s::text, true)

-- job_get_live_by_key --
-- Through x_job_live_by_key (migration 0023): a producer holds no row privilege on x_jobs.
select id from x_job_live_by_key(%(idempotency_key)s) as id

-- job_claim --
-- The claim's lease is also recorded in x_job_leases (migration 0012), where the rescue sweep
-- finds running jobs without an index on x_jobs that every settle would have to change; with the
-- worker, the claim's time and the attempt it begins, which the settle copies into the attempt's
-- history (0016). The
-- pick-up latency of the jobs it picked (now() - max(run_at, created_at), never negative) is
-- added to this backend's row of x_job_counts for the current minute: the dashboard's latency
-- chart, kept as the settle keeps its done and dead counts (one row per backend, no waiting).
-- The head of the queue is read from x_job_claimable (migration 0019: the claimable jobs, kept
-- by triggers on x_jobs, so no x_jobs index changes on claim); its rows are locked first, then
-- their jobs, both with SKIP LOCKED: a statement that changes a job's claimability locks the job
-- first and its x_job_claimable row second (the trigger), so the claim never waits on either and
-- cannot deadlock with it. The claim's update leaves `claimable`, so the trigger deletes the rows.
-- The first %(start)s rows in claim order have their start recorded with the claim (`started_at`,
-- 0022) and come back `started`; the worker passes none (a worker killed between its claim and a
-- body's start must not be charged): `job_start` records each start as its body starts. The lease row
-- also records the lease's length (`lease_s`), which a rescue after a restart waits for. The
-- rows come back from `ordered` itself, in claim order: no join of two CTEs, which the planner
-- runs as a nested loop (a batch of n costs n squared). Run under tx_claim_plans.
with head as materialized (
    select id from x_job_claimable
     where queue = %(queue)s
       and name = any(%(names)s::text[])
       and run_at <= coalesce(%(now)s, now())
     order by priority desc, run_at, id
     limit %(limit)s
     for update skip locked
), picked as materialized (
    select j.id from x_jobs as j join head on head.id = j.id
     where j.claimable
     for update of j skip locked
), claimed as (
    update x_jobs as j
       set state = 'running', attempt = j.attempt + 1, deliveries = j.deliveries + 1,
           lease_token = %(token)s,
           lease_expires_at = now() + make_interval(secs => %(lease_s)s),
           claimed_by = %(worker)s, updated_at = now()
      from picked
     where j.id = picked.id
    returning j.id, j.name, j.queue, j.input, j.attempt, j.max_attempts, j.lease_token,
              (j.expires_at is not null and j.expires_at <= coalesce(%(now)s, now())) as expired,
              j.deliveries, j.traceparent, j.run_at, j.priority,
              greatest(0, extract(epoch from now() - greatest(j.run_at, j.created_at)))::float8
                  as wait_s
), ordered as materialized (
    select id, name, queue, input, attempt, max_attempts, lease_token, expired, deliveries,
           traceparent, run_at,
           row_number() over (order by priority desc, run_at, id) <= %(start)s as started
      from claimed
), leased as (
    insert into x_job_leases (job_id, token, worker, claimed_at, attempt, started_at, lease_s)
    select id, lease_token, %(worker)s, now(), attempt,
           case when started then now() end, %(lease_s)s
      from ordered
), timed as (
    insert into x_job_counts as c (minute, queue, backend, picked, wait_sum_s, wait_max_s)
    select date_trunc('minute', now()), queue, pg_backend_pid(), count(*), sum(wait_s),
           max(wait_s)
      from claimed
     group by queue
    on conflict (minute, queue, backend)
    do update set picked = c.picked + excluded.picked,
                  wait_sum_s = c.wait_sum_s + excluded.wait_sum_s,
                  wait_max_s = greatest(c.wait_max_s, excluded.wait_max_s)
)
select o.id, o.name, o.queue, o.input, o.attempt, o.max_attempts, o.lease_token, o.expired,
       o.deliveries, o.traceparent, o.run_at, o.started
  from ordered as o

-- job_handed_unknown --
-- The jobs handed to this worker (migration 0027: written as its running claims by their
-- inserts) whose body has not started and that the worker does not hold (%(held)s): hand-offs
-- whose notification it never read (its listen connection dropped after the sender committed,
-- or the payload could not be read). Answered in job_claim's shape, to run as claimed rows.
-- Each lease it answers is renewed for its length as it is found: a hand-off found after an
-- outage longer than its lease (sent before the outage, never heard) ran out meanwhile, and a
-- rescue would take it back, unstarted, while its body runs here (the job run twice). The
-- update locks the job as a rescue does: a rescue first deletes the lease row, and the job is
-- not found; this first, and the lease has not run out for the rescue.
update x_jobs as j
   set lease_expires_at = now() + make_interval(secs => coalesce(l.lease_s, %(lease_s)s))
  from x_job_leases as l
 where l.worker = %(worker)s and l.started_at is null
   and not (l.job_id = any(%(held)s::uuid[]))
   and j.id = l.job_id and j.lease_token = l.token and j.state = 'running'
returning j.id, j.name, j.queue, j.input, j.attempt, j.max_attempts, j.lease_token,
          (j.expires_at is not null and j.expires_at <= coalesce(%(now)s, now())) as expired,
          j.deliveries, j.traceparent, j.run_at, false as started

-- job_start --
-- The claim loop hands prefetched jobs to body slots as they free up: first their lease rows
-- record the start (`started_at`, 0022), then the bodies are given the jobs, so a worker that
-- dies is charged an attempt for what it started and for nothing else. Answers the jobs whose
-- lease is still there (a cancel or a rescue deletes it): only those may start. One statement
-- for all the jobs a pass hands over; no index changes (a HOT update of the lease row).
update x_job_leases as l
   set started_at = now()
  from unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) as u (id, token)
 where l.job_id = u.id and l.token = u.token
returning l.job_id

-- job_settle --
-- The batch arrives as ONE jsonb array (one C-level json.dumps on the client, no per-element
-- array dumping): [{"id", "token", "state", "output" (JSON text), "delay_s", "error", "uncount",
-- "outage" (0/1: see below), "run_at" (when a suspended job is due again; null = never by time
-- alone: year 9999, which Python can still read, unlike infinity), "kind" (a dead job's failure
-- kind, migration 0024: null for a dead letter)}]. The settled leases leave x_job_leases; the jobs it
-- finished done or dead are added to this backend's row of x_job_counts for the current minute
-- (migration 0014: the dashboard's chart, without an index on finished_at that would make this
-- update non-HOT), the dead ones with a failure kind to x_job_failure_counts instead (0026). "outage" (1: handed back because the body met a database outage) is given
-- back only %(outage_cap)s times per job (migration 0015): past that it counts as an attempt,
-- and the job is dead once its attempts are spent, so a body that keeps causing outages ends.
-- Each settled attempt is appended to x_job_attempts (0016) with the worker and claim time its
-- lease row carried, its outcome and its error (the job's page shows them). The update reads the
-- lease row by key beside the job and returns it, so the attempt's row is built from `settled`
-- alone: no join of two CTEs (a nested loop, n squared for a batch of n). Run under
-- tx_claim_plans.
with settled as (
    update x_jobs as j
       set state = case when u.outage = 1 and j.outage_handbacks >= %(outage_cap)s
                         and j.attempt >= j.max_attempts
                        then 'dead' else u.state end,
           output = case when u.state = 'done' then u.output::jsonb else j.output end,
           attempt = j.attempt - case when u.outage = 1
                                       and j.outage_handbacks >= %(outage_cap)s
                                      then 0 else u.uncount end,
           outage_handbacks = j.outage_handbacks + u.outage,
           run_at = case when u.state = 'ready'
                         then coalesce(%(now)s, now()) + make_interval(secs => u.delay_s)
                         when u.state in ('sleeping', 'waiting')
                         then coalesce(u.run_at, '9999-12-31 00:00:00+00'::timestamptz)
                         else j.run_at end,
           last_error = coalesce(u.error, j.last_error),
           failure_kind = case when u.state = 'dead' then u.kind end,
           lease_token = null, lease_expires_at = null, claimed_by = null,
           updated_at = now(),
           finished_at = case when u.state in ('done', 'dead', 'cancelled')
                                or (u.outage = 1 and j.outage_handbacks >= %(outage_cap)s
                                    and j.attempt >= j.max_attempts)
                              then now() else null end
      from jsonb_to_recordset(%(batch)s::jsonb)
           as u(id uuid, token uuid, state text, output text, delay_s float8, error text, uncount int,
                 run_at timestamptz, outage int, kind text)
           left join x_job_leases as l on l.job_id = u.id and l.token = u.token
     where j.id = u.id and j.lease_token = u.token and j.state = 'running'
    returning j.id, u.token, j.queue, j.state, j.attempt + u.uncount as attempt, j.updated_at,
              u.uncount, u.error, j.failure_kind, l.worker as lease_worker,
              l.claimed_at as lease_claimed_at, l.attempt as lease_attempt
), released as (
    delete from x_job_leases as l using settled
     where l.job_id = settled.id and l.token = settled.token
), attempted as (
    insert into x_job_attempts
        (job_id, token, attempt, worker, claimed_at, finished_at, outcome, error)
    select s.id, s.token, coalesce(s.lease_attempt, s.attempt), s.lease_worker,
           s.lease_claimed_at, s.updated_at,
           case when s.state <> 'ready' then coalesce(s.failure_kind, s.state)
                when s.uncount = 0 then 'retried'
                when s.error like 'UJ_JOB_SNOOZED%%' then 'snoozed'
                else 'handed_back' end,
           s.error
      from settled as s
    on conflict do nothing
), counted as (
    insert into x_job_counts as c (minute, queue, backend, done, dead)
    select date_trunc('minute', now()), queue, pg_backend_pid(),
           count(*) filter (where state = 'done'),
           count(*) filter (where state = 'dead' and failure_kind is null)
      from settled
     where state = 'done' or (state = 'dead' and failure_kind is null)
     group by queue
    on conflict (minute, queue, backend)
    do update set done = c.done + excluded.done, dead = c.dead + excluded.dead
), failed as (
    insert into x_job_failure_counts as c (minute, queue, backend, kind, jobs)
    select date_trunc('minute', now()), queue, pg_backend_pid(), failure_kind, count(*)
      from settled
     where state = 'dead' and failure_kind is not null
     group by queue, failure_kind
    on conflict (minute, queue, backend, kind) do update set jobs = c.jobs + excluded.jobs
)
select id from settled

-- job_heartbeat --
update x_jobs as j
   set lease_expires_at = now() + make_interval(secs => %(lease_s)s)
  from jsonb_to_recordset(%(leases)s::jsonb) as u(id uuid, token uuid)
 where j.id = u.id and j.lease_token = u.token and j.state = 'running'
returning j.id

-- job_states --
select id, state, lease_token from x_jobs where id = any(%(ids)s::uuid[])

-- job_rescue --
-- Running jobs whose lease ran out, found through x_job_leases (the leases claims granted; see
-- migration 0012), judged on x_jobs itself (state, token, lease_expires_at). Leases whose job no
-- longer runs under that token (a cancel ended it) are deleted on the way. A lease runs out in
-- the database's uptime only (0022): none is rescued before the server has been up again for
-- the lease's length (x_server_up_since: after a restart, a crash or a failover), so a worker
-- that comes back from an outage within that time renews its leases and writes the outcomes it
-- kept. A job whose body never started (no `started_at`: prefetched by a worker that died) is
-- handed back uncounted; the others are charged the attempt, dead once their attempts are
-- spent. A lease row of a worker from before 0022 (no `lease_s`) counts as started and waits
-- %(lease_s)s (the rescuer's lease).
with stale as (
    delete from x_job_leases as l
     where not exists (select 1 from x_jobs as j
                        where j.id = l.job_id and j.lease_token = l.token
                          and j.state = 'running')
), lost as materialized (
    select j.id, j.lease_token, j.attempt, l.worker, l.claimed_at,
           (l.started_at is not null or l.lease_s is null) as started
      from x_job_leases as l
      join x_jobs as j on j.id = l.job_id and j.lease_token = l.token
     where j.state = 'running' and j.lease_expires_at < now()
       and x_server_up_since() + make_interval(secs => coalesce(l.lease_s, %(lease_s)s)) < now()
     order by j.lease_expires_at
     limit %(limit)s
     for update of j skip locked
), rescued as (
    update x_jobs as j
       set state = case when lost.started and j.attempt >= j.max_attempts then 'dead'
                        else 'ready' end,
           attempt = j.attempt - case when lost.started then 0 else 1 end,
           last_error = case when lost.started then %(error)s else %(unstarted_error)s end,
           failure_kind = null,
           lease_token = null, lease_expires_at = null, claimed_by = null,
           run_at = coalesce(%(now)s, now()),
           updated_at = now(),
           finished_at = case when lost.started and j.attempt >= j.max_attempts then now()
                              else null end
      from lost
     where j.id = lost.id
    returning j.id, j.state, j.queue, lost.started
), released as (
    delete from x_job_leases as l using lost where l.job_id = lost.id and l.token = lost.lease_token
), attempted as (
    insert into x_job_attempts
        (job_id, token, attempt, worker, claimed_at, finished_at, outcome, error)
    select lost.id, lost.lease_token, lost.attempt, lost.worker, lost.claimed_at, now(),
           case when lost.started then 'lost' else 'handed_back' end,
           case when lost.started then %(error)s else %(unstarted_error)s end
      from lost
    on conflict do nothing
), counted as (
    insert into x_job_counts as c (minute, queue, backend, dead)
    select date_trunc('minute', now()), queue, pg_backend_pid(), count(*)
      from rescued
     where state = 'dead'
     group by queue
    on conflict (minute, queue, backend) do update set dead = c.dead + excluded.dead
)
select id, state, started from rescued

-- job_outage_grace --
-- Since when the server has been up (x_server_up_since, 0022) and the database's now: the
-- sweep logs, once per restart, until when the leases that ran out while it was down are held.
select x_server_up_since(), now()

-- job_expire --
-- The candidates come from x_job_claimable (migration 0019: the claimable jobs only), not a scan
-- of every row x_jobs keeps; the job is locked first, as every claimability change does.
with gone as materialized (
    select j.id from x_job_claimable as c
      join x_jobs as j on j.id = c.id
     where j.state = 'ready' and j.expires_at is not null
       and j.expires_at <= coalesce(%(now)s, now())
     limit %(limit)s
     for update of j skip locked
)
update x_jobs as j
   set state = 'cancelled', last_error = %(error)s, updated_at = now(), finished_at = now()
  from gone
 where j.id = gone.id
returning j.id

-- job_cancel --
-- A running job's cancel ends its attempt: the lease row goes and the attempt is appended to
-- x_job_attempts as `cancelled` (the body's own settle is fenced by then and records nothing).
-- Through x_job_cancel (migration 0023), which an operator may call.
select id from x_job_cancel(%(id)s, %(error)s) as id

-- job_requeue --
-- Through x_job_requeue (migration 0023), which an operator may call.
select id from x_job_requeue(%(id)s, %(now)s::timestamptz) as id

-- job_get --
-- Through x_job_get (migration 0023): a producer reads one job by its id, and nothing else.
select id, name, queue, input, output, idempotency_key, attempt, max_attempts, state, priority,
       run_at, lease_expires_at, claimed_by, expires_at, last_error, tenant_id, traceparent,
       enqueued_by, created_at, updated_at, finished_at, failure_kind
  from x_job_get(%(id)s)

-- job_list --
-- State `dead` with `kind` null lists the dead letters; with a `kind` (migration 0024), the dead
-- rows a package ended with that failure kind. `name_like` is a LIKE pattern (a glob translated by the caller, `\` escapes); `ids` narrows to
-- given rows (a Celery task id's jobs); newest first, in the order of x_jobs_created_idx
-- (migration 0016: created_at never changes, so a settle stays HOT), so a page is read from that
-- index, not by sorting the table. Paged by key: `before_at`/`before_id` (the last row of the
-- previous page) start the page after it, from the index; `offset` skips rows after that.
-- The lines that repeat `state` name the smaller set holding that state's rows (the dead and
-- the suspended ones: a partial index; the claimable ones: x_job_claimable, migration 0019,
-- whose ids are looked up in x_jobs' primary key), so a rare state can be read from it
-- instead of walking the whole creation order; with parameters bound they fold to that set.
select id, name, queue, input, output, idempotency_key, attempt, max_attempts, state, priority,
       run_at, lease_expires_at, claimed_by, expires_at, last_error, tenant_id, traceparent,
       enqueued_by, created_at, updated_at, finished_at, failure_kind
  from x_jobs
 where (%(state)s::text is null or state = %(state)s)
   and (%(state)s::text is distinct from 'dead' or dead_at is not null)
   and (%(state)s::text is distinct from 'dead' or failure_kind is not distinct from %(kind)s::text)
   and (%(state)s::text is null or %(state)s::text not in ('ready', 'sleeping', 'waiting')
        or id = any(array(select c.id from x_job_claimable as c
                           where %(queue)s::text is null or c.queue = %(queue)s)))
   and (%(state)s::text is null or %(state)s::text not in ('sleeping', 'waiting')
        or suspended = %(state)s::text)
   and (%(queue)s::text is null or queue = %(queue)s)
   and (%(name_like)s::text is null or name like %(name_like)s)
   and (%(ids)s::uuid[] is null or id = any(%(ids)s::uuid[]))
   and (%(since)s::timestamptz is null or created_at >= %(since)s)
   and (%(until)s::timestamptz is null or created_at < %(until)s)
   and (%(before_at)s::timestamptz is null or created_at <= %(before_at)s)
   and (%(before_at)s::timestamptz is null or created_at < %(before_at)s
        or id > %(before_id)s::uuid)
 order by created_at desc, id
 limit %(limit)s offset %(offset)s

-- job_count_matching --
-- How many rows a bulk cancel or requeue with the same filter would consider. `state` as the
-- views show it: `dead` the dead letters, a failure kind (FAILURE) the dead rows of that kind.
select count(*)
  from x_jobs
 where (%(state)s::text is null
        or (state = %(state)s and (state <> 'dead' or failure_kind is null))
        or (state = 'dead' and failure_kind = %(state)s))
   and (%(queue)s::text is null or queue = %(queue)s)
   and (%(name_like)s::text is null or name like %(name_like)s)
   and (%(ids)s::uuid[] is null or id = any(%(ids)s::uuid[]))
   and state = any(%(states)s::text[])

-- job_cancel_matching --
-- Every live row matching the filter, cancelled as `job_cancel` does (a running body is
-- signalled through x_jobs_cancel, its attempt recorded `cancelled`); the count cancelled.
-- Through x_jobs_cancel_matching (migration 0023), which an operator may call.
select x_jobs_cancel_matching(%(state)s, %(queue)s, %(name_like)s, %(ids)s::uuid[], %(error)s)

-- job_discard_matching --
-- Every dead row matching the filter, deleted (steps cascade, attempts beside it); the count of
-- rows deleted. Through x_jobs_discard_matching (migration 0023), which an operator may call.
select x_jobs_discard_matching(%(state)s, %(queue)s, %(name_like)s, %(ids)s::uuid[])

-- job_requeue_matching --
-- Every dead or cancelled row matching the filter, requeued as `job_requeue` does, except one
-- whose idempotency key a live job holds (it would collide); the count of rows requeued.
-- Through x_jobs_requeue_matching (migration 0023), which an operator may call.
select x_jobs_requeue_matching(%(state)s, %(queue)s, %(name_like)s, %(ids)s::uuid[],
                               %(now)s::timestamptz)

-- job_dead --
-- The dead letters: dead rows without a failure kind (migration 0024; a package's own terminal
-- failures are listed by `job_list` under their kind).
select id, name, queue, input, output, idempotency_key, attempt, max_attempts, state, priority,
       run_at, lease_expires_at, claimed_by, expires_at, last_error, tenant_id, traceparent,
       enqueued_by, created_at, updated_at, finished_at, failure_kind
  from x_jobs
 where dead_at is not null
   and failure_kind is null
   and (%(queue)s::text is null or queue = %(queue)s)
   and (%(name_like)s::text is null or name like %(name_like)s)
 order by dead_at desc, id
 limit %(limit)s offset %(offset)s

-- job_stats --
-- Per queue and state; dead rows per failure kind too (migration 0024: null for dead letters).
select queue, state, count(*) as jobs, min(run_at) as oldest_run_at,
       case when state = 'dead' then failure_kind end as failure_kind
  from x_jobs
 group by queue, state, 5
 order by queue, state, 5 nulls first

-- job_unregistered --
-- Due jobs on the worker's queues whose name it does not declare, due for at least after_s
-- seconds, grouped by (queue, name). Only the head of each queue in claim order is read (at most
-- `scan` rows per queue, on x_job_claimable's claim index, migration 0019): nothing claims such
-- a job, so as the jobs around it are claimed it moves to the head of its priority band and is
-- seen. An age is counted from year 1 at the earliest: a run_at of -infinity or BC (written by
-- hand) is the age Python reads such an instant as (db/far_instants.py), and subtracting an
-- infinite timestamp would fail the statement. job_stranded counts ages the same way.
select q.queue, h.name, count(*) as jobs, min(h.run_at) as oldest_run_at,
       extract(epoch from coalesce(%(now)s, now())
                          - greatest(min(h.run_at), timestamptz '0001-01-01 00:00:00+00'))::float8
           as oldest_s
  from unnest(%(queues)s::text[]) as q(queue)
 cross join lateral (
     select name, run_at from x_job_claimable
      where queue = q.queue
        and run_at <= coalesce(%(now)s, now()) - make_interval(secs => %(after_s)s)
      order by priority desc, run_at, id
      limit %(scan)s
 ) as h
 where h.name <> all(%(names)s::text[])
 group by q.queue, h.name
 order by q.queue, h.name

-- job_stranded --
-- Claimable jobs (ready, or suspended and due) due for at least after_s seconds and still
-- not claimed, per queue, state and name: what `jobs stats` reports as waiting longer than it should.
-- The due rows of x_job_claimable (migration 0019), each job's state read by primary key.
select c.queue, j.state, c.name, count(*) as jobs, min(c.run_at) as oldest_run_at,
       extract(epoch from coalesce(%(now)s, now())
                          - greatest(min(c.run_at), timestamptz '0001-01-01 00:00:00+00'))::float8
           as oldest_s
  from x_job_claimable as c
  join x_jobs as j on j.id = c.id
 where c.run_at <= coalesce(%(now)s, now()) - make_interval(secs => %(after_s)s)
 group by c.queue, j.state, c.name
 order by c.queue, j.state, c.name

-- job_dead_unregistered --
-- Dead-letter the due jobs of one queue whose name the worker does not declare, nor any other
-- live worker node consuming that queue (its presence row lists what it registered), and that
-- have been due for at least after_s seconds (opt-in: WorkerConfig.unregistered_dead_after_s),
-- counted in x_job_counts as the settle counts its dead letters.
-- Read and locked as the claim does (x_job_claimable, then the jobs, both SKIP LOCKED).
with head as materialized (
    select c.id from x_job_claimable as c
     where c.queue = %(queue)s
       and c.name <> all(%(names)s::text[])
       and c.run_at <= coalesce(%(now)s, now()) - make_interval(secs => %(after_s)s)
       and not exists (
           select from x_worker_nodes as n
            where n.expires_at > coalesce(%(now)s, now())
              and c.queue = any(n.queues)
              and coalesce(n.info -> 'registered', '[]'::jsonb) ? c.name)
     order by c.priority desc, c.run_at, c.id
     limit %(limit)s
     for update of c skip locked
), stranded as materialized (
    select j.id from x_jobs as j join head on head.id = j.id
     where j.claimable
     for update of j skip locked
), killed as (
    update x_jobs as j
       set state = 'dead', last_error = replace(%(error)s, '{name}', j.name), updated_at = now(),
           failure_kind = null, finished_at = now()
      from stranded
     where j.id = stranded.id
    returning j.id, j.name, j.queue
), counted as (
    insert into x_job_counts as c (minute, queue, backend, dead)
    select date_trunc('minute', now()), queue, pg_backend_pid(), count(*)
      from killed
     group by queue
    on conflict (minute, queue, backend) do update set dead = c.dead + excluded.dead
)
select id, name from killed

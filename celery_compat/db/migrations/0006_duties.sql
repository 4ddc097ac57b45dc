-- 0006_duties: what a producer role (`ujobs-bridge db grant --producer`, no row privilege on any
-- table) needs of celery_compat's tables to send Celery tasks and read their results by id, as
-- functions that run as the schema owner (SECURITY DEFINER) with a fixed search_path.
-- Forward-only. Part `celery_compat` of the schema, applied after the engine's 0023_duties, which
-- says how `db grant` reads the duties a function serves from its comment.
--
-- A role with row privileges (a worker, an application role) keeps its plain statements
-- (sql/celery.sql); celery_compat takes these functions only where its role lacks them
-- (db/row_access.py). Each reads or writes exactly what the statement it stands for does, and
-- nothing a producer could use to list or change other rows.

-- Celery messages with no send key (a producer's .delay(), apply_async, send_task, a group's
-- sends) through the engine's one insert: a message for a revoked task id is born cancelled with
-- p_revoked_reason, as celery_enqueue and celery_enqueue_many write it. A keyed send (a beat
-- occurrence, a send from a running body, a drained message) is a worker's: it writes the ledger.
create function x_celery_send(p_now timestamptz, p_task_ids text[], p_ids uuid[],
                              p_names text[], p_queues text[], p_inputs text[],
                              p_max_attempts int[], p_priorities smallint[],
                              p_run_ats timestamptz[], p_traceparents text[],
                              p_revoked_reason text)
returns setof uuid language sql volatile security definer as $fn$
    with u as (
        select u.task_id, u.id, u.name, u.queue, u.input, u.max_attempts, u.priority, u.run_at,
               u.traceparent, u.ord
          from unnest(p_task_ids, p_ids, p_names, p_queues, p_inputs, p_max_attempts,
                      p_priorities, p_run_ats, p_traceparents)
               with ordinality
            as u(task_id, id, name, queue, input, max_attempts, priority, run_at, traceparent,
                 ord)
    ), kept as (
        select array_agg(u.id order by u.ord) as ids,
               array_agg(u.name order by u.ord) as names,
               array_agg(u.queue order by u.ord) as queues,
               array_agg(u.input order by u.ord) as inputs,
               array_agg(u.max_attempts order by u.ord) as max_attempts,
               array_agg(u.priority order by u.ord) as priorities,
               array_agg(u.run_at order by u.ord) as run_ats,
               array_agg(0::float8 order by u.ord) as delays,
               array_agg(u.traceparent order by u.ord) as traceparents,
               array_agg('celery_compat'::text order by u.ord) as enqueued_bys,
               array_agg(case when r.task_id is null then null else p_revoked_reason end
                         order by u.ord) as cancel_reasons
          from u
          left join x_celery_revoked as r on r.task_id = u.task_id
    )
    select x.id
      from kept
     cross join lateral x_jobs_insert(
               p_now, kept.ids, kept.names, kept.queues, kept.inputs, null, kept.max_attempts,
               kept.priorities, kept.run_ats, kept.delays, null, null, null, kept.traceparents,
               kept.enqueued_bys, kept.cancel_reasons) as x(id)
     where kept.ids is not null
$fn$;

-- A stored result by its key (`celery-task-meta-<task id>`, a group's `celery-taskset-meta-<id>`):
-- celery_result_get and celery_result_mget. Exact keys only: nothing lists the store.
create function x_celery_result_get(p_keys text[], p_now timestamptz)
returns table (key text, value text) language sql stable security definer as $fn$
    select r.key, r.value from x_celery_results as r
     where r.key = any(p_keys) and (r.expires_at is null or r.expires_at > coalesce(p_now, now()))
$fn$;

-- A group's saved result (GroupResult.save, and the header a chord saves, with its size under
-- `<key>.s`), written once: only group keys, and never over a stored one (a producer can neither
-- forge a task's result nor replace a group another process saved).
create function x_celery_group_save(p_key text, p_value text, p_ttl_s float8, p_now timestamptz)
returns setof text language sql volatile security definer as $fn$
    with saved as (
        insert into x_celery_results (key, value, expires_at, updated_at, status)
        select p_key, p_value,
               case when p_ttl_s is null then null
                    else coalesce(p_now, now()) + make_interval(secs => p_ttl_s) end,
               now(), null
         where p_key like 'celery-taskset-meta-%'
        on conflict (key) do nothing
        returning key
    )
    select s.key from saved as s cross join lateral (select pg_notify('x_celery_results', s.key)) as n
$fn$;

-- How long a group's saved result is kept (a chord's header is kept for the chord's life):
-- celery_result_expire of a group key, and only of one.
create function x_celery_group_expire(p_key text, p_ttl_s float8, p_now timestamptz)
returns setof text language sql volatile security definer as $fn$
    update x_celery_results
       set expires_at = coalesce(p_now, now()) + make_interval(secs => p_ttl_s)
     where key = p_key and key like 'celery-taskset-meta-%'
    returning key
$fn$;

-- The job rows of one Celery task id (celery_jobs_of_task): what AsyncResult.state answers for an
-- id whose stored meta is not final (dead-lettered, revoked).
create function x_celery_jobs_of_task(p_task_id text, p_include_done boolean)
returns table (id uuid, state text, last_error text, updated_at timestamptz)
language sql stable security definer as $fn$
    select j.id, j.state, j.last_error, j.updated_at
      from x_jobs as j
     where coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id') = p_task_id
       and j.enqueued_by = 'celery_compat' and (p_include_done or j.state <> 'done')
     order by j.created_at desc, j.id desc
$fn$;

-- Which of these task ids went through Postgres (celery_task_ids_sent_here).
create function x_celery_task_ids_sent_here(p_task_ids text[])
returns setof text language sql stable security definer as $fn$
    select distinct coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id')
      from x_jobs as j
     where coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id') = any(p_task_ids)
       and j.enqueued_by = 'celery_compat'
$fn$;

comment on function x_celery_send(timestamptz, text[], uuid[], text[], text[], text[], int[],
                                  smallint[], timestamptz[], text[], text)
    is 'duties: producer worker. Celery messages with no send key, as job rows.';
comment on function x_celery_result_get(text[], timestamptz)
    is 'duties: producer worker. Stored Celery results by their keys.';
comment on function x_celery_group_save(text, text, float8, timestamptz)
    is 'duties: producer worker. Save the result of a group once (GroupResult.save, a chord header).';
comment on function x_celery_group_expire(text, float8, timestamptz)
    is 'duties: producer worker. How long the saved result of a group is kept.';
comment on function x_celery_jobs_of_task(text, boolean)
    is 'duties: producer worker. The job rows of one Celery task id.';
comment on function x_celery_task_ids_sent_here(text[])
    is 'duties: producer worker. Which task ids went through Postgres.';

-- A fixed search_path, no EXECUTE for PUBLIC; a role that may call the engine's insert (a
-- producer or an application role `db grant` made before this upgrade) may call these too.
do $do$
declare
    v_fn   regprocedure;
    v_role regrole;
begin
    foreach v_fn in array array[
        'x_celery_send(timestamptz, text[], uuid[], text[], text[], text[], int[], smallint[],'
        ' timestamptz[], text[], text)'::regprocedure,
        'x_celery_result_get(text[], timestamptz)'::regprocedure,
        'x_celery_group_save(text, text, float8, timestamptz)'::regprocedure,
        'x_celery_group_expire(text, float8, timestamptz)'::regprocedure,
        'x_celery_jobs_of_task(text, boolean)'::regprocedure,
        'x_celery_task_ids_sent_here(text[])'::regprocedure]
    loop
        execute format('alter function %s set search_path = %I, pg_temp', v_fn, current_schema());
        execute format('revoke execute on function %s from public', v_fn);
        for v_role in
            select distinct a.grantee::regrole
              from pg_proc as p cross join lateral aclexplode(p.proacl) as a
             where p.pronamespace = current_schema()::regnamespace
               and p.proname = 'x_jobs_insert' and a.privilege_type = 'EXECUTE'
               and a.grantee <> 0 and a.grantee <> p.proowner
        loop
            execute format('grant execute on function %s to %s', v_fn, v_role);
        end loop;
    end loop;
end
$do$;

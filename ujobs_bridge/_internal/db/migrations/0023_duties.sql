-- 0023_duties: the writes and reads a role without row privileges may make, as functions that run
-- as the schema owner (SECURITY DEFINER) with a fixed search_path, each executable only by the
-- roles `ujobs-bridge db grant` gives it to (never by PUBLIC).
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.
--
-- `db grant` reads the duties each function serves from its comment ("duties: producer worker"):
-- a producer enqueues (x_jobs_insert) and reads one job by its id (x_job_get, x_job_live_by_key);
-- an operator steers what the dashboard and the CLI steer (x_job_cancel, x_job_requeue,
-- x_jobs_*_matching). A package above the engine declares its own functions the same way in
-- its own migrations (migrate's 0002_duties).

-- The one insert runs as the owner: a producer holds no row privilege on x_jobs.
alter function x_jobs_insert(timestamptz, uuid[], text[], text[], text[], text[], int[],
                             smallint[], timestamptz[], float8[], timestamptz[], float8[],
                             text[], text[], text[], text[])
    security definer;

-- One job by its id (the columns `job_get` reads): nothing else of the table is reachable.
create function x_job_get(p_id uuid)
returns table (
    id uuid, name text, queue text, input jsonb, output jsonb, idempotency_key text,
    attempt integer, max_attempts integer, state text, priority smallint,
    run_at timestamptz, lease_expires_at timestamptz, claimed_by text, expires_at timestamptz,
    last_error text, tenant_id text, traceparent text, enqueued_by text,
    created_at timestamptz, updated_at timestamptz, finished_at timestamptz
) language sql stable security definer as $fn$
    select j.id, j.name, j.queue, j.input, j.output, j.idempotency_key, j.attempt,
           j.max_attempts, j.state, j.priority, j.run_at, j.lease_expires_at, j.claimed_by,
           j.expires_at, j.last_error, j.tenant_id, j.traceparent, j.enqueued_by, j.created_at,
           j.updated_at, j.finished_at
      from x_jobs as j
     where j.id = p_id
$fn$;

-- The id of the live job holding an idempotency key (the enqueue's answer when it holds it).
create function x_job_live_by_key(p_key text)
returns setof uuid language sql stable security definer as $fn$
    select j.id from x_jobs as j where j.live_key = p_key
$fn$;

-- The dashboard's (and the CLI's) actions on every row a filter matches, exactly as the
-- statements they replace (sql/jobs.sql): cancel live rows, requeue dead or cancelled ones,
-- delete dead ones. Each answers the count it changed.
create function x_jobs_cancel_matching(p_state text, p_queue text, p_name_like text,
                                       p_ids uuid[], p_error text)
returns bigint language sql volatile security definer as $fn$
    with old as materialized (
        select j.id, j.lease_token, j.attempt from x_jobs as j
         where j.state in ('ready', 'running', 'sleeping', 'waiting')
           and (p_state is null or j.state = p_state)
           and (p_queue is null or j.queue = p_queue)
           and (p_name_like is null or j.name like p_name_like)
           and (p_ids is null or j.id = any(p_ids))
           for update
    ), target as (
        update x_jobs as j
           set state = 'cancelled', lease_token = null, lease_expires_at = null,
               claimed_by = null, last_error = p_error, updated_at = now(), finished_at = now()
          from old
         where j.id = old.id
        returning j.id, j.updated_at
    ), released as (
        delete from x_job_leases as l using old
         where l.job_id = old.id and l.token = old.lease_token
        returning l.job_id, l.token, l.worker, l.claimed_at, l.attempt
    ), attempted as (
        insert into x_job_attempts
            (job_id, token, attempt, worker, claimed_at, finished_at, outcome, error)
        select r.job_id, r.token, coalesce(r.attempt, o.attempt), r.worker, r.claimed_at,
               t.updated_at, 'cancelled', p_error
          from released as r
          join target as t on t.id = r.job_id
          join old as o on o.id = r.job_id
        on conflict do nothing
    ), notified as (
        select pg_notify('x_jobs_cancel', target.id::text) from target
    )
    select count(*) from notified
$fn$;

create function x_jobs_requeue_matching(p_state text, p_queue text, p_name_like text,
                                        p_ids uuid[], p_now timestamptz)
returns bigint language sql volatile security definer as $fn$
    with target as (
        update x_jobs as j
           set state = 'ready', attempt = 0, run_at = coalesce(p_now, now()), output = null,
               lease_token = null, lease_expires_at = null, claimed_by = null,
               updated_at = now(), finished_at = null
         where j.state in ('dead', 'cancelled')
           and (p_state is null or j.state = p_state)
           and (p_queue is null or j.queue = p_queue)
           and (p_name_like is null or j.name like p_name_like)
           and (p_ids is null or j.id = any(p_ids))
           and (j.idempotency_key is null or not exists (
                select 1 from x_jobs as live
                 where live.idempotency_key = j.idempotency_key
                   and live.state in ('ready', 'running', 'sleeping', 'waiting')))
        returning j.id
    )
    select count(*) from target
$fn$;

create function x_jobs_discard_matching(p_state text, p_queue text, p_name_like text,
                                        p_ids uuid[])
returns bigint language sql volatile security definer as $fn$
    with target as (
        delete from x_jobs as j
         where j.state = 'dead'
           and (p_state is null or j.state = p_state)
           and (p_queue is null or j.queue = p_queue)
           and (p_name_like is null or j.name like p_name_like)
           and (p_ids is null or j.id = any(p_ids))
        returning j.id
    ), attempts as (
        delete from x_job_attempts as a using target where a.job_id = target.id
    )
    select count(*) from target
$fn$;

-- One job by hand (the CLI's `jobs cancel ID` and `jobs requeue ID`, Celery's revoke), exactly
-- as the statements they replace: the id when the job was in a state the action applies to.
create function x_job_cancel(p_id uuid, p_error text)
returns setof uuid language sql volatile security definer as $fn$
    with old as materialized (
        select j.id, j.lease_token, j.attempt from x_jobs as j
         where j.id = p_id and j.state in ('ready', 'running', 'sleeping', 'waiting')
           for update
    ), target as (
        update x_jobs as j
           set state = 'cancelled', lease_token = null, lease_expires_at = null,
               claimed_by = null, last_error = p_error, updated_at = now(), finished_at = now()
          from old
         where j.id = old.id
        returning j.id, j.updated_at
    ), released as (
        delete from x_job_leases as l using old
         where l.job_id = old.id and l.token = old.lease_token
        returning l.job_id, l.token, l.worker, l.claimed_at, l.attempt
    ), attempted as (
        insert into x_job_attempts
            (job_id, token, attempt, worker, claimed_at, finished_at, outcome, error)
        select r.job_id, r.token, coalesce(r.attempt, o.attempt), r.worker, r.claimed_at,
               t.updated_at, 'cancelled', p_error
          from released as r
          join target as t on t.id = r.job_id
          join old as o on o.id = r.job_id
        on conflict do nothing
    ), notified as (
        select target.id, pg_notify('x_jobs_cancel', target.id::text) from target
    )
    select notified.id from notified
$fn$;

create function x_job_requeue(p_id uuid, p_now timestamptz)
returns setof uuid language sql volatile security definer as $fn$
    update x_jobs
       set state = 'ready', attempt = 0, run_at = coalesce(p_now, now()), output = null,
           lease_token = null, lease_expires_at = null, claimed_by = null,
           updated_at = now(), finished_at = null
     where id = p_id and state in ('dead', 'cancelled')
    returning id
$fn$;

comment on function x_jobs_insert(timestamptz, uuid[], text[], text[], text[], text[], int[],
                                  smallint[], timestamptz[], float8[], timestamptz[], float8[],
                                  text[], text[], text[], text[])
    is 'duties: producer worker. The one insert of job rows.';
comment on function x_job_get(uuid) is 'duties: producer worker reader. One job by its id.';
comment on function x_job_live_by_key(text)
    is 'duties: producer worker. The live job holding an idempotency key.';
comment on function x_job_cancel(uuid, text)
    is 'duties: operator worker. Cancel one live job.';
comment on function x_job_requeue(uuid, timestamptz)
    is 'duties: operator worker. Requeue one ended job.';
comment on function x_jobs_cancel_matching(text, text, text, uuid[], text)
    is 'duties: operator worker. Cancel the live jobs a filter matches.';
comment on function x_jobs_requeue_matching(text, text, text, uuid[], timestamptz)
    is 'duties: operator worker. Requeue the ended jobs a filter matches.';
comment on function x_jobs_discard_matching(text, text, text, uuid[])
    is 'duties: operator worker. Delete the dead jobs a filter matches.';

-- A fixed search_path (this schema, then pg_temp last) on every SECURITY DEFINER function, and
-- no EXECUTE for PUBLIC: only the roles granted a duty may call them. A role an older
-- `db grant` gave row privileges on x_jobs (it could write every row directly) keeps enqueueing
-- and steering after this upgrade: it is granted these functions until `db grant` names its
-- duties again.
do $do$
declare
    v_fn   regprocedure;
    v_role regrole;
begin
    for v_fn in
        select p.oid::regprocedure from pg_proc as p
         where p.pronamespace = current_schema()::regnamespace and p.prosecdef
           and p.proname like 'x\_%'
    loop
        execute format('alter function %s set search_path = %I, pg_temp', v_fn, current_schema());
        execute format('revoke execute on function %s from public', v_fn);
        for v_role in
            select distinct a.grantee::regrole
              from pg_class as c cross join lateral aclexplode(c.relacl) as a
             where c.oid = 'x_jobs'::regclass and a.privilege_type = 'INSERT'
               and a.grantee <> 0 and a.grantee <> c.relowner
        loop
            execute format('grant execute on function %s to %s', v_fn, v_role);
        end loop;
    end loop;
end
$do$;

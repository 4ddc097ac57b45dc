-- 0024_failure_kind: a dead job says what kind of failure ended it, so the views tell a package's
-- own terminal failures (a body that failed for good by its package's rules) from the engine's
-- dead letters (attempts spent, a worker lost each time, a discard).
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.
--
-- failure_kind  null: a dead letter; else the word the body's package gave its failure (set by
--               the settle from the `Fail` outcome). Views show it where they show the state.
-- Adding a nullable column without a default rewrites nothing.
alter table x_jobs add column failure_kind text;

-- The dead rows are counted per queue and kind from the index alone (neither ever changes
-- after the settle that made the row dead, so this costs no HOT update).
drop index x_jobs_dead_idx;
create index x_jobs_dead_idx on x_jobs (dead_at desc, id) include (queue, failure_kind)
    where dead_at is not null;

-- x_job_get answers the kind too. Its return type changes, so it is dropped and made again with
-- the same duties, search_path and EXECUTE grants it had.
create temporary table x_job_get_grantees on commit drop as
    select distinct a.grantee::regrole as grantee
      from pg_proc as p cross join lateral aclexplode(p.proacl) as a
     where p.oid = 'x_job_get(uuid)'::regprocedure and a.privilege_type = 'EXECUTE'
       and a.grantee <> 0 and a.grantee <> p.proowner;

drop function x_job_get(uuid);

create function x_job_get(p_id uuid)
returns table (
    id uuid, name text, queue text, input jsonb, output jsonb, idempotency_key text,
    attempt integer, max_attempts integer, state text, priority smallint,
    run_at timestamptz, lease_expires_at timestamptz, claimed_by text, expires_at timestamptz,
    last_error text, tenant_id text, traceparent text, enqueued_by text,
    created_at timestamptz, updated_at timestamptz, finished_at timestamptz, failure_kind text
) language sql stable security definer as $fn$
    select j.id, j.name, j.queue, j.input, j.output, j.idempotency_key, j.attempt,
           j.max_attempts, j.state, j.priority, j.run_at, j.lease_expires_at, j.claimed_by,
           j.expires_at, j.last_error, j.tenant_id, j.traceparent, j.enqueued_by, j.created_at,
           j.updated_at, j.finished_at, j.failure_kind
      from x_jobs as j
     where j.id = p_id
$fn$;

comment on function x_job_get(uuid) is 'duties: producer worker reader. One job by its id.';

do $do$
declare
    v_role regrole;
begin
    execute format('alter function x_job_get(uuid) set search_path = %I, pg_temp',
                   current_schema());
    revoke execute on function x_job_get(uuid) from public;
    for v_role in select grantee from x_job_get_grantees loop
        execute format('grant execute on function x_job_get(uuid) to %s', v_role);
    end loop;
end
$do$;

-- The bulk steers take a state as the views show it: `dead` is the dead letters (no failure
-- kind), a failure kind (`FAILURE`) the dead rows of that kind, so the dead-letter page's
-- "every one matching" and `jobs requeue --state dead` reach only what they list. Same
-- signatures: CREATE OR REPLACE keeps their owner, grants and comments; SECURITY DEFINER and
-- the fixed search_path are set again below.
create or replace function x_jobs_requeue_matching(p_state text, p_queue text, p_name_like text,
                                                   p_ids uuid[], p_now timestamptz)
returns bigint language sql volatile security definer as $fn$
    with target as (
        update x_jobs as j
           set state = 'ready', attempt = 0, run_at = coalesce(p_now, now()), output = null,
               lease_token = null, lease_expires_at = null, claimed_by = null,
               updated_at = now(), finished_at = null
         where j.state in ('dead', 'cancelled')
           and (p_state is null
                or (j.state = p_state and (j.state <> 'dead' or j.failure_kind is null))
                or (j.state = 'dead' and j.failure_kind = p_state))
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

create or replace function x_jobs_discard_matching(p_state text, p_queue text, p_name_like text,
                                                   p_ids uuid[])
returns bigint language sql volatile security definer as $fn$
    with target as (
        delete from x_jobs as j
         where j.state = 'dead'
           and (p_state is null
                or (j.state = p_state and j.failure_kind is null)
                or j.failure_kind = p_state)
           and (p_queue is null or j.queue = p_queue)
           and (p_name_like is null or j.name like p_name_like)
           and (p_ids is null or j.id = any(p_ids))
        returning j.id
    ), attempts as (
        delete from x_job_attempts as a using target where a.job_id = target.id
    )
    select count(*) from target
$fn$;

do $do$
begin
    execute format('alter function x_jobs_requeue_matching(text, text, text, uuid[], timestamptz)'
                   ' set search_path = %I, pg_temp', current_schema());
    execute format('alter function x_jobs_discard_matching(text, text, text, uuid[])'
                   ' set search_path = %I, pg_temp', current_schema());
end
$do$;

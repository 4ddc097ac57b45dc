-- 0025_wake_one: an insert wakes one waiting worker per job, on that worker's own channel.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Why: since 0021 an insert into a queue some worker waits for notified x_jobs_ready, which every
-- listening worker hears: one insert woke every idle worker of the fleet, all claimed, and all but
-- one found nothing. The fleet damped that herd by pausing a worker after an empty claim, and the
-- pause then delayed the next job's pick-up by a few milliseconds in any fleet of more than one
-- worker. Now each mark carries the channel its worker listens on alone, and an insert of N ready
-- jobs notifies at most N marked workers of that queue, picked at random so that an idle fleet
-- shares the work: one job, one wake-up, one claim. A mark is still a hint: a worker that
-- misses its notification (a dropped listen connection, a stopping process) polls.
--
-- channel  the worker's own LISTEN channel; null for a mark written by a worker of an older
--          version, which hears only x_jobs_ready: such marks still get that notification.
alter table x_queue_waiters add column channel text;

-- Wake up to p_jobs of the workers waiting for p_queue (each on its own channel; a queue with an
-- older worker's mark also gets the shared x_jobs_ready). Answers the notifications sent. Run as
-- the owner: producers and workers read no mark themselves. The marks are read, never locked or
-- changed, so a sender's transaction holds nothing a worker's mark could wait for.
create function x_jobs_wake(p_queue text, p_jobs integer)
returns integer language plpgsql volatile security definer as $fn$
declare
    v_channel text;
    v_sent    integer := 0;
begin
    for v_channel in
        select w.channel from x_queue_waiters as w
         where w.queue = p_queue and w.channel is not null
         order by random()
         limit greatest(p_jobs, 0)
    loop
        perform pg_notify(v_channel, p_queue);
        v_sent := v_sent + 1;
    end loop;
    if exists (select from x_queue_waiters as w where w.queue = p_queue and w.channel is null) then
        perform pg_notify('x_jobs_ready', p_queue);
        v_sent := v_sent + 1;
    end if;
    return v_sent;
end
$fn$;

comment on function x_jobs_wake(text, integer)
    is 'duties: producer worker. Wake the workers waiting for a queue that got ready jobs.';

-- x_jobs_insert (0008, 0012, 0017, 0021) with the same signature, columns and values; its
-- wake-up goes through x_jobs_wake. CREATE OR REPLACE keeps its owner, comment and grants; it
-- is declared SECURITY DEFINER again (0023) and its fixed search_path is set again below.
create or replace function x_jobs_insert(
    p_now              timestamptz,
    p_ids              uuid[],
    p_names            text[],
    p_queues           text[],
    p_inputs           text[],
    p_idempotency_keys text[],
    p_max_attempts     int[],
    p_priorities       smallint[],
    p_run_ats          timestamptz[],
    p_delays           float8[],
    p_expires_ats      timestamptz[],
    p_expires_ins      float8[],
    p_tenant_ids       text[],
    p_traceparents     text[],
    p_enqueued_bys     text[],
    p_cancel_reasons   text[]
) returns setof uuid language plpgsql volatile security definer as $fn$
declare
    v_due   timestamptz;
    v_id    uuid;
    v_queue text;
    v_state text;
begin
    -- One row (a .delay(), an enqueue): the insert below without unnest and its CTEs.
    if cardinality(p_ids) = 1 then
        v_due := coalesce(p_run_ats[1],
                          coalesce(p_now, now()) + make_interval(secs => p_delays[1]));
        insert into x_jobs
            (id, name, queue, input, idempotency_key, max_attempts, priority, run_at, expires_at,
             state, last_error, finished_at, tenant_id, traceparent, enqueued_by,
             created_at, updated_at)
        values (p_ids[1], p_names[1], p_queues[1], p_inputs[1]::jsonb, p_idempotency_keys[1],
                p_max_attempts[1], p_priorities[1], v_due,
                coalesce(p_expires_ats[1], v_due + make_interval(secs => p_expires_ins[1])),
                case when p_cancel_reasons[1] is null then 'ready' else 'cancelled' end,
                p_cancel_reasons[1],
                case when p_cancel_reasons[1] is null then null else now() end,
                p_tenant_ids[1], p_traceparents[1], p_enqueued_bys[1], now(), now())
        on conflict do nothing
        returning x_jobs.id, x_jobs.queue, x_jobs.state into v_id, v_queue, v_state;
        if v_id is not null then
            if v_state = 'ready' then
                perform x_jobs_wake(v_queue, 1);
            end if;
            return next v_id;
        end if;
        return;
    end if;
    return query
    with inserted as (
        insert into x_jobs
            (id, name, queue, input, idempotency_key, max_attempts, priority, run_at, expires_at,
             state, last_error, finished_at, tenant_id, traceparent, enqueued_by,
             created_at, updated_at)
        select u.id, u.name, u.queue, u.input::jsonb, u.idempotency_key, u.max_attempts,
               u.priority, u.due,
               coalesce(u.expires_at, u.due + make_interval(secs => u.expires_in_s)),
               case when u.cancel_reason is null then 'ready' else 'cancelled' end,
               u.cancel_reason,
               case when u.cancel_reason is null then null else now() end,
               u.tenant_id, u.traceparent, u.enqueued_by, now(), now()
          from (
            select r.*,
                   coalesce(r.run_at, coalesce(p_now, now()) + make_interval(secs => r.delay_s))
                       as due
              from unnest(p_ids, p_names, p_queues, p_inputs, p_idempotency_keys,
                          p_max_attempts, p_priorities, p_run_ats, p_delays, p_expires_ats,
                          p_expires_ins, p_tenant_ids, p_traceparents, p_enqueued_bys,
                          p_cancel_reasons)
                as r(id, name, queue, input, idempotency_key, max_attempts, priority, run_at,
                     delay_s, expires_at, expires_in_s, tenant_id, traceparent, enqueued_by,
                     cancel_reason)
          ) as u
        on conflict do nothing
        returning x_jobs.id, x_jobs.queue, x_jobs.state
    ), woken as materialized (
        select sum(x_jobs_wake(q.queue, q.jobs)) as notified
          from (select queue, count(*)::int as jobs from inserted where state = 'ready'
                 group by queue) as q
    )
    select inserted.id from inserted cross join woken;
end
$fn$;

-- The new function as 0023 made the others: a fixed search_path, no EXECUTE for PUBLIC, and
-- EXECUTE for every role that may run x_jobs_insert (the roles `db grant` gave a duty).
do $do$
declare
    v_role regrole;
begin
    execute format('alter function x_jobs_wake(text, integer) set search_path = %I, pg_temp',
                   current_schema());
    execute format('alter function x_jobs_insert(timestamptz, uuid[], text[], text[], text[],'
                   ' text[], int[], smallint[], timestamptz[], float8[], timestamptz[],'
                   ' float8[], text[], text[], text[], text[]) set search_path = %I, pg_temp',
                   current_schema());
    revoke execute on function x_jobs_wake(text, integer) from public;
    for v_role in
        select distinct a.grantee::regrole
          from pg_proc as p cross join lateral aclexplode(p.proacl) as a
         where p.oid = 'x_jobs_insert(timestamptz, uuid[], text[], text[], text[], text[], int[],
                       smallint[], timestamptz[], float8[], timestamptz[], float8[], text[],
                       text[], text[], text[])'::regprocedure
           and a.privilege_type = 'EXECUTE' and a.grantee <> 0 and a.grantee <> p.proowner
    loop
        execute format('grant execute on function x_jobs_wake(text, integer) to %s', v_role);
    end loop;
end
$do$;

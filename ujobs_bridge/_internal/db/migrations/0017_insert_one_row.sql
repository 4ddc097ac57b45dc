-- 0017_insert_one_row: the one insert takes a single row without unnest.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- x_jobs_insert (0008, 0012) stays the only statement that inserts job rows, with the same
-- signature, columns, values and wake-up. Most calls carry one row (a `.delay()`, an
-- `enqueue`), and for one row the set-based insert (unnest of fifteen arrays, a CTE per step,
-- a materialized notify) is a visible share of a one-by-one send: a single-row
-- branch reads element 1 of each array (NULL where an array is NULL or short, as unnest pads)
-- and notifies once when the row is ready. More than one row takes the set-based insert as
-- before.
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
) returns setof uuid language plpgsql volatile as $fn$
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
                perform pg_notify('x_jobs_ready', v_queue);
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
        select count(pg_notify('x_jobs_ready', q.queue)) as queues
          from (select distinct queue from inserted where state = 'ready') as q
    )
    select inserted.id from inserted cross join woken;
end
$fn$;

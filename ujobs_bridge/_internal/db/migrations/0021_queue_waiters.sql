-- 0021_queue_waiters: an insert wakes the workers only when one of them waits for its queue.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Why: a transaction that sends a NOTIFY holds Postgres's notify lock (one for the whole
-- cluster) from just before its commit until the commit is flushed, so producers that each
-- insert a job and notify could not share a WAL flush: concurrent producers ran at about half
-- the rate with the notify that they reach without it. A notification is only useful to a worker that is waiting for one: a worker
-- whose claim came back short records its queues here before it waits (and claims once more
-- after that, so a job committed before its mark is not left to the next poll), and deletes the
-- mark once a claim fills every free slot. An insert notifies only a queue that has a mark; while
-- every worker of a queue is busy with a backlog, its producers send no notification at all.
-- A mark is a hint, never a condition of delivery: a worker also polls (--poll, 1 s), so a
-- missing or stale mark costs at most one poll interval of pick-up latency, and a stale mark
-- costs only a notification. Marks belong to a worker node (0009): a node that is deleted (a
-- clean exit) or reaped (a killed worker) takes its marks with it.
create table x_queue_waiters (
    queue      text not null,
    worker_id  text not null references x_worker_nodes (worker_id) on delete cascade,
    since      timestamptz not null default now(),
    primary key (queue, worker_id)
);
create index x_queue_waiters_worker_idx on x_queue_waiters (worker_id);

-- x_jobs_insert (0008, 0012, 0017) with the same signature, columns and values; its wake-up is
-- sent only for a queue that has a waiting worker.
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
            if v_state = 'ready'
               and exists (select from x_queue_waiters as w where w.queue = v_queue) then
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
         where exists (select from x_queue_waiters as w where w.queue = q.queue)
    )
    select inserted.id from inserted cross join woken;
end
$fn$;

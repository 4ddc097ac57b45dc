-- 0008_job_insert: the one statement that inserts job rows.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Every path that creates a job (enqueue, enqueue_many, the outbox relay into another database
-- of the same schema, Celery's single and batch sends) calls this function, so the column list
-- and the derived columns are written once and cannot drift again:
--   run_at      = the given run_at, else now + delay (now: p_now, the injected clock, else now())
--   expires_at  = the given expires_at, else run_at + expires_in (null when neither is given)
--   a row with a cancel reason is born `cancelled`, finished (finished_at = now()) with that
--     reason as last_error, so retention purges it like any finished job; else it is `ready`
--   created_at = updated_at = now()
-- One row or many, the rows arrive as parallel arrays (binary on the wire from the batch
-- callers) and are inserted by ONE statement. `on conflict do nothing` has no target: a live
-- job holding the row's idempotency key absorbs it, and so does an existing row with the same
-- id (a relay republishing after a crash). The ids actually inserted are returned; the caller
-- resolves the others (the live key's holder). PL/pgSQL so the plan is cached per session.
create function x_jobs_insert(
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
begin
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
        returning x_jobs.id
    )
    select inserted.id from inserted;
end
$fn$;

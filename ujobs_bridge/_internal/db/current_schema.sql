-- The current shape of schema part `ujobs_bridge`: what its migrations (migrations/,
-- through 0027_hand_off) leave, as pg_dump prints it (no owners, no grants).
-- Generated: do not edit. After adding a migration run `ujobs-bridge db schema --write`
-- (tests/test_schema_parts.py fails while this file is stale). The why is in the migrations.

-- Name: x_hand_off; Type: TYPE; Schema: public
CREATE TYPE public.x_hand_off AS (
	token uuid,
	worker text,
	lease_s double precision,
	hand_channel text
);

-- Name: x_job_cancel(uuid, text); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_job_cancel(p_id uuid, p_error text) RETURNS SETOF uuid
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

-- Name: FUNCTION x_job_cancel(p_id uuid, p_error text); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_job_cancel(p_id uuid, p_error text) IS 'duties: operator worker. Cancel one live job.';

-- Name: x_job_claimable_empty(); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_job_claimable_empty() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
    delete from x_job_claimable;
    return null;
end
$$;

-- Name: x_job_claimable_enter(); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_job_claimable_enter() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
    insert into x_job_claimable (id, queue, name, priority, run_at)
    select id, queue, name, priority, run_at from inserted where claimable;
    return null;
end
$$;

-- Name: x_job_claimable_leave(); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_job_claimable_leave() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
    delete from x_job_claimable
     where queue = old.queue and priority = old.priority and run_at = old.run_at and id = old.id;
    return null;
end
$$;

-- Name: x_job_claimable_move(); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_job_claimable_move() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
    if old.claimable then
        delete from x_job_claimable
         where queue = old.queue and priority = old.priority and run_at = old.run_at
           and id = old.id;
    end if;
    if new.claimable then
        insert into x_job_claimable (id, queue, name, priority, run_at)
        values (new.id, new.queue, new.name, new.priority, new.run_at);
    end if;
    return null;
end
$$;

-- Name: x_job_get(uuid); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_job_get(p_id uuid) RETURNS TABLE(id uuid, name text, queue text, input jsonb, output jsonb, idempotency_key text, attempt integer, max_attempts integer, state text, priority smallint, run_at timestamp with time zone, lease_expires_at timestamp with time zone, claimed_by text, expires_at timestamp with time zone, last_error text, tenant_id text, traceparent text, enqueued_by text, created_at timestamp with time zone, updated_at timestamp with time zone, finished_at timestamp with time zone, failure_kind text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
    select j.id, j.name, j.queue, j.input, j.output, j.idempotency_key, j.attempt,
           j.max_attempts, j.state, j.priority, j.run_at, j.lease_expires_at, j.claimed_by,
           j.expires_at, j.last_error, j.tenant_id, j.traceparent, j.enqueued_by, j.created_at,
           j.updated_at, j.finished_at, j.failure_kind
      from x_jobs as j
     where j.id = p_id
$$;

-- Name: FUNCTION x_job_get(p_id uuid); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_job_get(p_id uuid) IS 'duties: producer worker reader. One job by its id.';

-- Name: x_job_live_by_key(text); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_job_live_by_key(p_key text) RETURNS SETOF uuid
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
    select j.id from x_jobs as j where j.live_key = p_key
$$;

-- Name: FUNCTION x_job_live_by_key(p_key text); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_job_live_by_key(p_key text) IS 'duties: producer worker. The live job holding an idempotency key.';

-- Name: x_job_requeue(uuid, timestamp with time zone); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_job_requeue(p_id uuid, p_now timestamp with time zone) RETURNS SETOF uuid
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
    update x_jobs
       set state = 'ready', attempt = 0, run_at = coalesce(p_now, now()), output = null,
           lease_token = null, lease_expires_at = null, claimed_by = null,
           updated_at = now(), finished_at = null
     where id = p_id and state in ('dead', 'cancelled')
    returning id
$$;

-- Name: FUNCTION x_job_requeue(p_id uuid, p_now timestamp with time zone); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_job_requeue(p_id uuid, p_now timestamp with time zone) IS 'duties: operator worker. Requeue one ended job.';

-- Name: x_jobs_arrive(text, text, uuid, boolean, boolean, integer, text, timestamp with time zone, boolean, text); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_jobs_arrive(p_queue text, p_name text, p_id uuid, p_handable boolean, p_wake boolean, p_max_attempts integer, p_traceparent text, p_run_at timestamp with time zone, p_expired boolean, p_input text) RETURNS public.x_hand_off
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    v_worker  text;
    v_lease_s float8;
    v_channel text;
    v_token   uuid;
begin
    if not exists (select from x_queue_waiters as w where w.queue = p_queue) then
        return null;
    end if;
    if p_handable then
        -- The advisory lock class 1970958178 ('ujob') is the hand-off's: a live listen session
        -- holds its worker's key exclusively, so a shared try fails for it alone (a dead
        -- worker's key is taken here, shared, until this transaction ends: harmless).
        select w.worker_id, w.lease_s, w.hand_channel into v_worker, v_lease_s, v_channel
          from x_queue_waiters as w
         where w.queue = p_queue and w.armed and w.hand_channel is not null
           and p_name = any(w.names)
           and not pg_try_advisory_xact_lock_shared(1970958178, w.lock_key)
         order by random()
         limit 1
         for update skip locked;
        if v_worker is not null then
            update x_queue_waiters as w set armed = false
             where w.queue = p_queue and w.worker_id = v_worker;
            v_token := gen_random_uuid();
            insert into x_job_leases (job_id, token, worker, claimed_at, attempt, started_at,
                                      lease_s)
            values (p_id, v_token, v_worker, now(), 1, null, v_lease_s);
            insert into x_job_counts as c (minute, queue, backend, picked, wait_sum_s, wait_max_s)
            values (date_trunc('minute', now()), p_queue, pg_backend_pid(), 1, 0, 0)
            on conflict (minute, queue, backend)
            do update set picked = c.picked + 1;
            -- The job itself, as the worker's listener reads it (leases.handed_job): a JSON
            -- header, a newline, the input as the sender wrote it. Sent at commit, with the
            -- caller's insert; never if that transaction rolls back.
            perform pg_notify(v_channel,
                              json_build_object('id', p_id, 'token', v_token, 'name', p_name,
                                                'queue', p_queue, 'max_attempts', p_max_attempts,
                                                'traceparent', p_traceparent, 'run_at', p_run_at,
                                                'expired', p_expired)::text
                              || chr(10) || p_input);
            return row(v_token, v_worker, v_lease_s, v_channel)::x_hand_off;
        end if;
    end if;
    if p_wake then  -- x_jobs_wake(p_queue, 1), inlined: one call per send, not two
        select w.channel into v_channel
          from x_queue_waiters as w
         where w.queue = p_queue and w.channel is not null
         order by random()
         limit 1;
        if v_channel is not null then
            perform pg_notify(v_channel, p_queue);
        end if;
        if exists (select from x_queue_waiters as w
                    where w.queue = p_queue and w.channel is null) then
            perform pg_notify('x_jobs_ready', p_queue);
        end if;
    end if;
    return null;
end
$$;

-- Name: FUNCTION x_jobs_arrive(p_queue text, p_name text, p_id uuid, p_handable boolean, p_wake boolean, p_max_attempts integer, p_traceparent text, p_run_at timestamp with time zone, p_expired boolean, p_input text); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_jobs_arrive(p_queue text, p_name text, p_id uuid, p_handable boolean, p_wake boolean, p_max_attempts integer, p_traceparent text, p_run_at timestamp with time zone, p_expired boolean, p_input text) IS 'duties: producer worker. Hand one arriving job to an idle worker, or wake one.';

-- Name: x_jobs_cancel_matching(text, text, text, uuid[], text); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_jobs_cancel_matching(p_state text, p_queue text, p_name_like text, p_ids uuid[], p_error text) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

-- Name: FUNCTION x_jobs_cancel_matching(p_state text, p_queue text, p_name_like text, p_ids uuid[], p_error text); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_jobs_cancel_matching(p_state text, p_queue text, p_name_like text, p_ids uuid[], p_error text) IS 'duties: operator worker. Cancel the live jobs a filter matches.';

-- Name: x_jobs_discard_matching(text, text, text, uuid[]); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_jobs_discard_matching(p_state text, p_queue text, p_name_like text, p_ids uuid[]) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

-- Name: FUNCTION x_jobs_discard_matching(p_state text, p_queue text, p_name_like text, p_ids uuid[]); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_jobs_discard_matching(p_state text, p_queue text, p_name_like text, p_ids uuid[]) IS 'duties: operator worker. Delete the dead jobs a filter matches.';

-- Name: x_jobs_insert(timestamp with time zone, uuid[], text[], text[], text[], text[], integer[], smallint[], timestamp with time zone[], double precision[], timestamp with time zone[], double precision[], text[], text[], text[], text[]); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_jobs_insert(p_now timestamp with time zone, p_ids uuid[], p_names text[], p_queues text[], p_inputs text[], p_idempotency_keys text[], p_max_attempts integer[], p_priorities smallint[], p_run_ats timestamp with time zone[], p_delays double precision[], p_expires_ats timestamp with time zone[], p_expires_ins double precision[], p_tenant_ids text[], p_traceparents text[], p_enqueued_bys text[], p_cancel_reasons text[]) RETURNS SETOF uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

-- Name: FUNCTION x_jobs_insert(p_now timestamp with time zone, p_ids uuid[], p_names text[], p_queues text[], p_inputs text[], p_idempotency_keys text[], p_max_attempts integer[], p_priorities smallint[], p_run_ats timestamp with time zone[], p_delays double precision[], p_expires_ats timestamp with time zone[], p_expires_ins double precision[], p_tenant_ids text[], p_traceparents text[], p_enqueued_bys text[], p_cancel_reasons text[]); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_jobs_insert(p_now timestamp with time zone, p_ids uuid[], p_names text[], p_queues text[], p_inputs text[], p_idempotency_keys text[], p_max_attempts integer[], p_priorities smallint[], p_run_ats timestamp with time zone[], p_delays double precision[], p_expires_ats timestamp with time zone[], p_expires_ins double precision[], p_tenant_ids text[], p_traceparents text[], p_enqueued_bys text[], p_cancel_reasons text[]) IS 'duties: producer worker. The one insert of job rows.';

-- Name: x_jobs_requeue_matching(text, text, text, uuid[], timestamp with time zone); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_jobs_requeue_matching(p_state text, p_queue text, p_name_like text, p_ids uuid[], p_now timestamp with time zone) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

-- Name: FUNCTION x_jobs_requeue_matching(p_state text, p_queue text, p_name_like text, p_ids uuid[], p_now timestamp with time zone); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_jobs_requeue_matching(p_state text, p_queue text, p_name_like text, p_ids uuid[], p_now timestamp with time zone) IS 'duties: operator worker. Requeue the ended jobs a filter matches.';

-- Name: x_jobs_wake(text, integer); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_jobs_wake(p_queue text, p_jobs integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

-- Name: FUNCTION x_jobs_wake(p_queue text, p_jobs integer); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_jobs_wake(p_queue text, p_jobs integer) IS 'duties: producer worker. Wake the workers waiting for a queue that got ready jobs.';

-- Name: x_server_up_since(); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_server_up_since() RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
        select coalesce(
            (select max(backend_start) from pg_stat_activity where backend_type = 'walwriter'),
            pg_postmaster_start_time())
    $$;

-- Name: x_control_replies; Type: TABLE; Schema: public
CREATE TABLE public.x_control_replies (
    request_id uuid NOT NULL,
    worker_id text NOT NULL,
    node text NOT NULL,
    reply text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

-- Name: x_control_requests; Type: TABLE; Schema: public
CREATE TABLE public.x_control_requests (
    id uuid NOT NULL,
    seq bigint NOT NULL,
    command text NOT NULL,
    arguments text NOT NULL,
    destination text[],
    reply boolean NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

-- Name: x_control_requests_seq_seq; Type: SEQUENCE; Schema: public
ALTER TABLE public.x_control_requests ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.x_control_requests_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: x_job_attempts; Type: TABLE; Schema: public
CREATE TABLE public.x_job_attempts (
    job_id uuid NOT NULL,
    token uuid NOT NULL,
    attempt integer NOT NULL,
    worker text,
    claimed_at timestamp with time zone,
    finished_at timestamp with time zone NOT NULL,
    outcome text NOT NULL,
    error text
)
WITH (autovacuum_vacuum_insert_scale_factor='0', autovacuum_vacuum_insert_threshold='10000');

-- Name: x_job_claimable; Type: TABLE; Schema: public
CREATE TABLE public.x_job_claimable (
    id uuid NOT NULL,
    queue text NOT NULL,
    name text NOT NULL,
    priority smallint NOT NULL,
    run_at timestamp with time zone NOT NULL
)
WITH (autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0', autovacuum_vacuum_insert_threshold='1000', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_cost_delay='0', vacuum_truncate='false');

-- Name: x_job_counts; Type: TABLE; Schema: public
CREATE TABLE public.x_job_counts (
    minute timestamp with time zone NOT NULL,
    queue text NOT NULL,
    backend integer NOT NULL,
    done bigint DEFAULT 0 NOT NULL,
    dead bigint DEFAULT 0 NOT NULL,
    picked bigint DEFAULT 0 NOT NULL,
    wait_sum_s double precision DEFAULT 0 NOT NULL,
    wait_max_s double precision DEFAULT 0 NOT NULL
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_cost_delay='0');

-- Name: x_job_events; Type: TABLE; Schema: public
CREATE TABLE public.x_job_events (
    id bigint NOT NULL,
    event text NOT NULL,
    correlation_key text NOT NULL,
    payload jsonb,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    consumed_by uuid,
    consumed_step text,
    consumed_at timestamp with time zone
);

-- Name: x_job_events_id_seq; Type: SEQUENCE; Schema: public
ALTER TABLE public.x_job_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.x_job_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: x_job_failure_counts; Type: TABLE; Schema: public
CREATE TABLE public.x_job_failure_counts (
    minute timestamp with time zone NOT NULL,
    queue text NOT NULL,
    backend integer NOT NULL,
    kind text NOT NULL,
    jobs bigint DEFAULT 0 NOT NULL
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_cost_delay='0');

-- Name: x_job_leases; Type: TABLE; Schema: public
CREATE TABLE public.x_job_leases (
    job_id uuid NOT NULL,
    token uuid NOT NULL,
    worker text,
    claimed_at timestamp with time zone,
    attempt integer,
    started_at timestamp with time zone,
    lease_s double precision
)
WITH (autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0', autovacuum_vacuum_insert_threshold='1000', autovacuum_vacuum_cost_delay='0');

-- Name: x_job_steps; Type: TABLE; Schema: public
CREATE TABLE public.x_job_steps (
    run_id uuid NOT NULL,
    name text NOT NULL,
    ordinal integer NOT NULL,
    status text NOT NULL,
    output jsonb,
    attempts integer DEFAULT 0 NOT NULL,
    error text,
    job_attempt integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    completed_at timestamp with time zone,
    wake_at timestamp with time zone,
    event text,
    correlation_key text,
    CONSTRAINT x_job_steps_status_check CHECK ((status = ANY (ARRAY['completed'::text, 'failed'::text, 'sleeping'::text, 'waiting'::text])))
);

-- Name: x_jobs; Type: TABLE; Schema: public
CREATE TABLE public.x_jobs (
    id uuid NOT NULL,
    name text NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    input jsonb DEFAULT '{}'::jsonb NOT NULL,
    output jsonb,
    idempotency_key text,
    attempt integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 3 NOT NULL,
    state text DEFAULT 'ready'::text NOT NULL,
    priority smallint DEFAULT 0 NOT NULL,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    lease_expires_at timestamp with time zone,
    lease_token uuid,
    claimed_by text,
    expires_at timestamp with time zone,
    last_error text,
    tenant_id text,
    traceparent text,
    enqueued_by text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    deliveries integer DEFAULT 0 NOT NULL,
    claimable boolean GENERATED ALWAYS AS ((state = ANY (ARRAY['ready'::text, 'sleeping'::text, 'waiting'::text]))) STORED NOT NULL,
    live_key text GENERATED ALWAYS AS (
CASE
    WHEN (state = ANY (ARRAY['ready'::text, 'running'::text, 'sleeping'::text, 'waiting'::text])) THEN idempotency_key
    ELSE NULL::text
END) STORED,
    dead_at timestamp with time zone GENERATED ALWAYS AS (
CASE
    WHEN (state = 'dead'::text) THEN updated_at
    ELSE NULL::timestamp with time zone
END) STORED,
    suspended text GENERATED ALWAYS AS (
CASE
    WHEN (state = ANY (ARRAY['sleeping'::text, 'waiting'::text])) THEN state
    ELSE NULL::text
END) STORED,
    outage_handbacks integer DEFAULT 0 NOT NULL,
    failure_kind text,
    CONSTRAINT x_jobs_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT x_jobs_state_check CHECK ((state = ANY (ARRAY['ready'::text, 'running'::text, 'sleeping'::text, 'waiting'::text, 'done'::text, 'dead'::text, 'cancelled'::text])))
)
WITH (fillfactor='30', autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0', autovacuum_vacuum_insert_threshold='1000', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_cost_delay='0');

-- Name: x_outbox; Type: TABLE; Schema: public
CREATE TABLE public.x_outbox (
    id bigint NOT NULL,
    txid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    job_id uuid NOT NULL,
    name text NOT NULL,
    queue text NOT NULL,
    input jsonb NOT NULL,
    idempotency_key text,
    max_attempts integer NOT NULL,
    priority smallint DEFAULT 0 NOT NULL,
    run_at timestamp with time zone,
    delay_s double precision DEFAULT 0 NOT NULL,
    expires_at timestamp with time zone,
    expires_in_s double precision,
    tenant_id text,
    traceparent text,
    enqueued_by text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    published_at timestamp with time zone
);

-- Name: x_outbox_id_seq; Type: SEQUENCE; Schema: public
ALTER TABLE public.x_outbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.x_outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: x_queue_waiters; Type: TABLE; Schema: public
CREATE TABLE public.x_queue_waiters (
    queue text NOT NULL,
    worker_id text NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    channel text,
    names text[],
    lease_s double precision,
    lock_key integer,
    hand_channel text,
    armed boolean DEFAULT false NOT NULL
);

-- Name: x_scheduler_fires; Type: TABLE; Schema: public
CREATE TABLE public.x_scheduler_fires (
    task text NOT NULL,
    occurrence_at timestamp with time zone NOT NULL,
    catch_up boolean NOT NULL,
    job_ids uuid[] NOT NULL,
    fired_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: x_scheduler_leader; Type: TABLE; Schema: public
CREATE TABLE public.x_scheduler_leader (
    name text NOT NULL,
    holder text NOT NULL,
    term bigint NOT NULL,
    elected_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

-- Name: x_scheduler_state; Type: TABLE; Schema: public
CREATE TABLE public.x_scheduler_state (
    task text NOT NULL,
    watermark timestamp with time zone NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: x_schema_version; Type: TABLE; Schema: public
CREATE TABLE public.x_schema_version (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    part text DEFAULT 'ujobs_bridge'::text NOT NULL
);

-- Name: x_worker_nodes; Type: TABLE; Schema: public
CREATE TABLE public.x_worker_nodes (
    worker_id text NOT NULL,
    name text NOT NULL,
    hostname text NOT NULL,
    pid integer NOT NULL,
    queues text[] NOT NULL,
    concurrency integer NOT NULL,
    pool text NOT NULL,
    info jsonb DEFAULT '{}'::jsonb NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

-- Name: x_control_replies x_control_replies_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_control_replies
    ADD CONSTRAINT x_control_replies_pkey PRIMARY KEY (request_id, worker_id);

-- Name: x_control_requests x_control_requests_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_control_requests
    ADD CONSTRAINT x_control_requests_pkey PRIMARY KEY (id);

-- Name: x_control_requests x_control_requests_seq_key; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_control_requests
    ADD CONSTRAINT x_control_requests_seq_key UNIQUE (seq);

-- Name: x_job_attempts x_job_attempts_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_job_attempts
    ADD CONSTRAINT x_job_attempts_pkey PRIMARY KEY (job_id, token);

-- Name: x_job_counts x_job_counts_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_job_counts
    ADD CONSTRAINT x_job_counts_pkey PRIMARY KEY (minute, queue, backend);

-- Name: x_job_events x_job_events_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_job_events
    ADD CONSTRAINT x_job_events_pkey PRIMARY KEY (id);

-- Name: x_job_failure_counts x_job_failure_counts_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_job_failure_counts
    ADD CONSTRAINT x_job_failure_counts_pkey PRIMARY KEY (minute, queue, backend, kind);

-- Name: x_job_leases x_job_leases_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_job_leases
    ADD CONSTRAINT x_job_leases_pkey PRIMARY KEY (job_id, token);

-- Name: x_job_steps x_job_steps_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_job_steps
    ADD CONSTRAINT x_job_steps_pkey PRIMARY KEY (run_id, name);

-- Name: x_jobs x_jobs_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_jobs
    ADD CONSTRAINT x_jobs_pkey PRIMARY KEY (id);

-- Name: x_outbox x_outbox_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_outbox
    ADD CONSTRAINT x_outbox_pkey PRIMARY KEY (id);

-- Name: x_queue_waiters x_queue_waiters_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_queue_waiters
    ADD CONSTRAINT x_queue_waiters_pkey PRIMARY KEY (queue, worker_id);

-- Name: x_scheduler_fires x_scheduler_fires_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_scheduler_fires
    ADD CONSTRAINT x_scheduler_fires_pkey PRIMARY KEY (task, occurrence_at);

-- Name: x_scheduler_leader x_scheduler_leader_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_scheduler_leader
    ADD CONSTRAINT x_scheduler_leader_pkey PRIMARY KEY (name);

-- Name: x_scheduler_state x_scheduler_state_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_scheduler_state
    ADD CONSTRAINT x_scheduler_state_pkey PRIMARY KEY (task);

-- Name: x_schema_version x_schema_version_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_schema_version
    ADD CONSTRAINT x_schema_version_pkey PRIMARY KEY (part, version);

-- Name: x_worker_nodes x_worker_nodes_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_worker_nodes
    ADD CONSTRAINT x_worker_nodes_pkey PRIMARY KEY (worker_id);

-- Name: x_control_replies_expires_idx; Type: INDEX; Schema: public
CREATE INDEX x_control_replies_expires_idx ON public.x_control_replies USING btree (expires_at);

-- Name: x_control_requests_expires_idx; Type: INDEX; Schema: public
CREATE INDEX x_control_requests_expires_idx ON public.x_control_requests USING btree (expires_at);

-- Name: x_job_claimable_claim_idx; Type: INDEX; Schema: public
CREATE INDEX x_job_claimable_claim_idx ON public.x_job_claimable USING btree (queue, priority DESC, run_at, id);

-- Name: x_job_events_consumer_idx; Type: INDEX; Schema: public
CREATE UNIQUE INDEX x_job_events_consumer_idx ON public.x_job_events USING btree (consumed_by, consumed_step) WHERE (consumed_by IS NOT NULL);

-- Name: x_job_events_open_idx; Type: INDEX; Schema: public
CREATE INDEX x_job_events_open_idx ON public.x_job_events USING btree (event, correlation_key, id) WHERE (consumed_by IS NULL);

-- Name: x_job_steps_ordinal_idx; Type: INDEX; Schema: public
CREATE UNIQUE INDEX x_job_steps_ordinal_idx ON public.x_job_steps USING btree (run_id, ordinal);

-- Name: x_job_steps_waiting_idx; Type: INDEX; Schema: public
CREATE INDEX x_job_steps_waiting_idx ON public.x_job_steps USING btree (event, correlation_key) WHERE (status = 'waiting'::text);

-- Name: x_jobs_created_idx; Type: INDEX; Schema: public
CREATE INDEX x_jobs_created_idx ON public.x_jobs USING btree (created_at DESC, id);

-- Name: x_jobs_dead_idx; Type: INDEX; Schema: public
CREATE INDEX x_jobs_dead_idx ON public.x_jobs USING btree (dead_at DESC, id) INCLUDE (queue, failure_kind) WHERE (dead_at IS NOT NULL);

-- Name: x_jobs_idempotency_live_idx; Type: INDEX; Schema: public
CREATE UNIQUE INDEX x_jobs_idempotency_live_idx ON public.x_jobs USING btree (live_key) WHERE (live_key IS NOT NULL);

-- Name: x_jobs_suspended_idx; Type: INDEX; Schema: public
CREATE INDEX x_jobs_suspended_idx ON public.x_jobs USING btree (queue, suspended, run_at) WHERE (suspended IS NOT NULL);

-- Name: x_outbox_pending_idx; Type: INDEX; Schema: public
CREATE INDEX x_outbox_pending_idx ON public.x_outbox USING btree (id) WHERE (published_at IS NULL);

-- Name: x_queue_waiters_worker_idx; Type: INDEX; Schema: public
CREATE INDEX x_queue_waiters_worker_idx ON public.x_queue_waiters USING btree (worker_id);

-- Name: x_worker_nodes_expires_idx; Type: INDEX; Schema: public
CREATE INDEX x_worker_nodes_expires_idx ON public.x_worker_nodes USING btree (expires_at);

-- Name: x_worker_nodes_name_idx; Type: INDEX; Schema: public
CREATE INDEX x_worker_nodes_name_idx ON public.x_worker_nodes USING btree (name);

-- Name: x_jobs x_job_claimable_delete_trg; Type: TRIGGER; Schema: public
CREATE TRIGGER x_job_claimable_delete_trg AFTER DELETE ON public.x_jobs FOR EACH ROW WHEN (old.claimable) EXECUTE FUNCTION public.x_job_claimable_leave();

-- Name: x_jobs x_job_claimable_insert_trg; Type: TRIGGER; Schema: public
CREATE TRIGGER x_job_claimable_insert_trg AFTER INSERT ON public.x_jobs REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION public.x_job_claimable_enter();

-- Name: x_jobs x_job_claimable_truncate_trg; Type: TRIGGER; Schema: public
CREATE TRIGGER x_job_claimable_truncate_trg AFTER TRUNCATE ON public.x_jobs FOR EACH STATEMENT EXECUTE FUNCTION public.x_job_claimable_empty();

-- Name: x_jobs x_job_claimable_update_trg; Type: TRIGGER; Schema: public
CREATE TRIGGER x_job_claimable_update_trg AFTER UPDATE OF state, run_at, queue, name, priority ON public.x_jobs FOR EACH ROW WHEN (((old.claimable IS DISTINCT FROM new.claimable) OR (new.claimable AND ((((old.run_at IS DISTINCT FROM new.run_at) OR (old.queue IS DISTINCT FROM new.queue)) OR (old.name IS DISTINCT FROM new.name)) OR (old.priority IS DISTINCT FROM new.priority))))) EXECUTE FUNCTION public.x_job_claimable_move();

-- Name: x_job_steps x_job_steps_run_id_fkey; Type: FK CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_job_steps
    ADD CONSTRAINT x_job_steps_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.x_jobs(id) ON DELETE CASCADE;

-- Name: x_queue_waiters x_queue_waiters_worker_id_fkey; Type: FK CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_queue_waiters
    ADD CONSTRAINT x_queue_waiters_worker_id_fkey FOREIGN KEY (worker_id) REFERENCES public.x_worker_nodes(worker_id) ON DELETE CASCADE;

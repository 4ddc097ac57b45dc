-- The current shape of schema part `celery_compat`: what its migrations (migrations/,
-- through 0006_duties) leave, as pg_dump prints it (no owners, no grants).
-- Generated: do not edit. After adding a migration run `ujobs-bridge db schema --write`
-- (tests/test_schema_parts.py fails while this file is stale). The why is in the migrations.
-- Objects of an earlier part that this part changes appear here whole, as changed.

-- Name: x_celery_group_expire(text, double precision, timestamp with time zone); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_celery_group_expire(p_key text, p_ttl_s double precision, p_now timestamp with time zone) RETURNS SETOF text
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
    update x_celery_results
       set expires_at = coalesce(p_now, now()) + make_interval(secs => p_ttl_s)
     where key = p_key and key like 'celery-taskset-meta-%'
    returning key
$$;

-- Name: FUNCTION x_celery_group_expire(p_key text, p_ttl_s double precision, p_now timestamp with time zone); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_celery_group_expire(p_key text, p_ttl_s double precision, p_now timestamp with time zone) IS 'duties: producer worker. How long the saved result of a group is kept.';

-- Name: x_celery_group_save(text, text, double precision, timestamp with time zone); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_celery_group_save(p_key text, p_value text, p_ttl_s double precision, p_now timestamp with time zone) RETURNS SETOF text
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

-- Name: FUNCTION x_celery_group_save(p_key text, p_value text, p_ttl_s double precision, p_now timestamp with time zone); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_celery_group_save(p_key text, p_value text, p_ttl_s double precision, p_now timestamp with time zone) IS 'duties: producer worker. Save the result of a group once (GroupResult.save, a chord header).';

-- Name: x_celery_jobs_of_task(text, boolean); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_celery_jobs_of_task(p_task_id text, p_include_done boolean) RETURNS TABLE(id uuid, state text, last_error text, updated_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
    select j.id, j.state, j.last_error, j.updated_at
      from x_jobs as j
     where coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id') = p_task_id
       and j.enqueued_by = 'celery_compat' and (p_include_done or j.state <> 'done')
     order by j.created_at desc, j.id desc
$$;

-- Name: FUNCTION x_celery_jobs_of_task(p_task_id text, p_include_done boolean); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_celery_jobs_of_task(p_task_id text, p_include_done boolean) IS 'duties: producer worker. The job rows of one Celery task id.';

-- Name: x_celery_result_get(text[], timestamp with time zone); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_celery_result_get(p_keys text[], p_now timestamp with time zone) RETURNS TABLE(key text, value text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
    select r.key, r.value from x_celery_results as r
     where r.key = any(p_keys) and (r.expires_at is null or r.expires_at > coalesce(p_now, now()))
$$;

-- Name: FUNCTION x_celery_result_get(p_keys text[], p_now timestamp with time zone); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_celery_result_get(p_keys text[], p_now timestamp with time zone) IS 'duties: producer worker. Stored Celery results by their keys.';

-- Name: x_celery_send(timestamp with time zone, text[], uuid[], text[], text[], text[], integer[], smallint[], timestamp with time zone[], text[], text); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_celery_send(p_now timestamp with time zone, p_task_ids text[], p_ids uuid[], p_names text[], p_queues text[], p_inputs text[], p_max_attempts integer[], p_priorities smallint[], p_run_ats timestamp with time zone[], p_traceparents text[], p_revoked_reason text) RETURNS SETOF uuid
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

-- Name: FUNCTION x_celery_send(p_now timestamp with time zone, p_task_ids text[], p_ids uuid[], p_names text[], p_queues text[], p_inputs text[], p_max_attempts integer[], p_priorities smallint[], p_run_ats timestamp with time zone[], p_traceparents text[], p_revoked_reason text); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_celery_send(p_now timestamp with time zone, p_task_ids text[], p_ids uuid[], p_names text[], p_queues text[], p_inputs text[], p_max_attempts integer[], p_priorities smallint[], p_run_ats timestamp with time zone[], p_traceparents text[], p_revoked_reason text) IS 'duties: producer worker. Celery messages with no send key, as job rows.';

-- Name: x_celery_task_ids_sent_here(text[]); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_celery_task_ids_sent_here(p_task_ids text[]) RETURNS SETOF text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
    select distinct coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id')
      from x_jobs as j
     where coalesce(j.input -> 'headers' ->> 'id', j.input ->> 'id') = any(p_task_ids)
       and j.enqueued_by = 'celery_compat'
$$;

-- Name: FUNCTION x_celery_task_ids_sent_here(p_task_ids text[]); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_celery_task_ids_sent_here(p_task_ids text[]) IS 'duties: producer worker. Which task ids went through Postgres.';

-- Name: x_celery_chord_parts; Type: TABLE; Schema: public
CREATE TABLE public.x_celery_chord_parts (
    key text NOT NULL,
    task_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: x_celery_counters; Type: TABLE; Schema: public
CREATE TABLE public.x_celery_counters (
    key text NOT NULL,
    value bigint NOT NULL,
    expires_at timestamp with time zone
);

-- Name: x_celery_events; Type: TABLE; Schema: public
CREATE TABLE public.x_celery_events (
    id bigint NOT NULL,
    type text NOT NULL,
    hostname text NOT NULL,
    task_id text,
    at timestamp with time zone NOT NULL,
    fields jsonb NOT NULL
);

-- Name: x_celery_events_id_seq; Type: SEQUENCE; Schema: public
ALTER TABLE public.x_celery_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.x_celery_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: x_celery_results; Type: TABLE; Schema: public
CREATE TABLE public.x_celery_results (
    key text NOT NULL,
    value text NOT NULL,
    expires_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    status text
);

-- Name: x_celery_revoked; Type: TABLE; Schema: public
CREATE TABLE public.x_celery_revoked (
    task_id text NOT NULL,
    terminate boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

-- Name: x_celery_tasks; Type: TABLE; Schema: public
CREATE TABLE public.x_celery_tasks (
    task_id text NOT NULL,
    retries integer DEFAULT 0 NOT NULL,
    nesting integer DEFAULT 0 NOT NULL,
    job_id uuid NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_by uuid DEFAULT '00000000-0000-0000-0000-000000000000'::uuid NOT NULL,
    ordinal integer DEFAULT 0 NOT NULL
);

-- Name: x_rate_limits; Type: TABLE; Schema: public
CREATE TABLE public.x_rate_limits (
    key text NOT NULL,
    tokens double precision NOT NULL,
    updated_at timestamp with time zone NOT NULL
);

-- Name: x_celery_chord_parts x_celery_chord_parts_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_celery_chord_parts
    ADD CONSTRAINT x_celery_chord_parts_pkey PRIMARY KEY (key, task_id);

-- Name: x_celery_counters x_celery_counters_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_celery_counters
    ADD CONSTRAINT x_celery_counters_pkey PRIMARY KEY (key);

-- Name: x_celery_events x_celery_events_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_celery_events
    ADD CONSTRAINT x_celery_events_pkey PRIMARY KEY (id);

-- Name: x_celery_results x_celery_results_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_celery_results
    ADD CONSTRAINT x_celery_results_pkey PRIMARY KEY (key);

-- Name: x_celery_revoked x_celery_revoked_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_celery_revoked
    ADD CONSTRAINT x_celery_revoked_pkey PRIMARY KEY (task_id);

-- Name: x_celery_tasks x_celery_tasks_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_celery_tasks
    ADD CONSTRAINT x_celery_tasks_pkey PRIMARY KEY (task_id, retries, nesting, sent_by, ordinal);

-- Name: x_rate_limits x_rate_limits_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_rate_limits
    ADD CONSTRAINT x_rate_limits_pkey PRIMARY KEY (key);

-- Name: x_celery_events_at; Type: INDEX; Schema: public
CREATE INDEX x_celery_events_at ON public.x_celery_events USING brin (at);

-- Name: x_celery_events_task; Type: INDEX; Schema: public
CREATE INDEX x_celery_events_task ON public.x_celery_events USING btree (task_id, id) WHERE (task_id IS NOT NULL);

-- Name: x_celery_results_expires_idx; Type: INDEX; Schema: public
CREATE INDEX x_celery_results_expires_idx ON public.x_celery_results USING btree (expires_at) WHERE (expires_at IS NOT NULL);

-- Name: x_celery_tasks_created_idx; Type: INDEX; Schema: public
CREATE INDEX x_celery_tasks_created_idx ON public.x_celery_tasks USING btree (created_at);

-- Name: x_jobs_celery_task_idx; Type: INDEX; Schema: public
CREATE INDEX x_jobs_celery_task_idx ON public.x_jobs USING btree (COALESCE(((input -> 'headers'::text) ->> 'id'::text), (input ->> 'id'::text))) WHERE (enqueued_by = 'celery_compat'::text);

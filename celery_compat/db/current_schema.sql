-- The current shape of schema part `celery_compat`: what its migrations (migrations/,
-- through 0005_result_status) leave, as pg_dump prints it (no owners, no grants).
-- Generated: do not edit. After adding a migration run `ujobs-bridge db schema --write`
-- (tests/test_schema_parts.py fails while this file is stale). The why is in the migrations.
-- Objects of an earlier part that this part changes appear here whole, as changed.

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

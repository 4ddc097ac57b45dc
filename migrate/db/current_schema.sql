-- The current shape of schema part `migrate`: what its migrations (migrations/,
-- through 0002_duties) leave, as pg_dump prints it (no owners, no grants).
-- Generated: do not edit. After adding a migration run `ujobs-bridge db schema --write`
-- (tests/test_schema_parts.py fails while this file is stale). The why is in the migrations.
-- Objects of an earlier part that this part changes appear here whole, as changed.

-- Name: x_migrate_quarantine_resolve(bigint, text, uuid); Type: FUNCTION; Schema: public
CREATE FUNCTION public.x_migrate_quarantine_resolve(p_id bigint, p_resolution text, p_job_id uuid) RETURNS SETOF bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
    update x_migrate_quarantine
       set resolution = p_resolution, resolved_at = now(), job_id = p_job_id
     where id = p_id and resolution is null
    returning id
$$;

-- Name: FUNCTION x_migrate_quarantine_resolve(p_id bigint, p_resolution text, p_job_id uuid); Type: COMMENT; Schema: public
COMMENT ON FUNCTION public.x_migrate_quarantine_resolve(p_id bigint, p_resolution text, p_job_id uuid) IS 'duties: operator worker. Resolve an open quarantine entry (retried or discarded).';

-- Name: x_migrate_quarantine; Type: TABLE; Schema: public
CREATE TABLE public.x_migrate_quarantine (
    id bigint NOT NULL,
    broker text NOT NULL,
    queue text NOT NULL,
    reason text NOT NULL,
    detail text NOT NULL,
    task text,
    task_id text,
    format text NOT NULL,
    raw bytea NOT NULL,
    meta jsonb,
    sha256 text NOT NULL,
    size bigint NOT NULL,
    seen integer DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    resolution text,
    resolved_at timestamp with time zone,
    job_id uuid,
    CONSTRAINT x_migrate_quarantine_format_check CHECK ((format = ANY (ARRAY['redis'::text, 'amqp'::text, 'kombu'::text]))),
    CONSTRAINT x_migrate_quarantine_resolution_check CHECK ((resolution = ANY (ARRAY['retried'::text, 'discarded'::text])))
);

-- Name: x_migrate_quarantine_id_seq; Type: SEQUENCE; Schema: public
ALTER TABLE public.x_migrate_quarantine ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.x_migrate_quarantine_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- Name: x_migrate_quarantine x_migrate_quarantine_pkey; Type: CONSTRAINT; Schema: public
ALTER TABLE ONLY public.x_migrate_quarantine
    ADD CONSTRAINT x_migrate_quarantine_pkey PRIMARY KEY (id);

-- Name: x_migrate_quarantine_key_idx; Type: INDEX; Schema: public
CREATE UNIQUE INDEX x_migrate_quarantine_key_idx ON public.x_migrate_quarantine USING btree (sha256, queue, broker);

-- Name: x_migrate_quarantine_open_idx; Type: INDEX; Schema: public
CREATE INDEX x_migrate_quarantine_open_idx ON public.x_migrate_quarantine USING btree (id) WHERE (resolution IS NULL);

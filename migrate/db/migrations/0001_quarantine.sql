-- 0001_quarantine: where `ujobs-bridge migrate` puts broker messages that cannot become jobs.
-- Forward-only. Part `migrate` of the schema (ujobs_bridge/_internal/db/schema.py applies it after the
-- engine's, in the same locked transaction). Until the split this was the engine's
-- 0006_migrate; a database that applied that one adopts this one (recorded, not run again).

-- Quarantine, never drop: a message the drainer cannot turn into a job row (malformed, a
-- serializer not accepted, pickle without --accept-pickle, an unknown task name, too large, a
-- decompression bomb, a chord whose state lives elsewhere) is kept here byte for byte, with the
-- reason, and acknowledged on the broker. `format` says how to read `raw` again on retry:
-- 'redis' (a kombu-Redis list element: the whole JSON envelope), 'amqp' or 'kombu' (the body;
-- content type, encoding, headers and properties in `meta`).
-- The same bytes seen again (a redelivery after a crash between commit and ack) are one row:
-- (sha256, queue, broker) is unique and `seen` counts the sightings.
create table x_migrate_quarantine (
    id            bigint generated always as identity primary key,
    broker        text not null,
    queue         text not null,
    reason        text not null,
    detail        text not null,
    task          text,
    task_id       text,
    format        text not null check (format in ('redis', 'amqp', 'kombu')),
    raw           bytea not null,
    meta          jsonb,
    sha256        text not null,
    size          bigint not null,
    seen          integer not null default 1,
    created_at    timestamptz not null default now(),
    last_seen_at  timestamptz not null default now(),
    resolution    text check (resolution in ('retried', 'discarded')),
    resolved_at   timestamptz,
    job_id        uuid
);
create unique index x_migrate_quarantine_key_idx on x_migrate_quarantine (sha256, queue, broker);
create index x_migrate_quarantine_open_idx on x_migrate_quarantine (id) where resolution is null;

-- 0003_celery_events: Celery's task and worker events, as the bridge worker emits them.
-- Forward-only. Part `celery_compat` of the schema (ujobs_bridge/_internal/db/schema.py applies it after the
-- engine's, in the same locked transaction). Until the split this was the engine's
-- 0010_celery_events; a database that applied that one adopts this one (recorded, not run again).

-- One row per event (task-sent/received/started/succeeded/failed/retried/revoked/rejected,
-- worker-online/heartbeat/offline), written in batches by celery_compat's event emitter and read
-- by a dashboard through celery_compat.event_log. `fields` is the event exactly as Celery's event
-- dispatcher sends it (type, hostname, utcoffset, pid, clock, timestamp, uuid, ...); the columns
-- beside it are what readers filter on. `at` is the event's own timestamp (the emitter's clock);
-- the retention sweep deletes rows whose `at` is older than its cutoff. The table is a
-- monitoring log: nothing references it and nothing in it is needed to run a task.
create table x_celery_events (
    id        bigint generated always as identity primary key,
    type      text not null,
    hostname  text not null,
    task_id   text,
    at        timestamptz not null,
    fields    jsonb not null
);

-- the retention sweep (oldest first) and time-window reads: rows arrive in time order, so a BRIN
-- index serves them at a fraction of a b-tree's cost per insert (events are the hot path's writes)
create index x_celery_events_at on x_celery_events using brin (at);
-- one task's history
create index x_celery_events_task on x_celery_events (task_id, id) where task_id is not null;

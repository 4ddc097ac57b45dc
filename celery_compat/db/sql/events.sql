-- Celery's task and worker events (table x_celery_events, migration 0010).

-- celery_events_insert --
-- A batch of events in one statement: %(events)s is a JSON array of Celery event objects (each
-- with type, hostname, timestamp and, for a task event, uuid). `at` is the event's timestamp.
insert into x_celery_events (type, hostname, task_id, at, fields)
select e ->> 'type',
       coalesce(e ->> 'hostname', ''),
       e ->> 'uuid',
       to_timestamp((e ->> 'timestamp')::float8),
       e
  from jsonb_array_elements(%(events)s::jsonb) as e

-- celery_events_read --
-- Events after id %(after_id)s, oldest first, optionally of one task, one node, some types, or
-- at/after %(since)s; at most %(limit)s.
select id, fields
  from x_celery_events
 where id > %(after_id)s
   and (%(task_id)s::text is null or task_id = %(task_id)s::text)
   and (%(hostname)s::text is null or hostname = %(hostname)s::text)
   and (%(types)s::text[] is null or type = any(%(types)s::text[]))
   and (%(since)s::timestamptz is null or at >= %(since)s::timestamptz)
 order by id
 limit %(limit)s

-- celery_events_purge --
-- Up to %(limit)s events older than the cutoff, oldest first (the retention sweep calls it
-- until fewer than %(limit)s go).
with gone as (
    select id from x_celery_events where at < %(cutoff)s order by id limit %(limit)s
)
delete from x_celery_events as e using gone where e.id = gone.id

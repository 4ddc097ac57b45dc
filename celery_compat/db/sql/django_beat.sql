-- celery_compat: django-celery-beat's tables as the scheduler's schedule (beat/django_beat.py).
-- The tables are django-celery-beat's own (its migrations made them, in the project's database,
-- which is the bridge's); the bridge reads them and writes only what django-celery-beat's own
-- scheduler writes: total_run_count, last_run_at, enabled (one-off done, expired), the marker.

-- django_beat_changed --
-- PeriodicTasks.changed: the one row whose last_update moves whenever a PeriodicTask is saved
-- or deleted, or a schedule row is saved (django-celery-beat's signals); none before the first.
select t.last_update
  from django_celery_beat_periodictasks as t
 where t.ident = 1

-- django_beat_expire --
-- What django-celery-beat's ModelEntry._disable does to an entry past `expires`: disabled,
-- last_run_at cleared (its save() clears it for a disabled row), no change marked.
update django_celery_beat_periodictask as t
   set enabled = false, last_run_at = null
 where t.enabled and t.expires is not null and t.expires <= %(now)s
returning t.name

-- django_beat_entries --
-- Every enabled PeriodicTask with its one schedule row (crontab, interval, solar or clocked).
select t.id, t.name, t.task, t.args, t.kwargs, t.queue, t.exchange, t.routing_key, t.headers,
       t.priority, t.expires, t.expire_seconds, t.one_off, t.start_time, t.last_run_at,
       t.total_run_count, t.date_changed,
       c.minute, c.hour, c.day_of_week, c.day_of_month, c.month_of_year, c.timezone,
       i.every, i.period,
       s.event, s.latitude, s.longitude,
       k.clocked_time
  from django_celery_beat_periodictask as t
  left join django_celery_beat_crontabschedule as c on c.id = t.crontab_id
  left join django_celery_beat_intervalschedule as i on i.id = t.interval_id
  left join django_celery_beat_solarschedule as s on s.id = t.solar_id
  left join django_celery_beat_clockedschedule as k on k.id = t.clocked_id
 where t.enabled
 order by t.name

-- django_beat_ran --
-- One sent occurrence, in the fire's transaction, as django-celery-beat's reserve + sync count
-- it: total_run_count + 1, last_run_at = the send's time. A one-off entry is disabled by the
-- same statement (django-celery-beat disables it at its next check). No row back: the entry was
-- disabled or deleted since the schedule was read, and nothing is sent.
update django_celery_beat_periodictask as t
   set total_run_count = t.total_run_count + 1,
       last_run_at = coalesce(%(now)s, now()),
       enabled = not t.one_off
 where t.id = %(id)s and t.enabled
returning t.one_off

-- django_beat_mark_changed --
-- PeriodicTasks.update_changed: the marker every scheduler (and django-celery-beat's) re-reads.
insert into django_celery_beat_periodictasks (ident, last_update)
values (1, coalesce(%(now)s, now()))
on conflict (ident) do update set last_update = excluded.last_update

-- django_beat_unfinished --
-- The overlap check: is a message this entry sent (django-celery-beat's `periodic_task_name`
-- header) still waiting or running? Only unfinished rows are looked at.
select j.id
  from x_jobs as j
 where j.state in ('ready', 'running', 'sleeping', 'waiting')
   and j.enqueued_by = 'celery_compat'
   and j.input -> 'headers' ->> 'periodic_task_name' = %(name)s::text
 limit 1

-- migrate (`ujobs-bridge migrate`): the quarantine (0006_migrate), the chord-state check and the ledger read-back.
-- Job rows go through celery_compat's statements.
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever job logic compares time.

-- migrate_quarantine_put --
-- One poison message, kept byte for byte. The same bytes again (a redelivery after a crash
-- between commit and ack) are the same entry: `seen` counts; `inserted` says which happened.
insert into x_migrate_quarantine
    (broker, queue, reason, detail, task, task_id, format, raw, meta, sha256, size)
values
    (%(broker)s, %(queue)s, %(reason)s, %(detail)s, %(task)s, %(task_id)s, %(format)s, %(raw)s,
     %(meta)s, %(sha256)s, %(size)s)
on conflict (sha256, queue, broker) do update
    set seen = x_migrate_quarantine.seen + 1, last_seen_at = now()
returning id, (xmax = 0) as inserted

-- migrate_quarantine_list --
select id, created_at, broker, queue, reason, detail, task, task_id, format, size, seen,
       resolution, resolved_at, job_id
  from x_migrate_quarantine
 where (%(all)s or resolution is null)
   and (%(reason)s::text is null or reason = %(reason)s::text)
 order by id
 limit %(limit)s

-- migrate_quarantine_get --
select id, created_at, broker, queue, reason, detail, task, task_id, format, size, seen,
       resolution, resolved_at, job_id, raw, meta, sha256
  from x_migrate_quarantine
 where id = %(id)s

-- migrate_quarantine_resolve --
-- Through x_migrate_quarantine_resolve (migration 0002), which an operator may call.
select id from x_migrate_quarantine_resolve(%(id)s, %(resolution)s, %(job_id)s::uuid) as id

-- migrate_quarantine_reason --
update x_migrate_quarantine set reason = %(reason)s, detail = %(detail)s where id = %(id)s

-- migrate_quarantine_counts --
select reason, count(*) from x_migrate_quarantine where resolution is null group by reason

-- migrate_chord_groups_known --
-- Chord header parts are drained only if their chord's group meta is in the bridge's result
-- store (celery_compat's backend keeps it under Celery's group key prefix).
select key from x_celery_results where key = any(%(keys)s::text[])

-- migrate_ledger_arguments --
-- For messages the ledger already held under their own identity (sent_by nil, ordinal 0): the
-- input of the job it points at (its arguments are read in Python, as the worker reads them), so
-- a redelivery (same arguments) is absorbed and a different message under the same key is
-- reported.
select t.task_id, t.retries, t.nesting, j.input
  from unnest(%(task_ids)s::text[], %(retries)s::int[], %(nestings)s::int[])
       as k(task_id, retries, nesting)
  join x_celery_tasks as t
    on t.task_id = k.task_id and t.retries = k.retries and t.nesting = k.nesting
   and t.sent_by = '00000000-0000-0000-0000-000000000000'::uuid and t.ordinal = 0
  join x_jobs as j on j.id = t.job_id

-- 0004_send_keys: Celery's send semantics (every message the app sends runs) and the task-id index.
-- Forward-only. Part `celery_compat` of the schema (ujobs_bridge/_internal/db/schema.py applies it after the
-- engine's, in the same locked transaction). Until the split this was the engine's
-- 0013_send_keys; a database that applied that one adopts this one (recorded, not run again).

-- The ledger no longer holds every message: only sends that carry a key (celery_compat's
-- send_keys.py): a beat occurrence and a drained broker message by their own identity
-- (sent_by = the nil uuid, ordinal 0: the rows already here keep exactly that meaning), a send
-- from a running task body by (its identity, the sending job row, its ordinal among that run's
-- sends of the identity), so a row re-run after a crash replays into the same keys while the next
-- message under the same (task id, retries) is a new one.
alter table x_celery_tasks
    add column sent_by uuid not null default '00000000-0000-0000-0000-000000000000',
    add column ordinal integer not null default 0;
alter table x_celery_tasks drop constraint x_celery_tasks_pkey;
alter table x_celery_tasks add primary key (task_id, retries, nesting, sent_by, ordinal);

-- "Which job rows belong to task id X" (the result backend's dead/revoked answer, inspect) was
-- the ledger's second role; it is now this index, on what every Celery row keeps in jsonb (its
-- headers' id, or a top-level id when the headers had to be kept as text: message_row.py). It
-- covers every Celery row, done ones too: a predicate on `state` would make every settle a
-- non-HOT update again (0012_lean_jobs keeps x_jobs' indexes off what a settle changes); the
-- retention purge bounds what it holds.
create index x_jobs_celery_task_idx
    on x_jobs ((coalesce(input -> 'headers' ->> 'id', input ->> 'id')))
    where enqueued_by = 'celery_compat';

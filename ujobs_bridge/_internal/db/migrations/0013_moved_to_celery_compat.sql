-- 0013_moved_to_celery_compat: nothing:
-- the ledger's send keys and x_jobs_celery_task_idx moved to the package that owns them.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Until the split into one migration set per package this was 0013_send_keys. Its statements are
-- now celery_compat/db/migrations/0004_send_keys.sql, part `celery_compat` of the schema, applied
-- after the engine's. This number stays (an empty step) so that the engine's versions stay
-- consecutive and a database upgraded before the split keeps its record: where `0013_send_keys` is
-- recorded, part `celery_compat` adopts its 0004_send_keys (records it without running it), since
-- those objects exist.

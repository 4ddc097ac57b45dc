-- 0010_moved_to_celery_compat: nothing:
-- Celery's task and worker events (x_celery_events) moved to the package that owns them.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Until the split into one migration set per package this was 0010_celery_events. Its statements
-- are now celery_compat/db/migrations/0003_celery_events.sql, part `celery_compat` of the schema,
-- applied after the engine's. This number stays (an empty step) so that the engine's versions stay
-- consecutive and a database upgraded before the split keeps its record: where `0010_celery_events`
-- is recorded, part `celery_compat` adopts its 0003_celery_events (records it without running it),
-- since those objects exist.

-- 0018_moved_to_celery_compat: nothing:
-- x_celery_results.status moved to the package that owns them.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Until the split into one migration set per package this was 0018_result_status. Its statements
-- are now celery_compat/db/migrations/0005_result_status.sql, part `celery_compat` of the schema,
-- applied after the engine's. This number stays (an empty step) so that the engine's versions stay
-- consecutive and a database upgraded before the split keeps its record: where `0018_result_status`
-- is recorded, part `celery_compat` adopts its 0005_result_status (records it without running it),
-- since those objects exist.

-- 0005_result_status: a stored Celery task result keeps its state beside the value, so the
-- write itself refuses to replace a SUCCESS.
-- Forward-only. Part `celery_compat` of the schema (ujobs_bridge/_internal/db/schema.py applies it after the
-- engine's, in the same locked transaction). Until the split this was the engine's
-- 0018_result_status; a database that applied that one adopts this one (recorded, not run again).

-- Celery's KeyValueStoreBackend reads the stored meta and skips the write when it says SUCCESS:
-- a read then a write, so two runs of one task id (a message replayed after its worker was
-- killed while its re-send had already run) could store RETRY over the re-send's SUCCESS, and
-- AsyncResult.get() waited forever. celery_result_set now carries the state of a task result
-- and its upsert leaves a row whose status is SUCCESS alone, atomically. Other keys (groups,
-- chord lists) carry no state and are written as before. Rows stored before this migration
-- have no status and are replaced as before, until their next write records one.
alter table x_celery_results add column status text;

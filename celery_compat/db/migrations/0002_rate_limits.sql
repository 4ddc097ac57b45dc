-- 0002_rate_limits: fleet-wide token buckets (celery_compat's rate_limit).
-- Forward-only. Part `celery_compat` of the schema (ujobs_bridge/_internal/db/schema.py applies it after the
-- engine's, in the same locked transaction). Until the split this was the engine's
-- 0005_rate_limits; a database that applied that one adopts this one (recorded, not run again).

-- One row per limited task name: the tokens left at updated_at. A take refills by elapsed time
-- times the rate (capped at the capacity) and spends one, in one row-locked statement, so every
-- worker on every machine shares the same bucket.
create table x_rate_limits (
    key         text primary key,
    tokens      double precision not null,
    updated_at  timestamptz not null
);

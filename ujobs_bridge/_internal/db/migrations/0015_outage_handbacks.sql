-- 0015_outage_handbacks: how many times a job's attempt was handed back uncounted because its
-- body ran into a database outage.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- An outage is not the job's fault, so its attempt is given back (`uncount`). But a body that
-- itself brings the outage about (a statement that crashes the server, a write that gets its
-- connection killed) would then be handed back forever, every one of its crashes uncounted.
-- The settle counts these hand-backs here; past a cap (the settle's parameter) an outage
-- hand-back counts as an attempt like a failure, so such a job ends `dead` once its attempts
-- are spent. Snoozes, suspensions and a drain's hand-back are not counted here: they are the
-- body's choice or the worker's own. No index (a settle changes it: see 0012); the constant
-- default does not rewrite the table.
alter table x_jobs add column outage_handbacks integer not null default 0;

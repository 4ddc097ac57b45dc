-- The transactional outbox: staging, the relay's lock, claim, mark and cross-database publish.
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever job logic compares time.

-- outbox_stage --
insert into x_outbox
    (job_id, name, queue, input, idempotency_key, max_attempts, priority, run_at, delay_s,
     expires_at, expires_in_s, tenant_id, traceparent, enqueued_by)
values
    (%(id)s, %(name)s, %(queue)s, %(input)s::jsonb, %(idempotency_key)s, %(max_attempts)s,
     %(priority)s, %(run_at)s, %(delay_s)s, %(expires_at)s, %(expires_in_s)s, %(tenant_id)s,
     %(traceparent)s, %(enqueued_by)s)
returning id

-- outbox_relay_lock --
-- One relay at a time per database, for the length of one batch: order needs a single reader.
select pg_try_advisory_xact_lock(7283190442)

-- outbox_claim --
-- Rows whose inserting transaction is older than every transaction still running: no earlier
-- row can still appear, so publishing in id order never lets a later row overtake an earlier one.
select id, job_id, name, queue, input::text, idempotency_key, max_attempts, priority, run_at,
       delay_s, expires_at, expires_in_s, tenant_id, traceparent, enqueued_by
  from x_outbox
 where published_at is null
   and txid < pg_snapshot_xmin(pg_current_snapshot())
 order by id
 limit %(limit)s
   for update

-- outbox_mark --
update x_outbox set published_at = now() where id = any(%(ids)s::bigint[])

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
-- Rows whose inserting transaction is older than every transaction still running that could
-- write this table: no earlier row can still appear, so publishing in id order never lets a
-- later row overtake an earlier one. xids are cluster-wide, but a transaction of another
-- database cannot write here, so the horizon is the oldest xid running in this statement's
-- snapshot (pg_current_snapshot() is the statement's) that is not positively known to belong
-- to another database (a session there, or a prepared transaction there); with none, the
-- snapshot's xmax (every xid below it has ended). An xid the activity view no longer shows
-- (it ended after the snapshot was taken) counts as ours: the check errs towards waiting.
select id, job_id, name, queue, input::text, idempotency_key, max_attempts, priority, run_at,
       delay_s, expires_at, expires_in_s, tenant_id, traceparent, enqueued_by
  from x_outbox
 where published_at is null
   and txid < coalesce(
         (select min(running.xid)
            from pg_snapshot_xip(pg_current_snapshot()) as running (xid)
           where not exists (
                   select 1 from pg_stat_activity as a
                    where a.backend_xid = running.xid::xid
                      and a.datid is distinct from (select d.oid from pg_database as d
                                                     where d.datname = current_database()))
             and not exists (
                   select 1 from pg_prepared_xacts as p
                    where p.transaction = running.xid::xid
                      and p.database <> current_database())),
         pg_snapshot_xmax(pg_current_snapshot()))
 order by id
 limit %(limit)s
   for update

-- outbox_mark --
update x_outbox set published_at = now() where id = any(%(ids)s::bigint[])

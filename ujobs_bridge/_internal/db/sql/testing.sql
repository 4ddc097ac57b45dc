-- The test kit's statements (ujobs_bridge.testing): a private database per test session, emptied
-- between tests, one job claimed by id for ``perform``, and the count ``run_until_idle`` waits
-- on. The engine itself never runs these.
-- Named blocks: `-- name --` on its own line. ``{name}`` is filled by psycopg.sql.Identifier
-- (a generated database name), never by text.

-- testing_database_create --
create database {name}

-- testing_database_drop --
drop database if exists {name} with (force)

-- testing_tables_empty --
-- Every x_ table of the current schema except the migration record, discovered from the catalog
-- so that a table a later migration adds is emptied too. Only the tables holding rows are
-- truncated (a truncate swaps files even for an empty table), all in one statement, with
-- cascade for the foreign keys between them.
do $$
declare
    target regclass;
    has_rows boolean;
    filled text[] := array[]::text[];
begin
    for target in
        select c.oid::regclass
          from pg_class c
         where c.relnamespace = current_schema()::regnamespace
           and c.relkind in ('r', 'p')
           and c.relname like 'x\_%'
           and c.relname <> 'x_schema_version'
         order by c.relname
    loop
        execute format('select exists (select from %s)', target) into has_rows;
        if has_rows then
            filled := filled || target::text;
        end if;
    end loop;
    if cardinality(filled) > 0 then
        execute 'truncate ' || array_to_string(filled, ', ') || ' cascade';
    end if;
end
$$

-- testing_job_claim --
-- ONE job, by id, claimed with exactly the columns job_claim sets (state, attempt counted,
-- deliveries, lease token and expiry, claimed_by, the x_job_leases row with its worker, time,
-- lease length and start (``perform`` passes start 1: it runs at once), the pick-up latency
-- counts), whatever its queue,
-- priority or run_at:
-- ``perform`` runs the job it just inserted, not whichever job is first in line.
with picked as materialized (
    select id from x_jobs
     where id = %(id)s
       and claimable
     for update
), claimed as (
    update x_jobs as j
       set state = 'running', attempt = j.attempt + 1, deliveries = j.deliveries + 1,
           lease_token = %(token)s,
           lease_expires_at = now() + make_interval(secs => %(lease_s)s),
           claimed_by = %(worker)s, updated_at = now()
      from picked
     where j.id = picked.id
    returning j.id, j.name, j.queue, j.input, j.attempt, j.max_attempts, j.lease_token,
              (j.expires_at is not null and j.expires_at <= coalesce(%(now)s, now())) as expired,
              j.deliveries, j.traceparent, j.run_at, j.priority,
              greatest(0, extract(epoch from now() - greatest(j.run_at, j.created_at)))::float8
                  as wait_s
), ordered as materialized (
    select id, name, queue, input, attempt, max_attempts, lease_token, expired, deliveries,
           traceparent, run_at,
           row_number() over (order by priority desc, run_at, id) <= %(start)s as started
      from claimed
), leased as (
    insert into x_job_leases (job_id, token, worker, claimed_at, attempt, started_at, lease_s)
    select id, lease_token, %(worker)s, now(), attempt,
           case when started then now() end, %(lease_s)s
      from ordered
), timed as (
    insert into x_job_counts as c (minute, queue, backend, picked, wait_sum_s, wait_max_s)
    select date_trunc('minute', now()), queue, pg_backend_pid(), count(*), sum(wait_s),
           max(wait_s)
      from claimed
     group by queue
    on conflict (minute, queue, backend)
    do update set picked = c.picked + excluded.picked,
                  wait_sum_s = c.wait_sum_s + excluded.wait_sum_s,
                  wait_max_s = greatest(c.wait_max_s, excluded.wait_max_s)
)
select o.id, o.name, o.queue, o.input, o.attempt, o.max_attempts, o.lease_token, o.expired,
       o.deliveries, o.traceparent, o.run_at, o.started
  from ordered as o

-- testing_jobs_due --
-- How many jobs a worker of these queues and job names could claim now (job_claim's filter).
select count(id)
  from x_jobs
 where state in ('ready', 'sleeping', 'waiting')
   and queue = any(%(queues)s::text[])
   and name = any(%(names)s::text[])
   and run_at <= coalesce(%(now)s, now())

-- testing_pgbouncer_clients --
-- PgBouncer's admin console (database ``pgbouncer``): one row per client connection.
show clients

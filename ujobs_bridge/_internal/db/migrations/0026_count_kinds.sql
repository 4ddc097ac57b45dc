-- 0026_count_kinds: the per-minute counts of finished jobs (the dashboard's chart) keep a dead
-- job's failure kind (0024), so the chart shows a package's own failures (FAILURE) apart from
-- the engine's dead letters, as every other view does.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.
--
-- x_job_failure_counts  One row per (minute, queue, backend, kind): the jobs a settle ended dead
--                       with that failure kind, added to its own backend's row as x_job_counts'
--                       are (migration 0014); x_job_counts.dead keeps the dead letters only.
--                       A table of its own, not a key column of x_job_counts: the statements of
--                       a worker still running the previous release (ON CONFLICT on
--                       x_job_counts' key) keep working while the fleet is upgraded, counting
--                       every dead job as before. Purged with x_job_counts (ujobs.purge).
create table x_job_failure_counts (
    minute   timestamptz not null,
    queue    text not null,
    backend  int not null,
    kind     text not null,
    jobs     bigint not null default 0,
    primary key (minute, queue, backend, kind)
) with (
    fillfactor = 50,  -- room for the HOT versions of a counter updated many times a minute
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- The last hour's failures with a kind were counted as dead letters: moved to their kind, so the
-- chart is right from the upgrade on. Read from x_jobs_dead_idx (dead_at is the updated_at of
-- the settle that made the row dead: its now(), the instant the counts use); the dead letters'
-- row of backend 0 takes the difference (the chart sums over backends).
with failed as (
    select date_trunc('minute', dead_at) as minute, queue, failure_kind as kind, count(*) as jobs
      from x_jobs
     where dead_at is not null and dead_at > now() - interval '1 hour'
       and failure_kind is not null
     group by 1, 2, 3
), kinds as (
    insert into x_job_failure_counts (minute, queue, backend, kind, jobs)
    select minute, queue, 0, kind, jobs from failed
)
insert into x_job_counts as c (minute, queue, backend, dead)
select minute, queue, 0, -sum(jobs) from failed group by minute, queue
on conflict (minute, queue, backend) do update set dead = c.dead + excluded.dead;

-- The roles `db grant` gave x_job_counts carry on through this upgrade without another grant: a
-- role that may write x_job_counts (a worker's duty) may write this table, one that may read it
-- (a reader, an operator) may read it. The settle names both tables, so a worker role without
-- this grant could settle nothing until `db grant` ran again.
do $do$
declare
    v_role regrole;
    v_writes bool;
begin
    for v_role, v_writes in
        select a.grantee::regrole, bool_or(a.privilege_type = 'INSERT')
          from pg_class as c cross join lateral aclexplode(c.relacl) as a
         where c.oid = 'x_job_counts'::regclass and a.privilege_type in ('SELECT', 'INSERT')
           and a.grantee <> 0 and a.grantee <> c.relowner
         group by a.grantee
    loop
        if v_writes then
            execute format('grant select, insert, update, delete on table x_job_failure_counts to %s',
                           v_role);
        else
            execute format('grant select on table x_job_failure_counts to %s', v_role);
        end if;
    end loop;
end
$do$;

-- 0022_lease_starts: a lease records when its body started and how long it is; a rescue counts
-- the database's uptime.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- started_at: when the worker handed the job to a body (the claim itself, for the rows it
-- starts at once; a statement of the claim loop for a prefetched row, written before the body
-- is given the job). A worker that dies (SIGKILL, the OOM killer, a segfault) charges an
-- attempt only to the jobs whose body started; the rescue hands the others back uncounted.
-- lease_s: the lease's length, as the worker that holds it renews it. A rescue waits until the
-- database has been up again for that long (x_server_up_since below), so a worker that comes
-- back from an outage within one lease of the database's return still holds what it held.
-- A lease row without lease_s was written by a worker from before this migration: it is
-- judged as before (started, and no wait after a restart beyond the rescuer's own lease).
-- No index: both are read by the rescue only, through the rows' primary key.
alter table x_job_leases add column started_at timestamptz, add column lease_s float8;

-- Since when the server has been serving: the start of its WAL writer, which the postmaster
-- starts once crash recovery (or a standby's promotion) is over, so a long recovery does not
-- eat into the grace; a role that may not see other processes in pg_stat_activity (it needs
-- pg_read_all_stats) gets the postmaster's start instead. A backend crash makes the
-- postmaster restart every process without restarting itself: the WAL writer's start sees that
-- too, pg_postmaster_start_time() does not.
create function x_server_up_since() returns timestamptz
    language sql stable
    as $$
        select coalesce(
            (select max(backend_start) from pg_stat_activity where backend_type = 'walwriter'),
            pg_postmaster_start_time())
    $$;

-- 0019_claim_queue: the claim's set moves out of x_jobs, so a plain job's claim is HOT too.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Why: an update is HOT only when no column any index of the table names changes (0012). The
-- claim index was partial on `claimable`, which the claim turns false: the claim (ready ->
-- running) wrote a new entry into every x_jobs index, so at most half of a plain job's updates
-- (claim, settle) could be HOT. The claimable jobs (ready, sleeping, waiting) now have a row of
-- their own in x_job_claimable, with the claim's order in its index; x_jobs keeps no index on
-- `claimable`, so the claim, the settle and every heartbeat of a plain job change no indexed
-- column of x_jobs.
--
-- x_job_claimable holds exactly the x_jobs rows whose `claimable` is true, with the columns the
-- claim filters and orders by (copies: queue, name and priority never change once a job exists;
-- run_at is copied again whenever it changes while the job stays claimable). It is kept by
-- triggers on x_jobs (one per insert statement, one per row updated or deleted) rather than by
-- each statement's own text, so that no statement (of this package, celery_compat, migrate, an
-- operator's hand-written update) can leave it inexact: a job enters when it is inserted
-- claimable or becomes claimable (a retry, a suspension, a rescue, a requeue), its copy
-- follows run_at while it stays claimable (an event's or a step's wake-up),
-- and it leaves when it stops being claimable (the claim, a cancel, an expiry, a dead letter) or
-- is deleted. The update and delete triggers' WHEN clauses are evaluated by the server before
-- any function runs, so the writes that do not move a job in or out (a settle to done, a
-- heartbeat, which does not even name `state`, the purge of finished jobs) cost no call.
--
-- Lock order: a statement that changes a job's claimability locks the x_jobs row first (its
-- update), then the x_job_claimable row (the trigger). The claim scans x_job_claimable and locks
-- its rows with SKIP LOCKED, then the x_jobs rows, again with SKIP LOCKED, so it never waits on
-- a row and cannot deadlock with them.

-- No job may change between the copy below and the triggers that keep the copy exact: writers
-- wait for this migration's commit (readers do not).
lock table x_jobs in share row exclusive mode;

-- No primary key: the claim index's key ends with the job id, so it finds any row by the key a
-- trigger reads from the job's old version (the copy always equals it), and a second index on
-- id would cost every job one more index entry and dead entry (the bench's lean-table cell
-- shows the size). Exactly one row per claimable job is the triggers' invariant
-- (the test suite checks it after every test).
create table x_job_claimable (
    id        uuid not null,
    queue     text not null,
    name      text not null,
    priority  smallint not null,
    run_at    timestamptz not null
) with (
    -- Every job is one insert and one delete here: vacuumed after 1,000 dead rows, no delay.
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
create index x_job_claimable_claim_idx on x_job_claimable (queue, priority desc, run_at, id);

insert into x_job_claimable (id, queue, name, priority, run_at)
select id, queue, name, priority, run_at from x_jobs where claimable;

drop index x_jobs_claim_idx;

-- The insert's rows enter set-based, once per statement, from its transition table: a row
-- trigger would pay a PL/pgSQL call per row, which costs a batch insert more than this does.
create function x_job_claimable_enter() returns trigger language plpgsql as $fn$
begin
    insert into x_job_claimable (id, queue, name, priority, run_at)
    select id, queue, name, priority, run_at from inserted where claimable;
    return null;
end
$fn$;

-- The row a job had is found by the claim index's whole key, read from the job's old version.
create function x_job_claimable_move() returns trigger language plpgsql as $fn$
begin
    if old.claimable then
        delete from x_job_claimable
         where queue = old.queue and priority = old.priority and run_at = old.run_at
           and id = old.id;
    end if;
    if new.claimable then
        insert into x_job_claimable (id, queue, name, priority, run_at)
        values (new.id, new.queue, new.name, new.priority, new.run_at);
    end if;
    return null;
end
$fn$;

create function x_job_claimable_leave() returns trigger language plpgsql as $fn$
begin
    delete from x_job_claimable
     where queue = old.queue and priority = old.priority and run_at = old.run_at and id = old.id;
    return null;
end
$fn$;

-- A delete, not a truncate: a truncate of several tables at once (the test kit's) may name
-- x_job_claimable in the same statement, which a nested truncate of it refuses.
create function x_job_claimable_empty() returns trigger language plpgsql as $fn$
begin
    delete from x_job_claimable;
    return null;
end
$fn$;

create trigger x_job_claimable_insert_trg
    after insert on x_jobs
    referencing new table as inserted
    for each statement
    execute function x_job_claimable_enter();

create trigger x_job_claimable_update_trg
    after update of state, run_at, queue, name, priority on x_jobs
    for each row when (old.claimable is distinct from new.claimable
                       or (new.claimable
                           and (old.run_at, old.queue, old.name, old.priority)
                               is distinct from (new.run_at, new.queue, new.name, new.priority)))
    execute function x_job_claimable_move();

create trigger x_job_claimable_delete_trg
    after delete on x_jobs
    for each row when (old.claimable)
    execute function x_job_claimable_leave();

create trigger x_job_claimable_truncate_trg
    after truncate on x_jobs
    for each statement
    execute function x_job_claimable_empty();

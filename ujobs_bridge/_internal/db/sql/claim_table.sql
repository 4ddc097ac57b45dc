-- The claim table's upkeep (x_job_claimable, migration 0019): the worker's vacuum of it.
-- Named blocks: `-- name --` on its own line.

-- claim_table_vacuum_allowed --
-- Whether this role may vacuum x_job_claimable (before PostgreSQL 17: its owner, a member of the
-- owner's role, the database's owner or a superuser); a role that may not would only get a
-- warning per vacuum, so the worker asks once per connection and leaves it to autovacuum.
select pg_has_role(c.relowner, 'USAGE') or pg_has_role(d.datdba, 'USAGE')
  from pg_class as c, pg_database as d
 where c.oid = 'x_job_claimable'::regclass and d.datname = current_database()

-- claim_table_live_rows --
-- The live rows of x_job_claimable as the statistics count them: the worker vacuums the table
-- once it has claimed about that many jobs since its last vacuum (worker/claims.py).
select greatest(pg_stat_get_live_tuples('x_job_claimable'::regclass), 0)

-- claim_table_vacuum --
-- Why: every job is one insert and one delete in x_job_claimable, so its claim index's pages
-- empty from the left as fast as jobs are claimed. A btree page left empty is reused only after
-- two vacuums: the first deletes it, the second finds that no transaction can still need it and
-- puts it in the free space map (the first could only if no transaction older than the deletion
-- were running when it ended, which under load is never). Between vacuums the index therefore
-- grows by about two vacuum intervals' worth of claims, and its file never shrinks: with
-- autovacuum (at most one per autovacuum_naptime, 1 s at the least) it ended at 2-3 MiB after
-- 300,000-1,000,000 jobs at ~7,500 jobs/s for ~3,000 live entries (~25 pages). Vacuumed after
-- every max(CLAIM_VACUUM_EVERY, live rows) claims, the index stays within about three times its
-- live size (and 2,000 entries) at any rate, and a large backlog is not read again and again.
-- SKIP_LOCKED: a vacuum of it already running (autovacuum, another worker) is enough, this one
-- returns at once. TRUNCATE false: truncating the heap takes an ACCESS EXCLUSIVE lock, which
-- the claims would wait on, to give back pages the next inserts take again. INDEX_CLEANUP on:
-- the index is what this vacuum is for, even when few heap pages have dead items.
vacuum (skip_locked, truncate false, index_cleanup on) x_job_claimable

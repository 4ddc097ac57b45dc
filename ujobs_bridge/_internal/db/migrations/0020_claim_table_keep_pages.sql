-- 0020_claim_table_keep_pages: no vacuum gives back x_job_claimable's trailing heap pages.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Why: every job is one row in and one row out of x_job_claimable (0019), so at each vacuum the
-- pages at the end of its heap, which the newest jobs filled and the claims emptied, are often
-- all empty (the autovacuum log of the lean-table cell: "55 removed" pages, vacuum after
-- vacuum). Giving them back to the file system takes an ACCESS EXCLUSIVE lock on the table,
-- which every claim and every enqueue's trigger then waits on, to shrink a file that the next
-- inserts grow again at once. The worker's own vacuum (db/sql/claim_table.sql) already says
-- TRUNCATE false; this makes autovacuum and a plain VACUUM keep the pages too.
alter table x_job_claimable set (vacuum_truncate = false);
